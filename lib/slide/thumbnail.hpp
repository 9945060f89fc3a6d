// A slide's thumbnail for tissue detection and QC pictures (not a public header).
#pragma once

#include "mltool/io/image_codec.hpp"
#include "mltool/slide/openslide.hpp"

namespace mltool::slide {

/// A thumbnail and the scale between it and level 0.
struct Thumbnail {
  io::RgbImage image;
  int level = 0;          ///< the pyramid level it was made from
  double dx = 1, dy = 1;  ///< level-0 pixels per thumbnail pixel, per axis
};

/// The whole slide at about `downsample` level-0 pixels per thumbnail pixel (at least 1),
/// made from the coarsest level at or finer than that.
Thumbnail slide_thumbnail(const Slide& slide, double downsample);

}  // namespace mltool::slide
