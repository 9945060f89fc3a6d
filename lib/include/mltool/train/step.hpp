// One training step's forward and backward passes, whole or in micro-batches (--micro-batches):
// the gradients of the batch accumulate into the parameters' .grad; the optimizer step is the
// caller's. docs/train.md#memory-modes.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "mltool/train/models.hpp"

namespace mltool::train {

/// The sizes of the parts a batch of `batch` samples is cut into for `parts` micro-batches:
/// min(parts, batch) parts, in order, the first `batch % parts` of them one sample larger
/// (10 in 3: 4, 3, 3). parts >= 1.
std::vector<std::int64_t> micro_batch_sizes(std::int64_t batch, std::int64_t parts);

/// Forward and backward of the batch `in` with labels `y` (cross-entropy, weighted per label by
/// `class_weights` when defined), in `micro_batches` parts (micro_batch_sizes) run one after
/// the other, each with its own graph. Each part's loss is its samples' summed (weighted)
/// cross-entropy over the whole batch's sum of weights (its size when unweighted), so the
/// accumulated gradient is the whole batch's mean loss's. Bags (a defined mask) are cut to
/// each part's longest bag. Returns the batch's loss, detached; 1 part is the plain mean.
/// `activation_bytes`, when given, gets the tracked activation peak: the bytes of the block
/// outputs of the largest part (the whole batch for 1 part).
torch::Tensor accumulate_gradients(BlockModel& model, const Activation& in, const torch::Tensor& y,
                                   const torch::Tensor& class_weights, std::int64_t micro_batches,
                                   std::int64_t* activation_bytes = nullptr);

}  // namespace mltool::train
