// The QC picture of `mltool tile`: a slide's thumbnail with its tissue mask tinted and the
// kept tiles outlined, so a glance shows what tissue detection and the grid did.
#pragma once

#include <vector>

#include "mltool/io/image_codec.hpp"
#include "mltool/slide/tissue.hpp"

namespace mltool::slide {

/// A box in thumbnail pixel coordinates, [x0, x1) × [y0, y1).
struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

/// The thumbnail with tissue pixels (mask != 0; mask may be null) blended 35% towards
/// green and each box outlined one pixel wide in blue.
io::RgbImage qc_picture(const io::RgbImage& thumbnail, const Mask* mask,
                        const std::vector<Box>& kept);

}  // namespace mltool::slide
