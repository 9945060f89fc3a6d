#include "mltool/slide/tiler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <set>

#include "mltool/io/sha256.hpp"
#include "mltool/slide/geometry.hpp"
#include "mltool/slide/image.hpp"
#include "mltool/slide/info.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/qc.hpp"
#include "mltool/slide/region_reader.hpp"
#include "mltool/slide/tissue.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/parallel.hpp"
#include "own_jpeg_tiles.hpp"
#include "roi_tiles.hpp"
#include "slide_mpp.hpp"
#include "thumbnail.hpp"
#include "tile_records.hpp"
#include "tile_writer.hpp"

namespace mltool::slide {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Each tile covers about 8 × 8 thumbnail pixels, and no thumbnail side exceeds 4096.
Thumbnail make_thumbnail(const Slide& slide, double tile_level0) {
  const Level& l0 = slide.geometry().levels[0];
  return slide_thumbnail(
      slide,
      std::max(tile_level0 / 8.0, static_cast<double>(std::max(l0.width, l0.height)) / 4096.0));
}

// What the store holds of a slide: nothing complete, the slide complete, or the slide
// published without tiles whose source failed (its done marker lists them).
enum class Stored { none, complete, incomplete };

// What the store holds of this slide (complete: `report` says so, but for its seconds).
// Another slide under the same id is refused.
Stored already_tiled(const io::TileStore& store, const std::string& path, const Identity& who,
                     bool allow_missing_tiles, SlideReport& report) {
  const auto existing = store.record("slides", who.id);
  if (!existing) return Stored::none;
  const std::string other_hash = existing->value("quickhash", "");
  const std::string other_path = existing->value("path", "");
  const bool web = io::is_dicomweb_url(who.abs_path) && io::is_dicomweb_url(other_path);
  if (other_hash != who.quickhash || (who.quickhash.empty() && other_path != who.abs_path && !web))
    throw InputError(at_file(path, "slide id '" + who.id + "' is already used in " + store.path() +
                                       " by " + other_path +
                                       ", a different slide (OpenSlide quickhash differs); "
                                       "rename one of the files"));
  const auto done = store.record("done", who.id);
  if (!done) return Stored::none;
  report.failed_tiles = recorded_failures(*done, store.path() + ": meta 'done/" + who.id + "'");
  if (!report.failed_tiles.empty() && !allow_missing_tiles) return Stored::incomplete;
  report.status = SlideStatus::skipped;
  report.tiles = done->value("tiles", std::int64_t{0});
  report.grid_tiles = existing->at("grid").value("cols", std::int64_t{0}) *
                      existing->at("grid").value("rows", std::int64_t{0});
  if (done->contains("tissue_fraction") && done->at("tissue_fraction").is_number())
    report.tissue_fraction = done->at("tissue_fraction").get<double>();
  report.mpp_source = existing->value("mpp_source", "");  // "" in stores of earlier versions
  report.mpp_level0_as_target = existing->value("mpp_level0_as_target", false);
  report.reader = existing->value("reader", done->value("reader", ""));
  report.reader_version = existing->value("reader_version", "");
  if (existing->contains("passthrough") && existing->at("passthrough").is_object())
    report.passthrough = existing->at("passthrough").value("tiles", std::int64_t{0});
  if (existing->contains("mpp") && existing->at("mpp").is_number())
    report.mpp = existing->at("mpp").get<double>();
  return Stored::complete;
}

// --tissue MODEL.pt: the slide segmented at the model's µm/px; tiles kept by their share in
// tissue classes (--min-tissue) and in artifact classes (--max-artifact).
void select_by_model(const Slide& slide, const ReadPlan& plan, const TileGrid& grid,
                     const TileJob& job, Selection& out) {
  const auto& s = job.settings;
  if (!plan.mpp)
    throw InputError(at_file(slide.path(),
                             "--tissue MODEL.pt reads the slide at the segmenter's µm/px, and the "
                             "slide's µm/px is unknown: give --slide-mpp, --slide-mpp-table or "
                             "--mpp-from-content"));
  out.contract = &job.segmenter->contract();
  out.classes = segment_slide(slide, *plan.mpp, *job.segmenter, util::thread_count(job.threads));
  const ClassMap& map = *out.classes;
  const int unit = map.cell * map.cell;
  const IntegralMask tissue(map.width, map.height, map.tissue, unit);
  const IntegralMask artifact(map.width, map.height, map.artifact, unit);
  const double c = map.level0_per_cell();
  const double side = grid.size_level0 / c;
  for (const TileRect& t : tile_grid(slide.geometry().levels[0], plan, s.tile_size, s.overlap)) {
    const double x = t.x / c, y = t.y / c;
    const double f = tissue.fraction(x, y, x + side, y + side);
    if (f >= s.min_tissue - 1e-9 &&
        artifact.fraction(x, y, x + side, y + side) <= s.max_artifact + 1e-9)
      out.kept.push_back({t.row, t.col, t.x, t.y, f});
  }
  Mask mask;
  mask.width = map.width, mask.height = map.height;
  mask.data.resize(map.classes.size());
  for (std::size_t i = 0; i < mask.data.size(); ++i)
    mask.data[i] = out.contract->is_tissue(map.classes[i]) ? 1 : 0;
  out.mask = std::move(mask);
  std::int64_t tissue_px = 0, all_px = 0;
  for (std::size_t k = 0; k < map.class_pixels.size(); ++k) {
    all_px += map.class_pixels[k];
    if (out.contract->is_tissue(static_cast<int>(k))) tissue_px += map.class_pixels[k];
  }
  out.tissue_fraction = all_px ? static_cast<double>(tissue_px) / all_px : 0.0;
}

// Tissue on a thumbnail (otsu) or by a segmenter (model); tiles kept by their tissue fraction.
Selection select_tiles(const Slide& slide, const ReadPlan& plan, const TileGrid& grid,
                       const TileJob& job) {
  const auto& s = job.settings;
  const Level& level0 = slide.geometry().levels[0];
  Selection out;
  if (s.tissue == io::TissueDetection::otsu || !job.qc_dir.empty())
    out.thumb = make_thumbnail(slide, grid.size_level0);
  if (s.tissue == io::TissueDetection::model) {
    select_by_model(slide, plan, grid, job, out);
    return out;
  }
  if (s.tissue != io::TissueDetection::otsu) {
    for (const TileRect& t : tile_grid(level0, plan, s.tile_size, s.overlap))
      out.kept.push_back({t.row, t.col, t.x, t.y, 1.0});
    return out;
  }
  const Thumbnail& thumb = *out.thumb;
  TissueOptions options;
  const double tile_area = (grid.size_level0 / thumb.dx) * (grid.size_level0 / thumb.dy);
  options.min_object_px = std::max<std::int64_t>(4, std::llround(tile_area / 4));
  options.max_hole_px = options.min_object_px;
  if (s.artifacts == io::ArtifactFilter::keep) options.artifacts.reset();
  out.mask = tissue_mask(thumb.image.pixels.data(), thumb.image.width, thumb.image.height, options);
  std::int64_t tissue_px = 0;
  for (auto v : out.mask->data) tissue_px += v != 0;
  out.tissue_fraction =
      out.mask->data.empty() ? 0.0 : static_cast<double>(tissue_px) / out.mask->data.size();
  const IntegralMask integral(*out.mask);
  for (const TileRect& t : tile_grid(level0, plan, s.tile_size, s.overlap)) {
    const double f =
        integral.fraction(t.x / thumb.dx, t.y / thumb.dy, (t.x + grid.size_level0) / thumb.dx,
                          (t.y + grid.size_level0) / thumb.dy);
    if (f >= s.min_tissue - 1e-9) out.kept.push_back({t.row, t.col, t.x, t.y, f});
  }
  return out;
}

// The level-0 positions of `kept`, in order (OwnJpegTiles::will_read).
std::vector<std::pair<std::int64_t, std::int64_t>> positions(const std::vector<KeptTile>& kept) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  out.reserve(kept.size());
  for (const auto& k : kept) out.emplace_back(k.x, k.y);
  return out;
}

