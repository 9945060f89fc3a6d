// A tile store's slides as GeoJSON for QuPath (`mltool export geojson`, docs/export.md):
// DIR/<slide id>.geojson per complete slide, a FeatureCollection in level-0 pixel
// coordinates holding the tissue outline (annotations traced from the store's "mask" record,
// slide/contours.hpp) and one square per kept tile (tile or detection objects), with the
// properties QuPath reads (objectType, name, classification, measurements).
//
// Each file is published atomically, so a file that exists is complete: a rerun into the same
// DIR skips the slides already there (unless overwrite), which resumes an interrupted export.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/util/options.hpp"

namespace mltool::io {
class TileStore;
}  // namespace mltool::io

namespace mltool::slide {

/// The QuPath object type tiles are written as: tile objects, or plain detections.
enum class TileObjectType { tile, detection };
extern const util::EnumNames<TileObjectType> kTileObjectTypes;

struct GeojsonExportJob {
  std::string store;                ///< the tile store (mltool tile)
  std::string output;               ///< the directory that receives <id>.geojson
  std::vector<std::string> slides;  ///< slide ids to export; empty: every complete slide
  TileObjectType tile_object = TileObjectType::tile;
  bool overwrite = false;  ///< rewrite files that exist instead of skipping them
  int threads = 0;         ///< slides written side by side (--threads; 0 = one per core)
};

/// The options of `mltool export geojson`, declared once.
const util::Options<GeojsonExportJob>& geojson_export_options();

struct GeojsonSlideReport {
  std::string id;
  std::string file;
  bool skipped = false;  ///< the file was there (status "skipped" in --json), else "written"
  std::int64_t tiles = 0;
  /// Tissue outline polygons, or nothing when the store has no mask for the slide.
  std::optional<std::int64_t> outline_polygons;
};

struct GeojsonExportReport {
  std::string store;
  std::string output;
  std::vector<GeojsonSlideReport> slides;  ///< in the store's slide order
  std::int64_t written = 0;
  std::int64_t skipped = 0;
  std::int64_t without_mask = 0;  ///< written slides with tiles only (no "mask" record)
  std::int64_t tiles = 0;         ///< tile features written
};

/// Checks the job, locks DIR (one writer), and writes each slide's file. UsageError for bad
/// options, InputError for a store that is none or a slide id it does not hold complete.
GeojsonExportReport export_geojson(const GeojsonExportJob& job);

/// The --json summary.
nlohmann::json to_json(const GeojsonExportReport& report);

/// Adds to tile `key`'s measurements (an object of numbers QuPath shows per tile); false
/// leaves the tile out of the file.
using TileMeasurements = std::function<bool(const std::string& key, nlohmann::json& measurements)>;

/// Slide `id` of `store` as `export geojson` writes it, to `file` (atomically), each tile's
/// measurements extended by `extra` (mltool predict's heatmaps). FormatError for a slide
/// without its "slides" or "tiles" record.
GeojsonSlideReport write_slide_geojson(const io::TileStore& store, const std::string& id,
                                       const std::string& file, TileObjectType type,
                                       const TileMeasurements& extra = {});

}  // namespace mltool::slide
