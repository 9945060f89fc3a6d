// A pyramid level's own JPEG tiles, as the slide file stores them, for `mltool tile
// --passthrough auto` (not a public header). OpenSlide reads such a level (the tiled TIFF of
// generic-tiff and aperio, a DICOM WSI instance's frames) by decoding each tile alone, so a
// region of the level that is exactly one whole tile is that tile decoded, and storing its
// compressed bytes (made a standalone JPEG) keeps every pixel without decoding or encoding.
// One implementation per container: TiffJpegTiles (tiff_jpeg_tiles.hpp), DicomJpegFrames
// (dicom_jpeg_frames.hpp); tiler.cpp sees only this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mltool/io/jpeg_tiff.hpp"
#include "mltool/slide/openslide.hpp"

namespace mltool::slide {

class OwnJpegTiles {
 public:
  /// The own JPEG tiles of `slide`'s `level` if they can pass through as tiles of
  /// `tile_size` pixels (TiffJpegTiles for generic-tiff and aperio, DicomJpegFrames for
  /// dicom); otherwise null, and `why` says what differs. Tiles are read later, with pread,
  /// from any number of threads.
  static std::unique_ptr<OwnJpegTiles> open(const Slide& slide, int level, int tile_size,
                                            std::string& why);
  virtual ~OwnJpegTiles() = default;

  /// The standalone JPEG of the tile whose top-left corner is at level-0 (x, y) when the
  /// tile_size square of the level there is exactly one whole tile — its level position,
  /// x / downsample as OpenSlide computes it, a whole multiple of the tile size, and the tile
  /// wholly inside the level; nothing otherwise (an edge tile, a position between tiles, an
  /// empty tile). FormatError or InputError naming the file and the tile for a tile that
  /// cannot be read or is not JPEG.
  std::optional<std::string> jpeg_at(std::int64_t x, std::int64_t y) const;

  /// How the tiles code colour (the TIFF's Photometric, the DICOM PhotometricInterpretation).
  io::JpegColour colour() const { return colour_; }

  /// The slide record's "passthrough" object: {"tiles": passed, "colour", and where the tiles
  /// come from (docs/formats.md#tile-store)}.
  virtual nlohmann::json record(std::int64_t passed) const = 0;

  /// The level-0 positions of the tiles jpeg_at will be asked for, in about that order: a
  /// source that fetches over a network (DicomwebFrames) fetches them ahead. Optional.
  virtual void will_read(const std::vector<std::pair<std::int64_t, std::int64_t>>& positions) {
    (void)positions;
  }

 protected:
  OwnJpegTiles(const Level& level, int tile_size, io::JpegColour colour);
  /// The standalone JPEG of tile `index` (row-major over the level's tile grid), or nothing
  /// for a tile the file does not hold.
  virtual std::optional<std::string> tile(std::size_t index) const = 0;
  /// The index of the whole tile at level-0 (x, y), as jpeg_at finds it, or nothing.
  std::optional<std::size_t> index_at(std::int64_t x, std::int64_t y) const;
  /// `size` bytes of open file `fd` (`path`) at `offset`, for `what` (named in errors).
  static std::string read_at(int fd, const std::string& path, std::uint64_t offset,
                             std::uint64_t size, const std::string& what);

 private:
  io::JpegColour colour_;
  double downsample_;
  std::int64_t width_, height_, tile_, across_;
};

}  // namespace mltool::slide