// The slide's own JPEG tiles that may pass through, or null (`why` says why not). The first
// kept tile that would pass through is decoded (libjpeg-turbo) and compared with OpenSlide's
// read of it: any difference sends the slide the usual way, with a warning. (A tile whose
// DICOMweb frame fails is passed over, as its tile will be failed; the fourth such one throws.)
std::unique_ptr<OwnJpegTiles> passthrough_source(const Slide& slide, const ReadPlan& plan,
                                                 const TileJob& job,
                                                 const std::vector<KeptTile>& kept,
                                                 std::string& why) {
  const auto& s = job.settings;
  if (job.passthrough == Passthrough::never)
    why = "--passthrough never";
  else if (s.encoding != io::TileEncoding::jpeg)
    why = "tiles are encoded as --format png";
  else if (s.overlap != 0)
    why = "tiles overlap (--overlap)";
  else if (plan.read_size_level != s.tile_size)
    why = "tiles are resampled from the level";
  else if (slide.flat_info())
    why = "a flat image";
  if (!why.empty()) return nullptr;
  auto tiles = OwnJpegTiles::open(slide, plan.level, s.tile_size, why);
  if (!tiles) return nullptr;
  const int n = s.tile_size;
  int unread = 0;  // tiles whose DICOMweb frame failed: the next one is compared
  for (const KeptTile& k : kept) {
    std::optional<std::string> jpeg;
    std::vector<std::uint8_t> theirs(static_cast<std::size_t>(n) * n * 3);
    try {
      jpeg = tiles->jpeg_at(k.x, k.y);
      if (jpeg) slide.read_rgb(k.x, k.y, plan.level, n, n, theirs.data());
    } catch (const io::DicomwebError&) {
      if (++unread == 4) throw;  // not one frame: the server fails
      continue;
    }
    if (!jpeg) continue;
    io::RgbImage ours;
    try {
      io::decode_image(jpeg->data(), jpeg->size(), ours, slide.path() + ": a passed-through tile");
    } catch (const Error& e) {
      why = e.what();
    }
    if (why.empty() && ours.pixels == theirs) return tiles;
    if (why.empty()) why = "the slide's JPEG tile decodes otherwise than OpenSlide reads it";
    log::warn(slide.path() + ": tile at (" + std::to_string(k.x) + ", " + std::to_string(k.y) +
              ") not passed through: " + why + "; tiles are decoded and encoded again");
    return nullptr;
  }
  why = "no kept tile is one whole tile of the level (TIFF tile or DICOM frame)";
  return nullptr;
}

