// segment_slide (segmenter.hpp): a slide read in overlapping windows at the model's µm/px, the
// windows classified in batches, their central parts stitched row by row into a class map of
// bounded size. Memory: one row of windows (its pixels and classes) and one row of cells' class
// counts, whatever the slide's size.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "mltool/slide/geometry.hpp"
#include "mltool/slide/image.hpp"
#include "mltool/slide/segmenter.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/parallel.hpp"

namespace mltool::slide {
namespace {

using json = nlohmann::json;

// The part of a contract that names classes: a list of distinct names of `classes`.
std::vector<std::string> class_names(const json& doc, const char* key, const std::string& where,
                                     const std::set<std::string>* known) {
  if (!doc.contains(key) || !doc.at(key).is_array())
    throw InputError(where + ": '" + key + "' must be a list of class names");
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& v : doc.at(key)) {
    if (!v.is_string() || v.get<std::string>().empty())
      throw InputError(where + ": '" + key + "' holds " + v.dump() + ", not a class name");
    const std::string name = v.get<std::string>();
    if (known && !known->count(name))
      throw InputError(where + ": '" + key + "' names '" + name + "', which is not in 'classes'");
    if (!seen.insert(name).second)
      throw InputError(where + ": '" + key + "' names '" + name + "' twice");
    out.push_back(name);
  }
  return out;
}

// doc[key], a number in lo..hi (`range` says so in the message).
double number_field(const json& doc, const char* key, const std::string& where, double lo,
                    double hi, const char* range) {
  if (!doc.contains(key) || !doc.at(key).is_number())
    throw InputError(where + ": '" + key + "' must be a number");
  const double v = doc.at(key).get<double>();
  if (!(v >= lo && v <= hi))
    throw InputError(where + ": '" + key + "' is " + doc.at(key).dump() + "; it must lie in " +
                     range);
  return v;
}

int index_of(const std::vector<std::string>& names, const std::string& name) {
  return static_cast<int>(std::find(names.begin(), names.end(), name) - names.begin());
}

}  // namespace

bool SegmenterContract::is_tissue(int index) const {
  return index >= 0 && index < static_cast<int>(classes.size()) &&
         std::find(tissue.begin(), tissue.end(), classes[index]) != tissue.end();
}

bool SegmenterContract::is_artifact(int index) const {
  return index >= 0 && index < static_cast<int>(classes.size()) &&
         std::find(artifacts.begin(), artifacts.end(), classes[index]) != artifacts.end();
}

SegmenterContract parse_segmenter_contract(const std::string& text, const std::string& file) {
  const std::string where = file + ": " + kSegmenterContractFile;
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    throw InputError(where +
                     " is not a JSON object (--tissue takes a segmenter: see "
                     "docs/tile.md#the-segmenter-contract)");
  if (doc.value("kind", std::string()) != "segmenter")
    throw InputError(where + ": 'kind' is " +
                     (doc.contains("kind") ? doc.at("kind").dump() : std::string("missing")) +
                     ", not \"segmenter\" (an encoder goes to extract --model, not --tissue)");
  SegmenterContract c;
  c.mpp = number_field(doc, "mpp", where, 0.05, 100, "0.05..100");
  const double size = number_field(doc, "input_size", where, 32, 4096, "32..4096");
  if (size != std::floor(size)) throw InputError(where + ": 'input_size' must be a whole number");
  c.input_size = static_cast<int>(size);
  c.classes = class_names(doc, "classes", where, nullptr);
  if (c.classes.size() < 2 || c.classes.size() > 255)
    throw InputError(where + ": 'classes' must name 2 to 255 classes, not " +
                     std::to_string(c.classes.size()));
  const std::set<std::string> known(c.classes.begin(), c.classes.end());
  c.tissue = class_names(doc, "tissue", where, &known);
  if (c.tissue.empty()) throw InputError(where + ": 'tissue' must name at least one class");
  c.artifacts = doc.contains("artifacts") ? class_names(doc, "artifacts", where, &known)
                                          : std::vector<std::string>{};
  for (const auto& a : c.artifacts)
    if (index_of(c.tissue, a) < static_cast<int>(c.tissue.size()))
      throw InputError(where + ": class '" + a + "' is both in 'tissue' and in 'artifacts'");
  c.doc = std::move(doc);
  return c;
}

void check_segmenter_file(const std::string& text, const std::string& others) {
  if (text.empty() || !util::exists(text) || util::is_directory(text))
    throw UsageError("--tissue takes " + others + " or a TorchScript segmenter file; '" + text +
                     "' is none of them (no such file). The published networks are exported "
                     "with scripts/encoders.py export grandqc-tissue|grandqc-artifact|hest-tissue "
                     "-o FILE.pt (docs/segmenters.md)");
}

