// Tiling geometry of `mltool tile`: which pyramid level to read for a target
// resolution, how many pixels to read there for one tile, and the regular grid of
// tiles in level-0 coordinates. Pure arithmetic on a slide's level table, so it is
// tested without OpenSlide; the slide reader fills SlideGeometry from openslide.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mltool::slide {

/// One pyramid level as OpenSlide reports it.
struct Level {
  std::int64_t width = 0;   ///< pixels at this level
  std::int64_t height = 0;  ///< pixels at this level
  double downsample = 1.0;  ///< level-0 pixels per pixel of this level
};

/// What tiling needs to know about a slide. Level 0 comes first.
struct SlideGeometry {
  std::vector<Level> levels;
  std::optional<double> mpp_x;  ///< µm per level-0 pixel (openslide.mpp-x), if known
  std::optional<double> mpp_y;  ///< µm per level-0 pixel (openslide.mpp-y), if known
};

/// Relative slack when matching a target downsample to a level. Scanners report
/// downsamples such as 4.000345 for a nominal 4; a level that much coarser than the
/// target is the target for every practical purpose, and refusing it would read a
/// 4x larger region at the finer level only to shrink it by 0.9999. 1e-3 keeps the
/// read size within half a pixel of the tile size for tiles up to 1000 px.
inline constexpr double kLevelTolerance = 1e-3;

/// How to read one tile: read `read_size_level` × `read_size_level` pixels at
/// `level` and resample them to the tile size.
struct ReadPlan {
  int level = 0;                     ///< pyramid level to read from
  double level_downsample = 1.0;     ///< that level's downsample
  double target_downsample = 1.0;    ///< level-0 pixels per output pixel
  std::int64_t read_size_level = 0;  ///< pixels to read at `level` per tile side
  std::optional<double> mpp;         ///< µm per level-0 pixel used, if known
  /// Where `mpp` came from: "metadata" (the slide's), "override" (--slide-mpp), "table"
  /// (--slide-mpp-table), "content" (estimated from the tissue, --mpp-from-content), "power"
  /// (10 / objective power, --mpp-from-power) or "none".
  std::string mpp_source = "none";
};

/// Scanned slides lie between these µm per level-0 pixel (about 500x to 0.5x); a value
/// outside them is a unit or placeholder error, and counts as no µm/px.
inline constexpr double kMinPlausibleMpp = 0.05;
inline constexpr double kMaxPlausibleMpp = 20;

/// Whether `dpi` is a resolution that converters write when they know nothing: 72, 96 or 300
/// pixels per inch (within 0.05). Such a resolution counts as no µm/px.
bool is_placeholder_dpi(double dpi);

/// The µm per level-0 pixel of a slide: mpp_x, or the mean of mpp_x and mpp_y when
/// they differ by more than 1% (anisotropic pixels cannot be honoured by square
/// tiles, so the mean errs least in both directions); mpp_y alone if only it is set.
/// nullopt when neither is usable: positive, finite and within kMinPlausibleMpp to
/// kMaxPlausibleMpp.
std::optional<double> slide_mpp(const SlideGeometry& geometry);

/// Chooses the level and read size for tiles of `tile_size` output pixels.
/// Exactly one of `target_mpp` (µm per output pixel) and `level` must be set.
/// With a target: the coarsest level whose downsample is at most the target
/// downsample (within kLevelTolerance), i.e. at or finer than the target, so tiles
/// are only ever shrunk, never enlarged. The read size is
/// round(tile_size * target_downsample / level_downsample), half away from zero,
/// at least 1 (0.3 µm/px on a 0.25 µm/px slide: 256 * 1.2 = 307.2 → 307 px).
/// With `level`: that level at its own resolution, read size = tile_size.
/// Throws UsageError for both/neither set, a level out of range, a target finer
/// than level 0, or tile_size < 1; InputError when a target is given but the slide
/// has no µm/px metadata, or when it has no levels. `slide_name` prefixes messages.
ReadPlan plan_read(const SlideGeometry& geometry, std::optional<double> target_mpp,
                   std::optional<int> level, int tile_size, const std::string& slide_name);

/// One tile in level-0 coordinates.
struct TileRect {
  std::int64_t col = 0;  ///< grid column (output tiles, left to right)
  std::int64_t row = 0;  ///< grid row (top to bottom)
  std::int64_t x = 0;    ///< level-0 x of the top-left corner
  std::int64_t y = 0;    ///< level-0 y of the top-left corner
  double size = 0.0;     ///< level-0 side length (tile_size * target_downsample)
};

/// The regular grid of tiles that lie fully inside level 0.
struct TileGrid {
  std::int64_t cols = 0;
  std::int64_t rows = 0;
  /// Level-0 distance between neighbouring tiles, (tile_size - overlap) *
  /// target_downsample. A double: at 0.3 µm/px on a 0.25 µm/px slide it is 307.2,
  /// and rounding it once would drift by 0.2 px per tile across the slide.
  double stride_level0 = 0.0;
  double size_level0 = 0.0;  ///< level-0 side of one tile
  /// Level-0 side that one read touches: max(size_level0, read_size_level *
  /// level_downsample), which differs from size_level0 by the read-size rounding.
  double extent_level0 = 0.0;

  std::int64_t count() const { return cols * rows; }
  /// The tile at (col, row); its corner is round(col * stride_level0), so tiles
  /// stay on the exact grid however many there are.
  TileRect at(std::int64_t col, std::int64_t row) const;
};

/// The grid for `plan` on a slide whose level 0 is `level0`: stride tile_size -
/// overlap output pixels, first tile at (0, 0), only tiles whose read stays inside
/// the slide. Throws UsageError unless 0 <= overlap < tile_size and tile_size >= 1.
TileGrid make_grid(const Level& level0, const ReadPlan& plan, int tile_size, int overlap);

/// The one check of a tile size and overlap: UsageError naming --tile-size (1 to
/// kMaxTileSize) or --overlap (0 to tile_size - 1).
void check_tile_size(int tile_size, int overlap = 0);
inline constexpr int kMaxTileSize = 16384;

/// Every tile of make_grid(), row-major (y, then x): the key order of the tile store.
std::vector<TileRect> tile_grid(const Level& level0, const ReadPlan& plan, int tile_size,
                                int overlap);

}  // namespace mltool::slide