// The QC picture of `image` with `overlay`, and beside it job.qc_recolour's picture of it with
// the same overlay, job.qc_recolour_caption added to the caption (where there is one).
io::RgbImage qc_with_recolour(const io::RgbImage& image, const QcOverlay& overlay,
                              const TileJob& job) {
  if (!job.qc_recolour) return qc_picture(image, overlay);
  const std::optional<io::RgbImage> recoloured = job.qc_recolour(image);
  QcOverlay bare = overlay;
  bare.caption.clear();
  std::vector<std::string> lines = overlay.caption;
  if (!recoloured) {
    lines.push_back(job.qc_recolour_caption + ": not shown, too little stain in the picture");
    return caption_picture(qc_picture(image, bare), lines);
  }
  lines.push_back(job.qc_recolour_caption);
  return caption_picture(side_by_side(qc_picture(image, bare), qc_picture(*recoloured, bare)),
                         lines);
}

// The QC picture <dir>/<id>.png (qc.hpp): the slide at --qc-size, its tissue outline, the
// kept tiles and a caption saying what chose them.
void write_qc(const Slide& slide, const TileJob& job, const ReadPlan& plan, const TileGrid& grid,
              const Selection& selection, const SlideReport& report) {
  const Level& l0 = slide.geometry().levels[0];
  const io::RgbImage image = read_qc_image(slide, job.qc_size);
  const double sx = static_cast<double>(image.width) / l0.width;
  const double sy = static_cast<double>(image.height) / l0.height;
  QcOverlay overlay;
  overlay.tissue = selection.mask ? &*selection.mask : nullptr;
  overlay.classes = selection.classes ? &*selection.classes : nullptr;
  overlay.contract = selection.contract;
  for (const auto& k : selection.kept)
    overlay.kept.push_back(
        {k.x * sx, k.y * sy, (k.x + grid.size_level0) * sx, (k.y + grid.size_level0) * sy});
  QcCaption c;
  c.id = report.id, c.width = l0.width, c.height = l0.height;
  c.mpp = plan.mpp, c.mpp_source = plan.mpp_source, c.target_mpp = job.settings.mpp;
  c.metadata_mpp = report.metadata_mpp, c.metadata_problem = report.metadata_problem;
  if (report.mpp_estimate) c.estimate = estimate_text(*report.mpp_estimate);
  c.level = plan.level, c.tile_size = job.settings.tile_size;
  c.tiles = static_cast<std::int64_t>(selection.kept.size()), c.grid_tiles = grid.count();
  if (selection.mask) c.tissue_threshold = selection.mask->threshold;
  c.tissue_fraction = selection.tissue_fraction, c.min_tissue = job.settings.min_tissue;
  if (selection.classes) c.segmenter = job.settings.segmenter.value("file", std::string());
  c.max_artifact = job.settings.max_artifact;
  c.reader = report.reader;
  roi_overlay(selection, sx, sy, job.roi.min_roi, overlay, c);
  overlay.caption = caption_lines(c);
  util::make_directories(job.qc_dir);
  io::write_png(util::join_path(job.qc_dir, report.id + ".png"),
                qc_with_recolour(image, overlay, job));
}

}  // namespace

