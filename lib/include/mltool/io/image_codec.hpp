// Tile codecs: JPEG with libjpeg-turbo, PNG with libpng. No OpenSlide or libvips, so
// `mltool extract` (which only decodes) builds where those are absent, e.g. the GPU machine.
// Images are interleaved 8-bit RGB.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mltool/util/options.hpp"

namespace mltool::io {

/// An interleaved 8-bit RGB image.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;  ///< width * height * 3 bytes, row-major
};

/// Baseline JPEG with libjpeg-turbo at `quality` (1..100). Chroma is subsampled 4:2:0 below
/// quality 90 and kept at full resolution (4:4:4) from 90 up, as libvips' jpegsave does.
std::string encode_jpeg(const std::uint8_t* rgb, int width, int height, int quality);

/// Lossless PNG (libpng, default zlib level).
std::string encode_png(const std::uint8_t* rgb, int width, int height);

/// An 8-bit single-channel image (a mask).
struct GreyImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;  ///< width * height bytes, row-major
};

/// Lossless 8-bit greyscale PNG (libpng), for masks.
std::string encode_png_grey(const std::uint8_t* grey, int width, int height);
/// Decodes a PNG as 8-bit grey (colour converted); FormatError "<what>: ..." if it is not one.
GreyImage decode_png_grey(const void* data, std::size_t size, const std::string& what);

/// How tiles are encoded, and the table of codecs: adding an encoding adds an enumerator and
/// a row of kEncodings (decode_image recognises every encoding by its signature).
enum class TileEncoding { jpeg, png };

struct EncodingInfo {
  TileEncoding encoding;
  const char* name;  ///< as in --format and the store's "encoding"
  /// Encodes width × height RGB; `quality` is used by lossy encodings.
  std::string (*encode)(const std::uint8_t* rgb, int width, int height, int quality);
};

/// Every encoding, in the order --format lists them.
extern const EncodingInfo kEncodings[2];

/// The encodings by name (kEncodings' names), for the --format option.
const util::EnumNames<TileEncoding>& encoding_names();

/// The row of `encoding`.
const EncodingInfo& encoding_info(TileEncoding encoding);
/// The encoding named `name`, or nothing.
std::optional<TileEncoding> encoding_named(std::string_view name);

/// Decodes a JPEG (libjpeg-turbo, accurate DCT, as libjpeg's defaults) or PNG (libpng) tile
/// into `out` as 8-bit RGB, reusing its buffer. Grey and 16-bit inputs are converted, alpha
/// composited on white. Throws FormatError "<what>: ..." for anything else or a corrupt or
/// truncated image; `what` names the tile (e.g. "tiles.lmdb: tile 'S1/000001_000002'").
void decode_image(const void* data, std::size_t size, RgbImage& out, const std::string& what);

/// An image's size in pixels.
struct ImageSize {
  int width = 0;
  int height = 0;
};

/// As decode_image, for an image that must be `expected`: its header's size is checked before
/// anything is allocated (a JPEG header may claim 65500 x 65500, 12 GB of RGB), and a different
/// size is a FormatError "<what>: ... W x H pixels, not ...".
void decode_image(const void* data, std::size_t size, RgbImage& out, const std::string& what,
                  const ImageSize& expected);

/// The size a JPEG or PNG header declares, nothing decoded. FormatError as decode_image's.
ImageSize image_size(const void* data, std::size_t size, const std::string& what);

/// Writes `image` as a PNG file, atomically (write aside, rename).
void write_png(const std::string& path, const RgbImage& image);

}  // namespace mltool::io
