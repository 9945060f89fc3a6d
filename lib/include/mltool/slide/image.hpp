// Pixels in and out of `mltool tile`: resampling and thumbnails with libvips, JPEG encoding
// with libjpeg-turbo, PNG encoding with libvips. Images are interleaved 8-bit RGB.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mltool::slide {

/// An interleaved 8-bit RGB image.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;  ///< width * height * 3 bytes, row-major
};

/// Starts libvips once per process (thread-safe, idempotent). Every function here calls it.
void init_vips();

/// Resamples `rgb` (width × height) to exactly out_width × out_height with libvips'
/// vips_resize and the Lanczos-3 kernel (area-averaging first for large reductions, as
/// vips does). Runs on the calling thread only, so callers parallelise over tiles.
RgbImage resize(const std::uint8_t* rgb, int width, int height, int out_width, int out_height);

/// The whole of `level` of the slide at `path`, read through libvips' OpenSlide loader,
/// flattened on white and shrunk by `scale` (< 1) with vips_resize: a thumbnail made in
/// bounded memory (libvips streams the level in strips), on all cores.
RgbImage read_thumbnail(const std::string& path, int level, double scale);

/// Baseline JPEG with libjpeg-turbo at `quality` (1..100). Chroma is subsampled 4:2:0 below
/// quality 90 and kept at full resolution (4:4:4) from 90 up, as libvips' jpegsave does.
std::string encode_jpeg(const std::uint8_t* rgb, int width, int height, int quality);

/// Lossless PNG (libvips, zlib level 6, no filter search).
std::string encode_png(const std::uint8_t* rgb, int width, int height);

/// Decodes a JPEG (libjpeg-turbo, accurate DCT, as libjpeg's defaults) or PNG (libvips)
/// tile into `out` as 8-bit RGB, reusing its buffer. Grey or RGBA inputs are converted
/// (alpha composited on white). Throws FormatError "<what>: ..." for anything else or a
/// corrupt image; `what` names the tile (e.g. "tiles.lmdb: tile 'S1/000001_000002'").
void decode_image(const void* data, std::size_t size, RgbImage& out, const std::string& what);

/// Writes `image` as a PNG file, atomically (write aside, rename).
void write_png(const std::string& path, const RgbImage& image);

}  // namespace mltool::slide