const char* to_string(SlideStatus status) {
  switch (status) {
    case SlideStatus::tiled: return "tiled";
    case SlideStatus::empty: return "empty";
    case SlideStatus::skipped: return "skipped";
    case SlideStatus::incomplete: return "incomplete";
    case SlideStatus::failed: return "failed";
    case SlideStatus::no_roi: return "no_roi";
  }
  return "?";
}

void open_tissue_model(TileJob& job) {
  if (job.settings.tissue != io::TissueDetection::model || job.segmenter) return;
  if (!job.open_segmenter)
    throw UsageError("--tissue " + job.tissue_model +
                     ": this program cannot run a segmenter (it has no LibTorch module)");
  job.segmenter = job.open_segmenter(job.tissue_model, job.device);
  const util::MappedFile file(job.tissue_model);
  job.settings.segmenter = {
      {"file", job.tissue_model.substr(job.tissue_model.rfind('/') + 1)},
      {"sha256",
       io::sha256_hex(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()))},
      {"contract", job.segmenter->contract().doc}};
}

void validate(const TileJob& job) {
  util::check_options(tile_options(), job);
  util::check_options(tile_store_options(), job);
  const auto& s = job.settings;
  check_tile_size(s.tile_size, s.overlap);
  check_roi_options(job.roi);
  if (s.mpp.has_value() == s.level.has_value())
    throw UsageError("give exactly one of --mpp and --level");
}

