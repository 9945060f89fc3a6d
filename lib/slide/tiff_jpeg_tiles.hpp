// A pyramid level's own JPEG tiles, read from its TIFF directory as they are stored, for
// `mltool tile --passthrough auto` (not a public header). OpenSlide reads the tiles of such a
// level (generic-tiff, aperio) by decoding each one alone: the JPEGTables tag's tables, the
// colour space its Photometric tag gives (openslide-decode-tiff.c). A region of the level that
// is exactly one whole tile is therefore that tile decoded, and storing its compressed bytes
// (made standalone, io/jpeg_tiff.hpp) keeps every pixel without decoding or re-encoding.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mltool/io/jpeg_tiff.hpp"
#include "mltool/slide/openslide.hpp"

namespace mltool::slide {

class TiffJpegTiles {
 public:
  /// The TIFF directory of `slide`'s `level` if its tiles can pass through as tiles of
  /// `tile_size` pixels: an OpenSlide slide of the generic-tiff or aperio vendor whose level is
  /// a tiled directory of the same size, tile_size × tile_size tiles, JPEG-compressed, 8-bit
  /// RGB or YCbCr, contiguous. Otherwise null, and `why` says what differs. Reads only the
  /// directory's tags; tiles are read later, with pread, from any number of threads.
  static std::unique_ptr<TiffJpegTiles> open(const Slide& slide, int level, int tile_size,
                                             std::string& why);
  ~TiffJpegTiles();

  /// The standalone JPEG of the tile whose top-left corner is at level-0 (x, y) when the
  /// tile_size square of the level there is exactly one whole tile of the directory — its
  /// level position, x / downsample as OpenSlide computes it, a whole multiple of the tile
  /// size, and the tile wholly inside the level; nothing otherwise (an edge tile, a position
  /// between tiles, an empty tile). FormatError or InputError naming the file and the tile
  /// for a tile that cannot be read or is not JPEG.
  std::optional<std::string> jpeg_at(std::int64_t x, std::int64_t y) const;

  int directory() const { return directory_; }
  io::JpegColour colour() const { return colour_; }

 private:
  TiffJpegTiles() = default;
  std::string path_;
  int fd_ = -1;
  int directory_ = 0;
  io::JpegColour colour_ = io::JpegColour::ycbcr;
  double downsample_ = 1;
  std::int64_t width_ = 0, height_ = 0, tile_ = 0, across_ = 0;
  std::string tables_;
  std::vector<std::uint64_t> offsets_, sizes_;
};

}  // namespace mltool::slide
