// Heatmap pictures (mltool predict): per-tile scores as a colour overlay on a slide's
// picture, with a colour bar and a caption.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mltool/io/image_codec.hpp"

namespace mltool::slide {

/// One tile's footprint in picture pixels, [x0, x1) × [y0, y1), and its score in [0, 1].
struct HeatTile {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  float value = 0;
};

/// The colour of `v` (clamped to [0, 1]): dark blue, cyan, green, yellow, red.
std::array<std::uint8_t, 3> heat_colour(float v);

/// `picture` with each tile's footprint blended half and half with its colour, then a colour
/// bar from 0 to 1 (1/48 of the long side high, at least 12 px) and caption_picture's caption
/// strip holding `caption`. As wide as `picture`; the same input gives the same pixels.
io::RgbImage heatmap_picture(const io::RgbImage& picture, const std::vector<HeatTile>& tiles,
                             const std::vector<std::string>& caption);

}  // namespace mltool::slide