int window_count(std::int64_t length, int input_size) {
  const std::int64_t stride = input_size - 2 * (input_size / 8);
  return static_cast<int>((length + stride - 1) / stride);
}

namespace {

// How the model's image of a slide is read: its size, and the level and scale behind it.
struct ModelImage {
  std::int64_t width = 0, height = 0;  // model pixels
  double f = 1;                        // level-0 pixels per model pixel
  int level = 0;
  double level_downsample = 1;
  std::int64_t level_width = 0, level_height = 0;
  int size = 0, margin = 0, stride = 0;  // S, S/8, S - 2 S/8
};

ModelImage plan_model_image(const Slide& slide, double slide_mpp, const SegmenterContract& c) {
  const Level& l0 = slide.geometry().levels[0];
  if (c.mpp < slide_mpp * (1 - kLevelTolerance))
    throw InputError(at_file(slide.path(), "the segmenter works at " + util::number_text(c.mpp) +
                                               " µm/px, finer than the slide's level 0 (" +
                                               util::number_text(slide_mpp) +
                                               " µm/px): it would have to be enlarged"));
  SlideGeometry g = slide.geometry();
  g.mpp_x = g.mpp_y = slide_mpp;
  const ReadPlan plan = plan_read(g, c.mpp, std::nullopt, c.input_size, slide.path());
  ModelImage m;
  m.f = plan.target_downsample;
  m.width = static_cast<std::int64_t>(std::ceil(static_cast<double>(l0.width) / m.f - 1e-9));
  m.height = static_cast<std::int64_t>(std::ceil(static_cast<double>(l0.height) / m.f - 1e-9));
  m.level = plan.level;
  m.level_downsample = plan.level_downsample;
  m.level_width = slide.geometry().levels[plan.level].width;
  m.level_height = slide.geometry().levels[plan.level].height;
  m.size = c.input_size;
  m.margin = c.input_size / 8;
  m.stride = c.input_size - 2 * m.margin;
  return m;
}

// Window (i, j) into `out` (S × S × 3): the model pixels it covers inside the image, read at
// the level and resampled to the model's scale, white elsewhere.
void read_window(const Slide& slide, const ModelImage& m, std::int64_t i, std::int64_t j,
                 std::uint8_t* out) {
  std::fill(out, out + static_cast<std::size_t>(m.size) * m.size * 3, std::uint8_t{255});
  const std::int64_t ox = i * m.stride - m.margin, oy = j * m.stride - m.margin;
  const std::int64_t cx0 = std::max<std::int64_t>(ox, 0), cy0 = std::max<std::int64_t>(oy, 0);
  const std::int64_t cx1 = std::min(ox + m.size, m.width), cy1 = std::min(oy + m.size, m.height);
  const double r = m.f / m.level_downsample;  // level pixels per model pixel
  const std::int64_t lx = std::llround(cx0 * r), ly = std::llround(cy0 * r);
  const std::int64_t lw = std::min<std::int64_t>(std::llround(cx1 * r), m.level_width) - lx;
  const std::int64_t lh = std::min<std::int64_t>(std::llround(cy1 * r), m.level_height) - ly;
  if (lw <= 0 || lh <= 0) return;
  std::vector<std::uint8_t> level_px(static_cast<std::size_t>(lw * lh * 3));
  slide.read_rgb(std::llround(lx * m.level_downsample), std::llround(ly * m.level_downsample),
                 m.level, lw, lh, level_px.data());
  const int w = static_cast<int>(std::min<std::int64_t>(cx1 - cx0, std::llround(lw / r)));
  const int h = static_cast<int>(std::min<std::int64_t>(cy1 - cy0, std::llround(lh / r)));
  io::RgbImage px;
  if (w == lw && h == lh) {
    px.width = w, px.height = h, px.pixels = std::move(level_px);
  } else {
    px = resize(level_px.data(), static_cast<int>(lw), static_cast<int>(lh), w, h);
  }
  for (int y = 0; y < h; ++y)
    std::copy_n(px.pixels.data() + static_cast<std::size_t>(y) * w * 3,
                static_cast<std::size_t>(w) * 3,
                out + ((static_cast<std::size_t>(cy0 - oy + y) * m.size) + (cx0 - ox)) * 3);
}

// Adds model rows to the map's cells, one row of cells at a time (counts per class held for
// the row being filled).
class CellAccumulator {
 public:
  CellAccumulator(ClassMap& map, const SegmenterContract& c)
      : map_(map), contract_(c), classes_(static_cast<int>(c.classes.size())) {
    counts_.assign(static_cast<std::size_t>(map.width) * classes_, 0);
    map.class_pixels.assign(static_cast<std::size_t>(classes_), 0);
  }

