// The rows a model reads: the feature matrix of a feature store, or the decoded tiles of a
// tile store, one row per sample (tile and image models) or instance (bag models). Training's
// feeds (lib/train/feed.hpp) and predict gather batches from them.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mltool/io/tile_pixels.hpp"

namespace mltool::io {
class FeatureStore;
class TileStore;
}  // namespace mltool::io

namespace mltool::train {

/// The rows a feed (or predict) draws from, each `row_bytes` bytes of `dtype`.
class RowSource {
 public:
  virtual ~RowSource() = default;
  virtual std::int64_t rows() const = 0;
  /// The shape of one row as the model sees it: {D}, or {T, T, 3} for tiles.
  virtual std::vector<std::int64_t> row_shape() const = 0;
  virtual torch::ScalarType dtype() const = 0;
  std::int64_t row_bytes() const;
  /// Copies rows `rows[0..n)` into `dst` back to back. Safe from several threads at once.
  virtual void copy_rows(const std::int64_t* rows, std::size_t n, std::uint8_t* dst) const = 0;
  /// Every row as one (rows × row_bytes/itemsize) tensor on `device`.
  virtual torch::Tensor whole(const torch::Device& device, int threads) const = 0;
};

/// The feature matrix of a store, read through its memory map.
std::shared_ptr<const RowSource> feature_source(std::shared_ptr<const io::FeatureStore> store);

/// Decoded tiles: row i is tile `keys[i]` of `store`, T×T×3 uint8, read by a reader `open`
/// makes (slide::open_tile_pixels). FormatError naming the store and key for a missing or
/// undecodable tile, or one of another size.
std::shared_ptr<const RowSource> tile_source(std::shared_ptr<const io::TileStore> store,
                                             std::vector<std::string> keys,
                                             const io::TilePixelOpener& open);

}  // namespace mltool::train
