// predict's heatmaps of one slide: its tiles' scores as QuPath measurements (GeoJSON) and as
// a colour overlay on the slide's picture (PNG).
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "mltool/io/tile_store.hpp"
#include "mltool/slide/geojson_export.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "predict_parts.hpp"
#ifdef MLTOOL_HAVE_SLIDE
#include "mltool/slide/heatmap.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/qc.hpp"
#endif

namespace mltool::predict {
namespace {

using json = nlohmann::json;
using TileIndex = std::unordered_map<std::string, std::size_t>;

#ifdef MLTOOL_HAVE_SLIDE
// The slide's picture at `long_side`: its thumbnail when the slide file opens, else a light
// grey canvas of its proportions.
io::RgbImage slide_picture(const json& record, int long_side, const io::DicomwebOptions& web) {
  try {
    const auto slide = slide::Slide::open(record.at("path").get<std::string>(), web);
    return slide::read_qc_image(slide, long_side);
  } catch (const Error& e) {
    log::warn(std::string(e.what()) + ": the heatmap is drawn on a blank picture");
  }
  const double w = record.at("width").get<double>(), h = record.at("height").get<double>();
  const double scale = long_side / std::max({w, h, 1.0});
  io::RgbImage out{std::max(1, static_cast<int>(std::lround(w * scale))),
                   std::max(1, static_cast<int>(std::lround(h * scale))),
                   {}};
  out.pixels.assign(static_cast<std::size_t>(out.width) * out.height * 3, 235);
  return out;
}

// SLIDE.png: `scores.value(i)` in [0, 1] over each tile i of the slide.
void write_heatmap_png(const io::TileStore& tiles, const std::string& slide,
                       const std::string& file, const TileIndex& index, const HeatmapScores& scores,
                       std::int64_t drawn) {
  const json record = *tiles.record("slides", slide);
  const json t = *tiles.record("tiles", slide);
  const io::RgbImage picture = slide_picture(record, scores.size, scores.web);
  const double sx = picture.width / record.at("width").get<double>();
  const double sy = picture.height / record.at("height").get<double>();
  const double size = record.at("size_level0").get<double>();
  std::vector<slide::HeatTile> heat;
  for (std::size_t i = 0; i < t.at("row").size(); ++i) {
    const auto it = index.find(
        io::tile_key(slide, t["row"][i].get<std::int64_t>(), t["col"][i].get<std::int64_t>()));
    if (it == index.end()) continue;
    const double x = t["x"][i].get<double>(), y = t["y"][i].get<double>();
    heat.push_back({x * sx, y * sy, (x + size) * sx, (y + size) * sy, scores.value(it->second)});
  }
  const std::vector<std::string> caption = {slide,
                                            "colour: " + scores.what + ", from 0 (blue) to 1 (red)",
                                            std::to_string(drawn) + " tiles"};
  io::write_png(file, slide::heatmap_picture(picture, heat, caption));
}
#endif

}  // namespace

bool slide_heatmaps_exist(const std::string& dir, const std::string& slide) {
  bool png = true;
#ifdef MLTOOL_HAVE_SLIDE
  png = util::exists(util::join_path(dir, slide + ".png"));
#endif
  return png && util::exists(util::join_path(dir, slide + ".geojson"));
}

std::int64_t write_slide_heatmaps(const io::TileStore& tiles, const std::string& slide,
                                  const std::vector<std::string>& keys, const std::string& dir,
                                  const HeatmapScores& scores) {
  TileIndex index;
  index.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) index.emplace(keys[i], i);
  const auto report =
      slide::write_slide_geojson(tiles, slide, util::join_path(dir, slide + ".geojson"),
                                 slide::TileObjectType::tile, [&](const std::string& key, json& m) {
                                   const auto it = index.find(key);
                                   if (it == index.end()) return false;
                                   scores.measure(it->second, m);
                                   return true;
                                 });
#ifdef MLTOOL_HAVE_SLIDE
  write_heatmap_png(tiles, slide, util::join_path(dir, slide + ".png"), index, scores,
                    report.tiles);
#endif
  return report.tiles;
}

}  // namespace mltool::predict
