// Row sources of the feeds: the memory-mapped feature matrix, and tiles decoded from the
// tile store (or read from the slides of a coordinates store).
#include <torch/torch.h>

#include <cstring>

#include "feed.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/feature_tensor.hpp"
#include "mltool/io/image_codec.hpp"
#include "mltool/io/tile_pixels.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/parallel.hpp"

namespace mltool::train {
namespace {

class FeatureSource : public RowSource {
 public:
  explicit FeatureSource(std::shared_ptr<const io::FeatureStore> store)
      : store_(std::move(store)) {}
  std::int64_t rows() const override { return static_cast<std::int64_t>(store_->rows()); }
  std::vector<std::int64_t> row_shape() const override {
    return {static_cast<std::int64_t>(store_->dims())};
  }
  torch::ScalarType dtype() const override {
    return store_->dtype() == io::DType::float16 ? torch::kFloat16 : torch::kFloat32;
  }
  void copy_rows(const std::int64_t* rows, std::size_t n, std::uint8_t* dst) const override {
    const auto bytes = store_->row_bytes();
    const auto* base = static_cast<const std::uint8_t*>(store_->data());
    for (std::size_t i = 0; i < n; ++i)
      std::memcpy(dst + i * bytes, base + static_cast<std::uint64_t>(rows[i]) * bytes, bytes);
  }
  torch::Tensor whole(const torch::Device& device, int) const override {
    return io::load_feature_tensor(*store_, device);
  }

 private:
  std::shared_ptr<const io::FeatureStore> store_;
};

// Tiles of a tile store, or of a coordinates store's slide files, read by the caller's reader
// (slide::TilePixels).
class TileSource : public RowSource {
 public:
  TileSource(std::shared_ptr<const io::TileStore> store, std::vector<std::string> keys,
             const io::TilePixelOpener& open)
      : store_(std::move(store)),
        pixels_(open(*store_)),
        keys_(std::move(keys)),
        tile_(pixels_->tile_size()) {}
  std::int64_t rows() const override { return static_cast<std::int64_t>(keys_.size()); }
  std::vector<std::int64_t> row_shape() const override { return {tile_, tile_, 3}; }
  torch::ScalarType dtype() const override { return torch::kUInt8; }
  void copy_rows(const std::int64_t* rows, std::size_t n, std::uint8_t* dst) const override {
    pixels_->read(
        n,
        [&](std::size_t i) -> const std::string& {
          return keys_.at(static_cast<std::size_t>(rows[i]));
        },
        1, dst,
        [](std::size_t, const Error&) { throw; });  // a tile that cannot be read ends the run
  }
  torch::Tensor whole(const torch::Device& device, int threads) const override {
    auto host =
        torch::empty({rows(), row_bytes()},
                     torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(device.is_cuda()));
    constexpr std::int64_t kChunk = 256;
    const auto chunks = static_cast<std::size_t>((rows() + kChunk - 1) / kChunk);
    auto* base = host.data_ptr<std::uint8_t>();
    util::parallel_for(chunks, threads, [&](std::size_t c) {
      const std::int64_t first = static_cast<std::int64_t>(c) * kChunk;
      const std::int64_t n = std::min(kChunk, rows() - first);
      std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) ids[i] = first + i;
      copy_rows(ids.data(), ids.size(), base + first * row_bytes());
    });
    return device.is_cpu() ? host : host.to(device);
  }

 private:
  std::shared_ptr<const io::TileStore> store_;
  std::unique_ptr<io::TilePixelReader> pixels_;
  std::vector<std::string> keys_;
  std::int64_t tile_ = 0;
};

}  // namespace

std::int64_t RowSource::row_bytes() const {
  std::int64_t n = static_cast<std::int64_t>(torch::elementSize(dtype()));
  for (const auto d : row_shape()) n *= d;
  return n;
}

std::shared_ptr<const RowSource> feature_source(std::shared_ptr<const io::FeatureStore> store) {
  return std::make_shared<FeatureSource>(std::move(store));
}

std::shared_ptr<const RowSource> tile_source(std::shared_ptr<const io::TileStore> store,
                                             std::vector<std::string> keys,
                                             const io::TilePixelOpener& open) {
  return std::make_shared<TileSource>(std::move(store), std::move(keys), open);
}

std::uint64_t pinned_bytes(const RowSource& source) {
  return static_cast<std::uint64_t>(source.rows()) * static_cast<std::uint64_t>(source.row_bytes());
}

}  // namespace mltool::train
