// Data parallel training's arithmetic, without LibTorch (docs/train.md#data-parallel): how
// each global batch is split among the ranks, and how gradients are grouped into buckets
// for the all-reduce.
#pragma once

#include <cstdint>
#include <vector>

namespace mltool::train {

/// Rank `rank`'s part of a global batch of `batch` samples among `world` ranks: its first
/// position in the batch and its size. Contiguous, in rank order, the first `batch % world`
/// ranks one sample larger (15 among 2: [0, 8) and [8, 15)). batch >= world >= 1.
struct RankSlice {
  std::int64_t offset = 0;
  std::int64_t size = 0;
};
RankSlice rank_slice(std::int64_t batch, std::int64_t world, std::int64_t rank);

/// The positions (into an epoch's order of `used` samples, a whole number of global batches
/// of `batch`) that rank `rank` trains on, batch after batch: its slice of each global batch.
std::vector<std::int64_t> rank_positions(std::int64_t used, std::int64_t batch, std::int64_t world,
                                         std::int64_t rank);

/// Groups tensors of `bytes` (in order) into buckets of consecutive tensors of at most
/// `cap` bytes each; a tensor larger than `cap` is a bucket of its own. Returns each bucket's
/// tensor indices, in order.
std::vector<std::vector<std::size_t>> gradient_buckets(const std::vector<std::int64_t>& bytes,
                                                       std::int64_t cap);

}  // namespace mltool::train
