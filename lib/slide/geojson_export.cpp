// `mltool export geojson`: the options, and per slide a FeatureCollection streamed feature by
// feature into an AtomicFile (memory stays one slide's "tiles" record, whatever the size).
// What QuPath reads (its PathObjectTypeAdapters): properties.objectType ("annotation",
// "detection", "tile"), name, classification {"name", "color": [r, g, b]} and measurements as
// an object of numbers; other properties are ignored by QuPath and kept for other readers.
#include "mltool/slide/geojson_export.hpp"
#include "mltool/util/common_options.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include "mltool/io/tile_store.hpp"
#include "mltool/slide/contours.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/output_lock.hpp"
#include "mltool/util/parallel.hpp"

namespace mltool::slide {
namespace {

using json = nlohmann::json;

// QuPath's classes and colours for what we write (docs/export.md).
constexpr const char* kTissueClass = "Tissue";
constexpr std::array<int, 3> kTissueColour = {32, 160, 32};
constexpr const char* kTileClass = "Tile";
constexpr std::array<int, 3> kTileColour = {0, 128, 255};

// Level-0 coordinates to 1/100 pixel: what QuPath's viewer can show, and shorter files.
double coordinate(double v) { return std::round(v * 100) / 100; }

json classification(const std::string& name, const std::array<int, 3>& colour) {
  return {{"name", name}, {"color", colour}};
}

// A closed GeoJSON ring (first point repeated) of mask corners scaled to level 0.
json ring_json(const GridRing& ring, double sx, double sy) {
  json out = json::array();
  for (const auto& p : ring) out.push_back({coordinate(p.x * sx), coordinate(p.y * sy)});
  out.push_back(out.front());
  return out;
}

class FeatureWriter {
 public:
  explicit FeatureWriter(const std::string& path) : file_(path) {
    file_.write("{\"type\": \"FeatureCollection\", \"features\": [");
  }
  void add(const json& feature) {
    file_.write(first_ ? "\n" : ",\n");
    first_ = false;
    file_.write(feature.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  void commit() {
    file_.write("\n]}\n");
    file_.commit();
  }

 private:
  util::AtomicFile file_;
  bool first_ = true;
};

// One annotation per polygon of `mask` (nonzero inside), classified `name` in `colour`.
std::int64_t write_regions(FeatureWriter& out, const std::uint8_t* mask, const io::TissueMask& m,
                           const std::string& name, const json& colour) {
  const auto polygons = trace_polygons(mask, m.mask.width, m.mask.height);
  for (std::size_t i = 0; i < polygons.size(); ++i) {
    json rings = json::array({ring_json(polygons[i].exterior, m.downsample_x, m.downsample_y)});
    for (const auto& hole : polygons[i].holes)
      rings.push_back(ring_json(hole, m.downsample_x, m.downsample_y));
    out.add({{"type", "Feature"},
             {"geometry", {{"type", "Polygon"}, {"coordinates", rings}}},
             {"properties",
              {{"objectType", "annotation"},
               {"name", name + " " + std::to_string(i + 1)},
               {"classification", {{"name", name}, {"color", colour}}}}}});
  }
  return static_cast<std::int64_t>(polygons.size());
}

// The tissue outline: one annotation per polygon of the mask; where a segmenter chose the
// tiles, one per polygon of each of its tissue and artifact classes, classified by the class's
// name. Returns the polygons written.
std::int64_t write_outline(FeatureWriter& out, const io::TissueMask& m) {
  if (m.class_names.empty())
    return write_regions(out, m.mask.pixels.data(), m, kTissueClass, json(kTissueColour));
  std::int64_t written = 0;
  std::vector<std::uint8_t> inside(m.classes.pixels.size());
  for (std::size_t k = 0; k < m.class_names.size(); ++k) {
    const std::string& name = m.class_names[k];
    const auto named = [&](const std::vector<std::string>& v) {
      return std::find(v.begin(), v.end(), name) != v.end();
    };
    if (!named(m.tissue_classes) && !named(m.artifact_classes)) continue;
    for (std::size_t i = 0; i < inside.size(); ++i) inside[i] = m.classes.pixels[i] == k;
    const std::uint8_t* c = io::class_colour(name, m.tissue_classes, m.artifact_classes);
    written += write_regions(out, inside.data(), m, name, json::array({c[0], c[1], c[2]}));
  }
  return written;
}

// One square per kept tile, from the "tiles" record's columns. Returns the tiles written.
std::int64_t write_tiles(FeatureWriter& out, const std::string& id, const json& tiles, double size,
                         TileObjectType type, const std::string& where,
                         const TileMeasurements& extra) {
  const char* columns[] = {"row", "col", "x", "y", "tissue"};
  for (const char* c : columns)
    if (!tiles.contains(c) || !tiles.at(c).is_array() ||
        tiles.at(c).size() != tiles.at("row").size())
      throw FormatError(where + ": expected the columns row, col, x, y, tissue of equal length");
  const json tile_class = classification(kTileClass, kTileColour);
  const char* object_type = util::name_of(kTileObjectTypes, type);
  const std::size_t n = tiles.at("row").size();
  std::int64_t written = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto row = tiles["row"][i].get<std::int64_t>();
    const auto col = tiles["col"][i].get<std::int64_t>();
    const json& x = tiles["x"][i];  // integers: written as the store has them
    const json& y = tiles["y"][i];
    const double x1 = coordinate(x.get<double>() + size), y1 = coordinate(y.get<double>() + size);
    const double tissue = tiles["tissue"][i].get<double>();
    const std::string key = io::tile_key(id, row, col);
    json measurements = {{"Tissue fraction", tissue}};
    if (extra && !extra(key, measurements)) continue;
    ++written;
    out.add(
        {{"type", "Feature"},
         {"geometry",
          {{"type", "Polygon"}, {"coordinates", {{{x, y}, {x1, y}, {x1, y1}, {x, y1}, {x, y}}}}}},
         {"properties",
          {{"objectType", object_type},
           {"name", key},
           {"classification", tile_class},
           {"measurements", measurements},
           {"key", key},
           {"row", row},
           {"col", col},
           {"tissue", tissue}}}});
  }
  return written;
}

// The complete slides to export: all of them, or those named (each must be complete).
std::vector<std::string> slides_to_export(const io::TileStore& store,
                                          const std::vector<std::string>& wanted) {
  auto complete = store.completed_slides();
  if (wanted.empty()) return complete;
  std::vector<std::string> out;
  for (const auto& id : wanted) {
    if (!std::binary_search(complete.begin(), complete.end(), id))
      throw InputError(at_file(
          store.path(),
          "--slide " + id + ": " +
              (store.record("slides", id) ? "the slide is not complete (an interrupted mltool tile)"
                                          : "no such slide in the store") +
              " (" + std::to_string(complete.size()) + " complete slides)"));
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

GeojsonSlideReport export_slide(const io::TileStore& store, const std::string& id,
                                const GeojsonExportJob& job) {
  const std::string file = util::join_path(job.output, id + ".geojson");
  if (!job.overwrite && util::exists(file)) {
    GeojsonSlideReport r;
    r.id = id;
    r.file = file;
    r.skipped = true;
    const auto tiles = store.record("tiles", id);
    r.tiles = tiles && tiles->is_object()
                  ? static_cast<std::int64_t>(tiles->value("row", json::array()).size())
                  : 0;
    return r;
  }
  return write_slide_geojson(store, id, file, job.tile_object);
}

void log_slide(const GeojsonSlideReport& r) {
  if (r.skipped) {
    log::debug(r.id + ": " + r.file + " is there already; skipped");
    return;
  }
  log::info(r.id + ": " + std::to_string(r.tiles) + " tiles, " +
            (r.outline_polygons ? std::to_string(*r.outline_polygons) + " tissue polygons"
                                : std::string("no tissue mask")) +
            " → " + r.file);
}

}  // namespace

GeojsonSlideReport write_slide_geojson(const io::TileStore& store, const std::string& id,
                                       const std::string& file, TileObjectType type,
                                       const TileMeasurements& extra) {
  GeojsonSlideReport r;
  r.id = id;
  r.file = file;
  const auto slide = store.record("slides", id);
  const auto tiles = store.record("tiles", id);
  const std::string where = store.path() + ": meta 'tiles/" + id + "'";
  if (!slide || !tiles || !slide->contains("size_level0") || !tiles->is_object())
    throw FormatError(store.path() + ": slide '" + id +
                      "' lacks its 'slides' or 'tiles' record or their fields");
  FeatureWriter out(r.file);
  if (const auto mask = store.tissue_mask(id)) r.outline_polygons = write_outline(out, *mask);
  r.tiles =
      write_tiles(out, id, *tiles, slide->at("size_level0").get<double>(), type, where, extra);
  out.commit();
  return r;
}

const util::EnumNames<TileObjectType> kTileObjectTypes = {{TileObjectType::tile, "tile"},
                                                          {TileObjectType::detection, "detection"}};

const util::Options<GeojsonExportJob>& geojson_export_options() {
  using J = GeojsonExportJob;
  static const util::Options<J> table = {
      util::option("store", &J::store, "The tile store (mltool tile)").required(),
      util::option("-o,--output", &J::output,
                   "Directory that receives SLIDE.geojson per slide (created if missing)")
          .required(),
      util::option("--slide", &J::slides,
                   "Export only this slide id (repeatable; '-' reads ids from stdin); "
                   "default: every complete slide"),
      util::choice("--tile-object", &J::tile_object, kTileObjectTypes,
                   "QuPath object type of the tile squares: tile or detection"),
      util::overwrite_option(&J::overwrite),
  };
  return table;
}

GeojsonExportReport export_geojson(const GeojsonExportJob& job) {
  util::check_options(geojson_export_options(), job);
  GeojsonExportReport report;
  report.store = job.store;
  report.output = job.output;
  const io::TileStore store = io::TileStore::open(job.store, false);
  if (!store.settings())
    throw InputError(at_file(job.store, "not a tile store (no meta 'store' record)"));
  const auto ids = slides_to_export(store, job.slides);
  util::make_directories(job.output);
  util::OutputLock lock(job.output, "mltool export geojson");
  util::remove_stale_partials(job.output);
  report.slides.resize(ids.size());
  util::parallel_for(ids.size(), job.threads, [&](std::size_t i) {
    report.slides[i] = export_slide(store, ids[i], job);
    log_slide(report.slides[i]);
  });
  for (const auto& r : report.slides) {
    if (r.skipped) {
      ++report.skipped;
      continue;
    }
    ++report.written;
    report.tiles += r.tiles;
    if (!r.outline_polygons) ++report.without_mask;
  }
  if (report.without_mask > 0)
    log::warn(std::to_string(report.without_mask) +
              " slide(s) have no tissue mask in the store (tiled with --tissue none, or before "
              "mltool kept masks): their files hold the tiles only");
  return report;
}

json to_json(const GeojsonExportReport& r) {
  json slides = json::array();
  for (const auto& s : r.slides)
    slides.push_back(
        {{"id", s.id},
         {"file", s.file},
         {"status", s.skipped ? "skipped" : "written"},
         {"tiles", s.tiles},
         {"outline_polygons", s.outline_polygons ? json(*s.outline_polygons) : json(nullptr)}});
  return {{"command", "export geojson"},
          {"store", r.store},
          {"output", r.output},
          {"slides", slides},
          {"written", r.written},
          {"skipped", r.skipped},
          {"without_mask", r.without_mask},
          {"tiles", r.tiles}};
}

}  // namespace mltool::slide
