// Regions of interest drawn in QuPath (`tile --roi`): a GeoJSON file as QuPath's "Export
// objects as GeoJSON" writes it, its Polygon and MultiPolygon features (holes included, in
// level-0 pixels) made valid, filtered by class and united with GEOS; a tile's share of its
// footprint inside the union. docs/tile.md#regions-of-interest-from-qupath.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/io/tile_store.hpp"

namespace mltool::slide {

/// The --roi options of a tiling (tile_options()).
struct RoiJob {
  std::string path;                  ///< a GeoJSON file, or a directory of <id>.geojson; "": none
  std::vector<std::string> classes;  ///< --roi-class: keep regions of these classes; empty: all
  double min_roi = 0.5;              ///< keep tiles with at least this share inside the regions
  io::RoiMissing missing = io::RoiMissing::refuse;  ///< a slide without a file (directory)
};

/// The store's settings of `job` (sorted, unique classes), or none without --roi.
std::optional<io::RoiSettings> roi_settings(const RoiJob& job);
/// UsageError for --roi-class, --min-roi or --roi-missing given without --roi.
void check_roi_options(const RoiJob& job);

/// Bounds on an ROI file, which is untrusted input.
inline constexpr std::uint64_t kMaxRoiFileBytes = 256ull << 20;
inline constexpr std::int64_t kMaxRoiVertices = 20'000'000;
inline constexpr std::int64_t kMaxRoiFeatures = 1'000'000;

/// A ring, in level-0 pixels.
using Ring = std::vector<std::pair<double, double>>;

/// A slide's regions of interest: the union of the kept features, holes taken out.
class Roi {
 public:
  Roi(Roi&&) noexcept;
  Roi& operator=(Roi&&) noexcept;
  ~Roi();

  /// Parses GeoJSON `text` (FeatureCollection, a bare Feature, or a JSON array of features)
  /// of the file `file` (named in messages): every Polygon and MultiPolygon feature is checked
  /// (rings of at least 4 finite positions; an unclosed ring is closed), the regions of
  /// `classes` (all when empty) kept, each one that is invalid repaired with GEOS's make-valid
  /// (a warning naming the file and the feature), and united. Features without an area
  /// (Point, LineString, Multi*, null geometry) are skipped with a note. InputError naming the
  /// file, the feature's index and the option that fixes it, for anything else.
  /// `check_only`: the checks and warnings alone, nothing united (share() may not be called).
  static Roi parse(const std::string& text, const std::string& file,
                   const std::vector<std::string>& classes, bool check_only = false);
  /// Reads `file` (at most kMaxRoiFileBytes) and parses it; sha256() is the file's.
  static Roi load(const std::string& file, const std::vector<std::string>& classes,
                  bool check_only = false);

  /// The share, 0–1, of the box [x, x + size) × [y, y + size) inside the regions: 1 for a box
  /// inside (prepared geometry), 0 for one apart, else the area of its intersection / size²
  /// (clipped from the union's strip at y, kept for the next box of the row: not for two
  /// threads at once).
  double share(double x, double y, double size) const;
  /// The union's area, level-0 pixels².
  double area() const;
  /// Features kept (regions), and features without an area skipped.
  std::int64_t regions() const;
  std::int64_t skipped() const;
  /// The classes of the kept regions, sorted ("" stands for none).
  std::vector<std::string> classes() const;
  /// The union's bounding box: x0, y0, x1, y1 (all 0 when empty).
  std::vector<double> bounds() const;
  /// The outlines of the union (exterior rings and holes), level-0 pixels.
  std::vector<Ring> rings() const;
  const std::string& file() const;
  const std::string& sha256() const;

 private:
  struct Impl;
  explicit Roi(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// What --roi decides for one slide.
struct SlideRoi {
  bool enabled = false;            ///< --roi was given
  bool skip = false;               ///< no file and --roi-missing skip: the slide is not tiled
  std::string file;                ///< the file read ("" where there is none)
  std::shared_ptr<const Roi> roi;  ///< null where there is no file (--roi-missing all)
};

/// The ROI file of slide `slide_path` under --roi `path`: `path` itself when it is a file, else
/// DIR/<slide id>.geojson or DIR/<file name>.geojson (S1.geojson, S1.svs.geojson; InputError
/// when both exist); "" when the directory has neither.
std::string roi_file_for(const std::string& path, const std::string& slide_path);

/// --roi for one slide: its file loaded (`check_only`: checked, Roi::parse), or (no file)
/// refused with InputError naming --roi-missing, skipped or tiled whole as job.missing says.
SlideRoi slide_roi(const RoiJob& job, const std::string& slide_path, bool check_only = false);

/// UsageError for one --roi FILE given more than one slide; with `each`, every slide's ROI
/// loaded and checked before any slide is tiled (the errors of slide_roi).
void check_rois(const RoiJob& job, const std::vector<std::string>& slides, bool each = true);

/// The "roi" of a slide's record: {"file", "sha256", "regions", "skipped", "area", "classes"},
/// or null where the slide had no file (--roi-missing all).
nlohmann::json roi_json(const SlideRoi& roi);

}  // namespace mltool::slide
