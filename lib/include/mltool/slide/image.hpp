// Pixels of `mltool tile` through libvips: resampling and thumbnails. The tile codecs are in
// mltool/io/image_codec.hpp.
#pragma once

#include <cstdint>
#include <string>

#include "mltool/io/image_codec.hpp"
#include "mltool/slide/openslide.hpp"

namespace mltool::slide {

/// Starts libvips once per process (thread-safe, idempotent). Every function here calls it.
void init_vips();

/// Resamples `rgb` (width × height) to exactly out_width × out_height with libvips'
/// vips_resize and the Lanczos-3 kernel (area-averaging first for large reductions, as
/// vips does). Runs on the calling thread only, so callers parallelise over tiles.
io::RgbImage resize(const std::uint8_t* rgb, int width, int height, int out_width, int out_height);

/// The whole of `level` of `slide` shrunk by `scale` (<= 1) to round(size * scale) with
/// vips_resize: a thumbnail made in bounded memory, on all cores. A pyramid's level is read
/// through the Slide (OpenSlide, on white) in libvips' strips; a flat image is decoded once
/// by libvips (JPEG shrinking while it decodes).
io::RgbImage read_thumbnail(const Slide& slide, int level, double scale);

/// "libvips 8.14.1": the libvips this process runs.
std::string libvips_version();

}  // namespace mltool::slide
