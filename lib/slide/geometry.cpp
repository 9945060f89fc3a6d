#include "mltool/slide/geometry.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "mltool/util/error.hpp"

namespace mltool::slide {
namespace {

bool positive_finite(double v) { return std::isfinite(v) && v > 0.0; }

// "%g"-like text without trailing zeros, for messages ("0.25", "4.000345").
std::string num(double v) {
  std::ostringstream out;
  out.precision(8);
  out << v;
  return out.str();
}

std::string describe_levels(const SlideGeometry& geometry) {
  std::ostringstream out;
  for (std::size_t i = 0; i < geometry.levels.size(); ++i) {
    const Level& l = geometry.levels[i];
    if (i > 0) out << ", ";
    out << i << " (" << l.width << "x" << l.height << ", downsample " << num(l.downsample) << ")";
  }
  return out.str();
}

void check_levels(const SlideGeometry& geometry, const std::string& slide_name) {
  if (geometry.levels.empty()) {
    throw InputError(at_file(slide_name, "the slide has no pyramid levels"));
  }
  for (std::size_t i = 0; i < geometry.levels.size(); ++i) {
    const Level& l = geometry.levels[i];
    if (l.width < 1 || l.height < 1 || !positive_finite(l.downsample)) {
      throw InputError(at_file(
          slide_name, "pyramid level " + std::to_string(i) + " has an invalid size or downsample"));
    }
  }
}

}  // namespace

bool is_placeholder_dpi(double dpi) {
  for (const double placeholder : {72.0, 96.0, 300.0})
    if (std::abs(dpi - placeholder) < 0.05) return true;
  return false;
}

std::optional<double> slide_mpp(const SlideGeometry& geometry) {
  const auto usable = [](const std::optional<double>& v) {
    return v && positive_finite(*v) && *v >= kMinPlausibleMpp && *v <= kMaxPlausibleMpp;
  };
  const bool has_x = usable(geometry.mpp_x);
  const bool has_y = usable(geometry.mpp_y);
  if (has_x && has_y) {
    const double x = *geometry.mpp_x;
    const double y = *geometry.mpp_y;
    if (std::abs(x - y) > 0.01 * std::min(x, y)) return (x + y) / 2.0;
    return x;
  }
  if (has_x) return *geometry.mpp_x;
  if (has_y) return *geometry.mpp_y;
  return std::nullopt;
}

ReadPlan plan_read(const SlideGeometry& geometry, std::optional<double> target_mpp,
                   std::optional<int> level, int tile_size, const std::string& slide_name) {
  if (target_mpp.has_value() == level.has_value()) {
    throw UsageError(slide_name + ": give exactly one of --mpp and --level");
  }
  check_tile_size(tile_size);
  check_levels(geometry, slide_name);
  ReadPlan plan;
  plan.mpp = slide_mpp(geometry);

  if (level) {
    if (*level < 0 || static_cast<std::size_t>(*level) >= geometry.levels.size()) {
      throw UsageError(at_file(slide_name, "--level " + std::to_string(*level) +
                                               " is out of range; the slide has levels " +
                                               describe_levels(geometry)));
    }
    plan.level = *level;
    plan.level_downsample = geometry.levels[*level].downsample;
    plan.target_downsample = plan.level_downsample;
    plan.read_size_level = tile_size;
    return plan;
  }

  if (!positive_finite(*target_mpp)) {
    throw UsageError("--mpp must be a positive number of µm per pixel, got " + num(*target_mpp));
  }
  if (!plan.mpp) {
    throw InputError(
        at_file(slide_name,
                "no usable µm/px metadata (openslide.mpp-x or TIFF resolution; a placeholder "
                "such as 72 dpi, or a value outside " +
                    num(kMinPlausibleMpp) + "-" + num(kMaxPlausibleMpp) +
                    " µm/px, counts as none); give the slide's µm per level-0 pixel with "
                    "--slide-mpp X (or per slide with --slide-mpp-table CSV), estimate it from "
                    "the tissue with --mpp-from-content, take 10 / the objective power the "
                    "slide declares with --mpp-from-power, or tile a pyramid level with "
                    "--level N"));
  }
  const double target = *target_mpp / *plan.mpp;
  // Level 0 is the finest there is; a finer target would need upsampling, which
  // invents detail the scanner never saw.
  const double finest = geometry.levels[0].downsample;
  if (target < finest * (1.0 - kLevelTolerance)) {
    throw UsageError(
        at_file(slide_name, "--mpp " + num(*target_mpp) + " is finer than the slide's level 0 (" +
                                num(*plan.mpp * finest) + " µm/px); pass --mpp of at least that"));
  }
  // Coarsest level at or finer than the target; levels are not assumed sorted,
  // and on equal downsamples the lower index wins.
  int best = 0;
  for (std::size_t i = 0; i < geometry.levels.size(); ++i) {
    const double ds = geometry.levels[i].downsample;
    if (ds <= target * (1.0 + kLevelTolerance) && ds > geometry.levels[best].downsample) {
      best = static_cast<int>(i);
    }
  }
  plan.level = best;
  plan.level_downsample = geometry.levels[best].downsample;
  plan.target_downsample = target;
  const double read = static_cast<double>(tile_size) * target / plan.level_downsample;
  plan.read_size_level = std::max<std::int64_t>(1, std::llround(read));
  return plan;
}

TileRect TileGrid::at(std::int64_t col, std::int64_t row) const {
  TileRect rect;
  rect.col = col;
  rect.row = row;
  rect.x = std::llround(static_cast<double>(col) * stride_level0);
  rect.y = std::llround(static_cast<double>(row) * stride_level0);
  rect.size = size_level0;
  return rect;
}

namespace {

// Number of tiles along one axis of `length` level-0 pixels. The closed form gives
// the answer up to the rounding of corners, which the two loops then settle
// exactly against the same test TileGrid::at uses.
std::int64_t count_along(std::int64_t length, const TileGrid& grid) {
  // The 1e-6 slack only absorbs floating error (0.1 * 3 != 0.3); a read that
  // crosses the edge by any real fraction of a pixel is refused.
  const auto fits = [&](std::int64_t i) {
    const double corner =
        static_cast<double>(std::llround(static_cast<double>(i) * grid.stride_level0));
    return corner + grid.extent_level0 <= static_cast<double>(length) + 1e-6;
  };
  const double span = static_cast<double>(length) - grid.extent_level0;
  if (span < -1e-6) return 0;
  auto n = static_cast<std::int64_t>(std::floor(span / grid.stride_level0)) + 1;
  while (n > 0 && !fits(n - 1)) --n;
  while (fits(n)) ++n;
  return n;
}

}  // namespace

void check_tile_size(int tile_size, int overlap) {
  if (tile_size < 1 || tile_size > kMaxTileSize) {
    throw UsageError("--tile-size must be between 1 and " + std::to_string(kMaxTileSize) +
                     ", got " + std::to_string(tile_size));
  }
  if (overlap < 0 || overlap >= tile_size) {
    throw UsageError("--overlap must be at least 0 and less than --tile-size (" +
                     std::to_string(tile_size) + "), got " + std::to_string(overlap));
  }
}

TileGrid make_grid(const Level& level0, const ReadPlan& plan, int tile_size, int overlap) {
  check_tile_size(tile_size, overlap);
  TileGrid grid;
  grid.stride_level0 = static_cast<double>(tile_size - overlap) * plan.target_downsample;
  grid.size_level0 = static_cast<double>(tile_size) * plan.target_downsample;
  grid.extent_level0 =
      std::max(grid.size_level0, static_cast<double>(plan.read_size_level) * plan.level_downsample);
  grid.cols = count_along(level0.width, grid);
  grid.rows = count_along(level0.height, grid);
  if (grid.cols == 0 || grid.rows == 0) grid.cols = grid.rows = 0;
  return grid;
}

std::vector<TileRect> tile_grid(const Level& level0, const ReadPlan& plan, int tile_size,
                                int overlap) {
  const TileGrid grid = make_grid(level0, plan, tile_size, overlap);
  std::vector<TileRect> tiles;
  tiles.reserve(static_cast<std::size_t>(grid.count()));
  for (std::int64_t row = 0; row < grid.rows; ++row) {
    for (std::int64_t col = 0; col < grid.cols; ++col) tiles.push_back(grid.at(col, row));
  }
  return tiles;
}

}  // namespace mltool::slide
