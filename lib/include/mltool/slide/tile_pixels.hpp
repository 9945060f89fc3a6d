// The pixels of a tile store's tiles, wherever they are: decoded from the store, or in a
// coordinates store (settings' pixels false, written by `mltool extract SLIDE...`) read from
// the slide files its "slides" records name, exactly as `mltool tile` reads them: the recorded
// level, region reader and read size, resampled to the tile size by the same resize. A tile
// read from its slide therefore equals what `mltool tile --format png` stores for it.
//
// Every command that needs pixels (extract, train and predict on images) reads them here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mltool/io/dicomweb.hpp"
#include "mltool/io/tile_pixels.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/util/error.hpp"

namespace mltool::slide {

class TilePixels : public io::TilePixelReader {
 public:
  /// Reads the tiles of `store`, which must outlive this. InputError if it has no settings
  /// (not a tile store, or no slide finished in it). Slides recorded as DICOMweb series URLs
  /// are fetched with `web`.
  explicit TilePixels(const io::TileStore& store, const io::DicomwebOptions& web = {});
  ~TilePixels() override;
  TilePixels(const TilePixels&) = delete;
  TilePixels& operator=(const TilePixels&) = delete;

  int tile_size() const override { return tile_; }
  /// Whether tiles come from the slide files (a coordinates store).
  bool from_slides() const { return slides_ != nullptr; }

  /// Reads `n` tiles, the i-th `key(i)` (a complete slide's tile key of the store), into
  /// `out` (tile i at out + i × T × T × 3, interleaved RGB) on `threads` workers (0: one per
  /// allowed CPU). A tile that cannot be read — undecodable, or its slide file missing or
  /// changed: Error naming the store, the tile and the slide — is zeroed and `failed(i, error)`
  /// is called inside the handler: it rethrows (`throw;`) to end the read with that error, or
  /// returns to go on.
  void read(std::size_t n, const std::function<const std::string&(std::size_t)>& key, int threads,
            std::uint8_t* out,
            const std::function<void(std::size_t, const Error&)>& failed) const override;

  /// Whether tiles can be JPEG streams that decode alone to the tile, for a decoder other than
  /// read()'s (extract --decode device): a store of JPEG tiles, or a coordinates store, whose
  /// tiles may be their slides' own JPEG tiles.
  bool may_be_jpeg() const;
  /// The `n` tiles' JPEG streams on `threads` workers: out[i] the i-th tile's, or empty where
  /// the tile is no JPEG that decodes alone as read() reads it — a PNG tile, an RGB-coded JPEG
  /// (decoders differ on those), a region read or resized from a slide, a tile whose read
  /// fails: read() those (it reports their errors).
  void read_jpeg(std::size_t n, const std::function<const std::string&(std::size_t)>& key,
                 int threads, std::vector<std::string>& out) const;

 private:
  class Slides;  // the open slide files of a coordinates store
  const io::TileStore& store_;
  int tile_ = 0;
  bool jpeg_tiles_ = false;  // a store of JPEG tiles
  std::unique_ptr<Slides> slides_;
};

/// What opens a TilePixels of a store, its DICOMweb slides read with `web`: the
/// io::TilePixelOpener the layers above hand to train/ (TrainJob::tile_pixels).
io::TilePixelOpener open_tile_pixels(const io::DicomwebOptions& web);

}  // namespace mltool::slide
