// The records of a slide in the tile store (tile_records.hpp).
#include "tile_records.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "mltool/io/dicomweb.hpp"
#include "mltool/util/error.hpp"

namespace mltool::slide {
namespace {

using json = nlohmann::json;

json levels_json(const SlideGeometry& g) {
  json out = json::array();
  for (const auto& l : g.levels)
    out.push_back({{"width", l.width}, {"height", l.height}, {"downsample", l.downsample}});
  return out;
}

// A failed tile's entry in a done marker, from recorded_failures' `entry`.
TileFailure failure_from(const json& entry, const std::string& where) {
  if (!entry.is_object() || !entry.contains("row") || !entry.contains("col") ||
      !entry["row"].is_number_integer() || !entry["col"].is_number_integer())
    throw FormatError(where + ": 'failed_tiles' entry " + entry.dump() +
                      " is not {row, col, x, y, url, status, error}");
  TileFailure f;
  f.row = entry["row"].get<std::int64_t>(), f.col = entry["col"].get<std::int64_t>();
  f.x = entry.value("x", std::int64_t{0}), f.y = entry.value("y", std::int64_t{0});
  f.url = entry.value("url", ""), f.status = entry.value("status", 0L);
  f.error = entry.value("error", "");
  return f;
}

}  // namespace

// `url` is a DicomwebError's: built from a series URL parsed without its credentials.
json TileFailure::to_json() const {
  return {{"row", row}, {"col", col},       {"x", x},        {"y", y},
          {"url", url}, {"status", status}, {"error", error}};
}

json kept_json(const std::vector<KeptTile>& kept, const std::vector<TileFailure>& left_out) {
  std::set<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& f : left_out) out.emplace(f.row, f.col);
  json row = json::array(), col = json::array(), x = json::array(), y = json::array(),
       tissue = json::array(), roi = json::array();
  for (const auto& k : kept) {
    if (out.count({k.row, k.col})) continue;
    row.push_back(k.row), col.push_back(k.col), x.push_back(k.x), y.push_back(k.y);
    tissue.push_back(std::round(k.tissue * 1e4) / 1e4);
    if (k.roi >= 0) roi.push_back(k.roi);  // tile --roi: the share, unrounded
  }
  json record = {{"row", row}, {"col", col}, {"x", x}, {"y", y}, {"tissue", tissue}};
  if (!roi.empty()) record["roi"] = std::move(roi);
  return record;
}

json slide_json(const Slide& slide, const Identity& who, const ReadPlan& plan, const TileGrid& grid,
                const io::TileSettings& s, const Selection& selection) {
  const SlideGeometry& geometry = slide.geometry();
  const auto& thumb = selection.thumb;
  const auto& mask = selection.mask;
  return {
      {"id", who.id},
      {"path", io::redacted_url(who.abs_path)},  // no user name or password of a URL
      {"vendor", slide.vendor()},
      {"quickhash", who.quickhash},
      {"width", geometry.levels[0].width},
      {"height", geometry.levels[0].height},
      {"levels", levels_json(geometry)},
      {"mpp", plan.mpp ? json(*plan.mpp) : json(nullptr)},
      {"mpp_source", plan.mpp_source},
      {"level", plan.level},
      {"level_downsample", plan.level_downsample},
      {"target_downsample", plan.target_downsample},
      {"read_size", plan.read_size_level},
      {"tile_size", s.tile_size},
      {"overlap", s.overlap},
      {"stride_level0", grid.stride_level0},
      {"size_level0", grid.size_level0},
      {"grid", {{"cols", grid.cols}, {"rows", grid.rows}}},
      {"thumbnail", thumb ? json{{"width", thumb->image.width},
                                 {"height", thumb->image.height},
                                 {"level", thumb->level},
                                 {"downsample", (thumb->dx + thumb->dy) / 2}}
                          : json(nullptr)},
      {"tissue_threshold", mask && !selection.classes ? json(mask->threshold) : json(nullptr)},
  };
}

std::string mask_record(const Selection& selection) {
  const Mask& mask = *selection.mask;
  io::TissueMask record;
  record.mask.width = mask.width, record.mask.height = mask.height;
  record.mask.pixels.resize(mask.data.size());
  for (std::size_t i = 0; i < mask.data.size(); ++i) record.mask.pixels[i] = mask.data[i] ? 255 : 0;
  if (selection.classes) {
    const ClassMap& map = *selection.classes;
    record.downsample_x = record.downsample_y = map.level0_per_cell();
    record.classes = {map.width, map.height, map.classes};
    record.class_names = selection.contract->classes;
    record.tissue_classes = selection.contract->tissue;
    record.artifact_classes = selection.contract->artifacts;
  } else {
    record.downsample_x = selection.thumb->dx, record.downsample_y = selection.thumb->dy;
  }
  return record.to_record();
}

json class_areas_json(const ClassMap& map, const SegmenterContract& contract) {
  std::int64_t total = 0;
  for (auto n : map.class_pixels) total += n;
  const double mm2_per_pixel = contract.mpp * contract.mpp * 1e-6;
  json out = json::object();
  for (std::size_t k = 0; k < contract.classes.size(); ++k) {
    const std::int64_t n = k < map.class_pixels.size() ? map.class_pixels[k] : 0;
    out[contract.classes[k]] = {
        {"pixels", n},
        {"fraction", total ? std::round(1e6 * static_cast<double>(n) / total) / 1e6 : 0.0},
        {"mm2", std::round(1e4 * static_cast<double>(n) * mm2_per_pixel) / 1e4}};
  }
  return out;
}

json done_json(const SlideReport& report) {
  json done = {
      {"tiles", report.tiles},
      {"tissue_fraction", report.tissue_fraction ? json(*report.tissue_fraction) : json(nullptr)},
      {"seconds", std::round(report.seconds * 1000) / 1000},
      {"reader", report.reader},
      {"passthrough", report.passthrough}};
  if (!report.failed_tiles.empty()) {
    json failed = json::array();
    for (const auto& f : report.failed_tiles) failed.push_back(f.to_json());
    done["failed_tiles"] = std::move(failed);
  }
  return done;
}

std::vector<TileFailure> recorded_failures(const json& done, const std::string& where) {
  std::vector<TileFailure> out;
  if (!done.is_object() || !done.contains("failed_tiles")) return out;
  if (!done["failed_tiles"].is_array()) throw FormatError(where + ": 'failed_tiles' is no list");
  for (const auto& entry : done["failed_tiles"]) out.push_back(failure_from(entry, where));
  return out;
}

}  // namespace mltool::slide
