// A TIFF pyramid level's own JPEG tiles, read from its TIFF directory as they are stored
// (OwnJpegTiles for generic-tiff and aperio; not a public header). OpenSlide decodes each tile
// alone, with the JPEGTables tag's tables and the colour space its Photometric tag gives
// (openslide-decode-tiff.c); the tile made standalone (io/jpeg_tiff.hpp) decodes the same.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "own_jpeg_tiles.hpp"

namespace mltool::slide {

class TiffJpegTiles : public OwnJpegTiles {
 public:
  /// The TIFF directory of `slide`'s `level` if its tiles can pass through as tiles of
  /// `tile_size` pixels: an OpenSlide slide of the generic-tiff or aperio vendor whose level is
  /// a tiled directory of the same size, tile_size × tile_size tiles, JPEG-compressed, 8-bit
  /// RGB or YCbCr, contiguous. Otherwise null, and `why` says what differs. Reads only the
  /// directory's tags.
  static std::unique_ptr<TiffJpegTiles> open(const Slide& slide, int level, int tile_size,
                                             std::string& why);
  ~TiffJpegTiles() override;

  /// {"tiles", "tiff_directory": the directory's index, "colour"}.
  nlohmann::json record(std::int64_t passed) const override;

 private:
  TiffJpegTiles(const Level& level, int tile_size, io::JpegColour colour)
      : OwnJpegTiles(level, tile_size, colour) {}
  std::optional<std::string> tile(std::size_t index) const override;
  std::string path_;
  int fd_ = -1;
  int directory_ = 0;
  std::string tables_;
  std::vector<std::uint64_t> offsets_, sizes_;
};

}  // namespace mltool::slide
