// Pixels of `mltool tile` through libvips: resampling and thumbnails. The tile codecs are in
// mltool/io/image_codec.hpp.
#pragma once

#include <cstdint>
#include <string>

#include "mltool/io/image_codec.hpp"

namespace mltool::slide {

/// Starts libvips once per process (thread-safe, idempotent). Every function here calls it.
void init_vips();

/// Resamples `rgb` (width × height) to exactly out_width × out_height with libvips'
/// vips_resize and the Lanczos-3 kernel (area-averaging first for large reductions, as
/// vips does). Runs on the calling thread only, so callers parallelise over tiles.
io::RgbImage resize(const std::uint8_t* rgb, int width, int height, int out_width, int out_height);

/// The whole of `level` of the slide at `path`, read through libvips' OpenSlide loader,
/// flattened on white and shrunk by `scale` (< 1) with vips_resize: a thumbnail made in
/// bounded memory (libvips streams the level in strips), on all cores.
io::RgbImage read_thumbnail(const std::string& path, int level, double scale);

}  // namespace mltool::slide
