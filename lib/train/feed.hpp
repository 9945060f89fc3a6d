// Feeds: where training batches come from. Every feed serves exactly the same batches — the
// same samples in the same order, the same bytes — so a seed gives the same run whichever
// is used; they differ only in where rows are gathered and when they cross the bus.
//
// - pinned: the source's whole matrix (the feature matrix, or the decoded tiles) lives on the
//   device; a batch is cut there by index (gather_rows), the pass's order uploaded once.
// - host: worker threads gather each batch's rows from the memory map (or decode its tiles)
//   into pinned host memory, a few batches ahead; on CUDA the next batch is copied on a side
//   stream while the current one computes (double buffering).
// - sync (host with no workers): gathered and copied on the calling thread, blocking — the
//   baseline the benchmarks compare against.
// Internal to lib/train.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "mltool/io/tile_pixels.hpp"
#include "mltool/train/row_source.hpp"

namespace mltool::io {
class FeatureStore;
class TileStore;
}  // namespace mltool::io
namespace mltool::features {
class StainNormalizer;
}

namespace mltool::train {

/// One batch, on the training device.
struct Batch {
  torch::Tensor x;  ///< float32 B×D (tile), B×L×D (bag, padding zeroed), or uint8 B×T×T×3 (image)
  torch::Tensor y;     ///< the samples' rows of the split's target table (Task::targets)
  torch::Tensor mask;  ///< bag: bool B×L, true for real instances; undefined otherwise
  std::int64_t size = 0;
  /// The samples' ids (their indices in the split), in batch order: what --augment draws by.
  std::vector<std::int64_t> ids;
};

/// A pass over one split.
class Feed {
 public:
  virtual ~Feed() = default;
  /// Starts a pass over the samples `order` (CPU int64 sample ids), `batch` at a time, from
  /// batch `first` on (the earlier ones are skipped: resuming inside an epoch). The last
  /// batch may be smaller.
  virtual void start(const torch::Tensor& order, std::int64_t batch, std::int64_t first) = 0;
  /// The next batch of the pass, or nothing at its end.
  virtual std::optional<Batch> next() = 0;
};

/// `matrix`: source.whole(device), shared by the feeds of every split. `targets` (CPU): the
/// split's target table, row i sample i's (Task::targets).
std::unique_ptr<Feed> pinned_feed(std::shared_ptr<const RowSource> source, torch::Tensor matrix,
                                  const SplitSamples& samples, const torch::Tensor& targets,
                                  records::PackUnit unit, const torch::Device& device);

/// `workers` threads gather ahead; 0 = the sync feed.
std::unique_ptr<Feed> host_feed(std::shared_ptr<const RowSource> source,
                                const SplitSamples& samples, torch::Tensor targets,
                                records::PackUnit unit, const torch::Device& device, int workers);

/// A pinned feed that can become a host feed (train's out-of-memory fallback in the first epoch,
/// oom_step.hpp): to_host() drops the pinned feed, and with it its share of the device's copy of
/// the rows, and goes on from the same position of the same pass with `make_host()`'s feed,
/// which serves the same batches.
class FallbackFeed : public Feed {
 public:
  FallbackFeed(std::unique_ptr<Feed> pinned, std::function<std::unique_ptr<Feed>()> make_host);
  void start(const torch::Tensor& order, std::int64_t batch, std::int64_t first) override;
  std::optional<Batch> next() override;
  /// Switches to the host feed; false when it already is one.
  bool to_host();

 private:
  std::unique_ptr<Feed> inner_;
  std::function<std::unique_ptr<Feed>()> make_host_;
  bool host_ = false;
  torch::Tensor order_;  // the pass in progress: its order, batch size and batches served
  std::int64_t batch_ = 0, served_ = 0;
};

/// --stain-norm: `inner`'s batches (uint8 tiles) with each tile normalised to `stain`'s
/// reference on the batch's device (feed_stain.cpp).
std::unique_ptr<Feed> stained_feed(std::unique_ptr<Feed> inner,
                                   std::shared_ptr<const features::StainNormalizer> stain);

/// Bytes the pinned feed puts on the device for `source`.
std::uint64_t pinned_bytes(const RowSource& source);

// Shared by the feeds, so their batches are identical.
namespace detail {

/// The rows and mask of a batch of samples: tile/image L = 1 (no mask); bags padded to the
/// longest bag L with its own first row, mask 0 there.
struct Layout {
  std::vector<std::int64_t> rows;  ///< B × L
  std::vector<std::uint8_t> mask;  ///< B × L (bags only)
  std::int64_t batch = 0;
  std::int64_t length = 1;
};
Layout layout(const SplitSamples& samples, const std::int64_t* ids, std::int64_t n, bool bag);

/// Raw gathered rows ((B·L) × row elements, stored dtype) → the model's input.
Batch finish(const torch::Tensor& raw, torch::Tensor y, torch::Tensor mask, std::int64_t batch,
             std::int64_t length, const RowSource& source, records::PackUnit unit);

}  // namespace detail
}  // namespace mltool::train
