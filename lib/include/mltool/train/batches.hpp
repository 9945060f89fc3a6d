// Training's batch arithmetic, without LibTorch (docs/train.md#the-loop and #data-parallel):
// the steps of an epoch, how each global batch is split among data parallel ranks, and how
// gradients are grouped into buckets for the all-reduce.
#pragma once

#include <cstdint>
#include <vector>

namespace mltool::train {

/// The sizes of an epoch's steps over `samples` samples in batches of `batch`: the full
/// batches, then the remainder as a smaller last step when `keep_last` (dropped otherwise); a
/// split smaller than one batch is one step of all of it. samples, batch >= 1.
std::vector<std::int64_t> step_sizes(std::int64_t samples, std::int64_t batch, bool keep_last);

/// Rank `rank`'s part of a global batch of `batch` samples among `world` ranks: its first
/// position in the batch and its size. Contiguous, in rank order, the first `batch % world`
/// ranks one sample larger (15 among 2: [0, 8) and [8, 15)); a batch smaller than the world
/// leaves the last ranks empty (3 among 4: 1, 1, 1, 0). batch >= 0, world > rank >= 0.
struct RankSlice {
  std::int64_t offset = 0;
  std::int64_t size = 0;
};
RankSlice rank_slice(std::int64_t batch, std::int64_t world, std::int64_t rank);

/// The positions (into an epoch's order, cut into consecutive steps of `steps` sizes) that
/// rank `rank` trains on, step after step: its slice of each step.
std::vector<std::int64_t> rank_positions(const std::vector<std::int64_t>& steps, std::int64_t world,
                                         std::int64_t rank);

/// Groups tensors of `bytes` (in order) into buckets of consecutive tensors of at most
/// `cap` bytes each; a tensor larger than `cap` is a bucket of its own. Returns each bucket's
/// tensor indices, in order.
std::vector<std::vector<std::size_t>> gradient_buckets(const std::vector<std::int64_t>& bytes,
                                                       std::int64_t cap);

}  // namespace mltool::train