namespace {

// What tile_slide learns of a slide before it writes a tile.
struct Prepared {
  ReadPlan plan;
  TileGrid grid;
  Selection selection;
  json record;  // "slides": completed with the passthrough and reader when tiles are written
};

// The µm/px, the read plan, the grid, the tiles kept and the "slides" record.
Prepared prepare(const Slide& slide, const Identity& who, const TileJob& job, const SlideRoi& roi,
                 SlideReport& report) {
  const auto& s = job.settings;
  const std::string& id = report.id;
  SlideGeometry geometry = slide.geometry();
  SlideMpp mpp = resolve_slide_mpp(slide, id, job, !job.qc_dir.empty());
  fit_target_to_estimate(mpp, s.mpp, report.path, id);
  geometry.mpp_x = geometry.mpp_y = mpp.mpp;
  if (mpp.source == MppSource::power)
    log::warn(id + ": no usable µm/px metadata; " + util::number_text(*mpp.mpp) +
              " µm/px from its objective power (--mpp-from-power)");
  if (mpp.source == MppSource::content)
    log::warn(id + ": no usable µm/px metadata; " + estimate_text(*mpp.estimate) +
              " estimated from its tissue (--mpp-from-content)");
  report.mpp_estimate = mpp.estimate;
  report.metadata_mpp = slide_mpp(slide.geometry());
  if (!report.metadata_mpp) report.metadata_problem = metadata_mpp(slide).problem;
  Prepared p;
  p.plan = plan_read(geometry, s.mpp, s.level, s.tile_size, report.path);
  p.plan.mpp_source = to_string(mpp.source);
  report.mpp_source = p.plan.mpp_source;
  report.mpp = p.plan.mpp;
  p.grid = make_grid(geometry.levels[0], p.plan, s.tile_size, s.overlap);
  report.grid_tiles = p.grid.count();
  p.selection = select_tiles(slide, p.plan, p.grid, job);
  report.tissue_fraction = p.selection.tissue_fraction;
  p.record = slide_json(slide, who, p.plan, p.grid, s, p.selection);
  if (p.selection.classes) {
    const ClassMap& map = *p.selection.classes;
    p.record["class_areas"] = class_areas_json(map, *p.selection.contract);
    p.record["class_map"] = {{"model_width", map.model_width},
                             {"model_height", map.model_height},
                             {"cell", map.cell},
                             {"windows", map.windows}};
    report.segment_seconds = map.seconds;
    for (const auto& name : p.selection.contract->classes)
      report.class_fractions.emplace_back(name, p.record["class_areas"][name]["fraction"]);
  }
  apply_roi(p.selection, p.record, roi, p.grid.size_level0, job.roi.min_roi);  // --roi
  // The estimate is the store's only where the µm/px came from it (--mpp-from-content); one
  // made for the QC pictures or --check-mpp is not, so a slide's record is the same whatever
  // else was asked, and without its timing, which no two runs share.
  if (mpp.source == MppSource::content) {
    p.record["mpp_estimate"] = to_json(*mpp.estimate);
    p.record["mpp_estimate"].erase("seconds");
    p.record["mpp_level0_as_target"] = mpp.level0_as_target;
  }
  report.mpp_level0_as_target = mpp.level0_as_target;
  return p;
}

// Where a slide's tiles are read: its region reader, and its own JPEG tiles where they pass
// through (planned to be read for `todo`); no own tiles in a coordinates store.
struct Source {
  std::unique_ptr<RegionReader> reader;
  std::unique_ptr<OwnJpegTiles> own;
  std::string why_not;  // why there are no own tiles
};

Source open_source(const Slide& slide, const Prepared& p, const TileJob& job,
                   const std::vector<KeptTile>& todo, SlideReport& report) {
  Source src{make_region_reader(slide, p.plan.level, job.reader), nullptr,
             "a coordinates store (no pixels)"};
  report.reader = src.reader->name();
  report.reader_version = src.reader->version();
  if (!job.settings.pixels) return src;  // the records only (TilePixels reads the slide)
  src.why_not.clear();
  src.own = passthrough_source(slide, p.plan, job, p.selection.kept, src.why_not);
  if (src.own) src.own->will_read(positions(todo));
  return src;
}

// Commits what `batch` holds with the slide's records: its kept tiles but
// report.failed_tiles, which the done marker lists.
void publish(io::TileStore::SlideWriter& batch, Prepared& p, const Source& src, SlideReport& report,
             bool allow_missing_tiles, Clock::time_point start) {
  p.record["passthrough"] =
      src.own ? src.own->record(report.passthrough) : json{{"tiles", 0}, {"reason", src.why_not}};
  p.record["reader"] = report.reader;
  p.record["reader_version"] = report.reader_version;
  const auto& kept = p.selection.kept;
  report.tiles = static_cast<std::int64_t>(kept.size() - report.failed_tiles.size());
  report.seconds = seconds_since(start);
  const bool missing = !report.failed_tiles.empty() && !allow_missing_tiles;
  report.status = missing                                     ? SlideStatus::incomplete
                  : kept.size() == report.failed_tiles.size() ? SlideStatus::empty
                                                              : SlideStatus::tiled;
  batch.commit(p.record.dump(), kept_json(kept, report.failed_tiles).dump(),
               done_json(report).dump());
}

// A slide the store does not hold complete: every kept tile, committed with its done marker.
void tile_new(io::TileStore& store, const Slide& slide, const TileJob& job, Prepared& p,
              SlideReport& report, bool allow_missing_tiles, Clock::time_point start) {
  const std::string& id = report.id;
  const auto& kept = p.selection.kept;
  auto batch = store.write_slide(id, p.record.dump(), job.commit_every);
  try {
    const Source src = open_source(slide, p, job, kept, report);
    if (job.settings.pixels && !kept.empty()) {
      WrittenTiles w = write_tiles(*src.reader, p.plan, job, id, kept, src.own.get(), batch);
      report.passthrough = w.passthrough;
      report.failed_tiles = std::move(w.failed);
    }
    if (!job.qc_dir.empty()) write_qc(slide, job, p.plan, p.grid, p.selection, report);
    if (p.selection.mask) batch.put_record("mask", mask_record(p.selection));
    publish(batch, p, src, report, allow_missing_tiles, start);
  } catch (...) {
    batch.drop();
    try {
      store.discard_incomplete(id);
    } catch (const std::exception& e) {
      log::warn(id + ": could not remove partial tiles: " + e.what());
    }
    throw;
  }
}

// The kept tiles an incomplete slide's done marker lists as failed (report.failed_tiles).
// InputError when the store's tiles and failures are not this run's kept tiles.
std::vector<KeptTile> refill_tiles(const io::TileStore& store, const Prepared& p,
                                   const SlideReport& report) {
  std::set<std::pair<std::int64_t, std::int64_t>> failed;
  for (const auto& f : report.failed_tiles) failed.emplace(f.row, f.col);
  std::vector<KeptTile> todo;
  for (const auto& k : p.selection.kept)
    if (failed.count({k.row, k.col})) todo.push_back(k);
  const auto tiles = store.record("tiles", report.id);
  const std::size_t listed =
      tiles && tiles->contains("row") && tiles->at("row").is_array() ? tiles->at("row").size() : 0;
  if (todo.size() != failed.size() || listed + todo.size() != p.selection.kept.size())
    throw InputError(at_file(
        report.path, "slide '" + report.id + "' is in " + store.path() + " with " +
                         std::to_string(listed) + " tiles and " + std::to_string(failed.size()) +
                         " failed ones, but this run keeps " +
                         std::to_string(p.selection.kept.size()) +
                         " tiles: give the options of the run that tiled it to fetch its failed "
                         "tiles again, or --overwrite"));
  return todo;
}

// `failed`'s entries of the tiles of `chunk` replaced by `again` (those that failed again).
void replace_failures(std::vector<TileFailure>& failed, const std::vector<KeptTile>& chunk,
                      std::vector<TileFailure> again) {
  std::set<std::pair<std::int64_t, std::int64_t>> asked;
  for (const auto& k : chunk) asked.emplace(k.row, k.col);
  failed.erase(std::remove_if(failed.begin(), failed.end(),
                              [&](const TileFailure& f) {
                                return asked.count({f.row, f.col});
                              }),
               failed.end());
  failed.insert(failed.end(), again.begin(), again.end());
  std::sort(failed.begin(), failed.end(), [](const auto& a, const auto& b) {
    return std::pair(a.row, a.col) < std::pair(b.row, b.col);
  });
}

// An incomplete slide: its failed tiles fetched again and added, each --commit-every of them
// committed with the slide's records rewritten, so the slide is complete throughout.
void fill_failed(io::TileStore& store, const Slide& slide, const TileJob& job, Prepared& p,
                 SlideReport& report, bool allow_missing_tiles, Clock::time_point start) {
  const std::string& id = report.id;
  const std::vector<KeptTile> todo = refill_tiles(store, p, report);
  log::info(id + ": " + std::to_string(todo.size()) +
            " tile(s) failed in an earlier run: fetching them again");
  const auto recorded = store.record("slides", id);
  if (recorded && recorded->contains("passthrough") && recorded->at("passthrough").is_object())
    report.passthrough = recorded->at("passthrough").value("tiles", std::int64_t{0});
  const Source src = open_source(slide, p, job, todo, report);
  auto batch = store.add_to_slide(id);
  const std::size_t step = std::max<std::size_t>(1, job.commit_every);
  for (std::size_t at = 0; at < todo.size(); at += step) {
    const std::vector<KeptTile> chunk(
        todo.begin() + static_cast<std::ptrdiff_t>(at),
        todo.begin() + static_cast<std::ptrdiff_t>(std::min(at + step, todo.size())));
    WrittenTiles w = write_tiles(*src.reader, p.plan, job, id, chunk, src.own.get(), batch);
    report.passthrough += w.passthrough;
    replace_failures(report.failed_tiles, chunk, std::move(w.failed));
    publish(batch, p, src, report, allow_missing_tiles, start);
  }
}

}  // namespace