  // Model row y (map_.model_width classes).
  void add_row(std::int64_t y, const std::uint8_t* row) {
    for (std::int64_t x = 0; x < map_.model_width; ++x) {
      ++counts_[static_cast<std::size_t>(x / map_.cell) * classes_ + row[x]];
      ++map_.class_pixels[row[x]];
    }
    if ((y + 1) % map_.cell == 0 || y + 1 == map_.model_height) flush(y / map_.cell);
  }

 private:
  void flush(std::int64_t cy) {
    for (int cx = 0; cx < map_.width; ++cx) {
      const std::uint32_t* n = counts_.data() + static_cast<std::size_t>(cx) * classes_;
      int best = 0;
      std::uint32_t tissue = 0, artifact = 0;
      for (int k = 0; k < classes_; ++k) {
        if (n[k] > n[best]) best = k;
        if (contract_.is_tissue(k)) tissue += n[k];
        if (contract_.is_artifact(k)) artifact += n[k];
      }
      const std::size_t at = static_cast<std::size_t>(cy) * map_.width + cx;
      map_.classes[at] = static_cast<std::uint8_t>(best);
      map_.tissue[at] = static_cast<std::uint16_t>(tissue);
      map_.artifact[at] = static_cast<std::uint16_t>(artifact);
    }
    std::fill(counts_.begin(), counts_.end(), 0u);
  }

  ClassMap& map_;
  const SegmenterContract& contract_;
  int classes_;
  std::vector<std::uint32_t> counts_;
};

ClassMap empty_map(const ModelImage& m) {
  ClassMap map;
  map.level0_per_pixel = m.f;
  map.model_width = m.width, map.model_height = m.height;
  const std::int64_t longer = std::max(m.width, m.height);
  map.cell = static_cast<int>(
      std::max<std::int64_t>(1, (longer + kMaxClassMapSide - 1) / kMaxClassMapSide));
  if (map.cell > 255)
    throw ResourceError("the segmenter's image of the slide is " + std::to_string(m.width) + "x" +
                        std::to_string(m.height) + " pixels, more than its class map can hold");
  map.width = static_cast<int>((m.width + map.cell - 1) / map.cell);
  map.height = static_cast<int>((m.height + map.cell - 1) / map.cell);
  const std::size_t cells = static_cast<std::size_t>(map.width) * map.height;
  map.classes.assign(cells, 0);
  map.tissue.assign(cells, 0);
  map.artifact.assign(cells, 0);
  return map;
}

}  // namespace

ClassMap segment_slide(const Slide& slide, double slide_mpp, Segmenter& model, int threads) {
  const auto start = std::chrono::steady_clock::now();
  const SegmenterContract& c = model.contract();
  const ModelImage m = plan_model_image(slide, slide_mpp, c);
  ClassMap map = empty_map(m);
  CellAccumulator cells(map, c);
  const int nx = window_count(m.width, m.size), ny = window_count(m.height, m.size);
  const std::size_t window_px = static_cast<std::size_t>(m.size) * m.size;
  std::vector<std::uint8_t> rgb(window_px * 3 * nx), classes(window_px * nx);
  std::vector<std::uint8_t> row(static_cast<std::size_t>(m.width));
  const int batch = std::max(1, model.batch());
  for (int j = 0; j < ny; ++j) {
    util::parallel_for(static_cast<std::size_t>(nx), threads, [&](std::size_t i) {
      read_window(slide, m, static_cast<std::int64_t>(i), j, rgb.data() + i * window_px * 3);
    });
    for (int i = 0; i < nx; i += batch)
      model.classify(rgb.data() + i * window_px * 3, std::min(batch, nx - i),
                     classes.data() + i * window_px);
    map.windows += nx;
    const std::int64_t y_end = std::min<std::int64_t>((j + 1) * std::int64_t{m.stride}, m.height);
    for (std::int64_t y = std::int64_t{j} * m.stride; y < y_end; ++y) {
      const std::int64_t wy = y - (std::int64_t{j} * m.stride - m.margin);
      for (std::int64_t x = 0; x < m.width; ++x) {
        const std::int64_t i = x / m.stride;
        const std::int64_t wx = x - (i * m.stride - m.margin);
        row[x] = classes[i * window_px + wy * m.size + wx];
      }
      cells.add_row(y, row.data());
    }
  }
  map.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return map;
}

}  // namespace mltool::slide
