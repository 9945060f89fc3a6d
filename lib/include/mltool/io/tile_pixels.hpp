// The pixels of a tile store's tiles as the layers above slide/ see them: an interface, so that
// train/ reads an image model's tiles without knowing how they are read. slide::TilePixels is
// the one implementation (decoded from the store, or read from the slides of a coordinates
// store, mltool/slide/tile_pixels.hpp); its opener is handed down by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "mltool/util/error.hpp"

namespace mltool::io {

class TileStore;

class TilePixelReader {
 public:
  virtual ~TilePixelReader() = default;
  /// The tiles' side in pixels.
  virtual int tile_size() const = 0;
  /// Reads `n` tiles, the i-th `key(i)`, into `out` (tile i at out + i × T × T × 3,
  /// interleaved RGB) on `threads` workers (0: one per allowed CPU). A tile that cannot be
  /// read is zeroed and `failed(i, error)` is called inside the handler: it rethrows
  /// (`throw;`) to end the read with that error, or returns to go on.
  virtual void read(std::size_t n, const std::function<const std::string&(std::size_t)>& key,
                    int threads, std::uint8_t* out,
                    const std::function<void(std::size_t, const Error&)>& failed) const = 0;
};

/// Opens a reader of `store`'s tiles; the store outlives the reader.
using TilePixelOpener = std::function<std::unique_ptr<TilePixelReader>(const TileStore& store)>;

}  // namespace mltool::io