SlideReport tile_slide(io::TileStore& store, const std::string& path, const TileJob& job,
                       bool allow_missing_tiles) {
  const auto start = Clock::now();
  SlideReport report;
  report.path = io::redacted_url(path);  // a URL's user name and password are written nowhere
  report.id = io::slide_id_for(path);
  const std::string& id = report.id;
  const SlideRoi roi = slide_roi(job.roi, path);  // --roi: checked before the slide is read
  if (roi.skip) {
    report.status = SlideStatus::no_roi;
    return report;
  }
  const Slide slide = Slide::open(path, job.dicomweb);
  // A DICOMweb series is its URL (recorded) and its series UID (the id, the same on any server).
  const Identity who{id, slide.property("openslide.quickhash-1").value_or(""),
                     slide.dicomweb() ? report.path : util::absolute_path(path)};
  const Stored stored = already_tiled(store, report.path, who, allow_missing_tiles, report);
  if (stored != Stored::none) require_same_roi(store, id, roi, report.path);
  if (stored == Stored::complete) {
    report.seconds = seconds_since(start);
    return report;
  }
  if (stored == Stored::none)
    if (const auto removed = store.discard_incomplete(id))
      log::info(id + ": removed " + std::to_string(removed) + " tiles of an interrupted run");
  Prepared p = prepare(slide, who, job, roi, report);
  if (stored == Stored::incomplete)
    fill_failed(store, slide, job, p, report, allow_missing_tiles, start);
  else
    tile_new(store, slide, job, p, report, allow_missing_tiles, start);
  return report;
}

}  // namespace mltool::slide
