// One training step's forward and backward passes, whole or in micro-batches (--micro-batches):
// the gradients of the batch accumulate into the parameters' .grad; the optimizer step is the
// caller's. docs/train.md#memory-modes.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "mltool/train/models.hpp"

namespace mltool::train {

/// The loss a step minimizes, as the memory modes use it (each task of lib/train/task.hpp is
/// one). A per-sample loss is a weighted mean of per-sample terms: each part sums its terms
/// over the whole step's weights. Any other (Cox's: every sample's risk set is the step) is
/// computed on the whole step's outputs.
class StepLoss {
 public:
  virtual ~StepLoss() = default;
  virtual bool per_sample() const { return true; }
  /// per_sample(): the weighted sum of the terms of outputs `out` with targets `y`.
  virtual torch::Tensor loss_sum(const torch::Tensor& out, const torch::Tensor& y) const = 0;
  /// per_sample(): the sum of the weights of targets `y` (float32 scalar on their device).
  virtual torch::Tensor weight_sum(const torch::Tensor& y) const;
  /// The step's loss: loss_sum / weight_sum unless overridden.
  virtual torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& y) const;
};

/// The weighted sum of the per-sample loss terms of `model`'s output `out` (its logits, and
/// what its family's objective reads) with targets `y`: the family's objective
/// (BlockModel::objective), else `loss`'s loss_sum of the logits. UsageError for an objective
/// with a loss that is not per-sample (the families that have one refuse such tasks first).
torch::Tensor output_loss_sum(const BlockModel& model, const StepLoss& loss, const Activation& out,
                              const torch::Tensor& y);
/// The step's loss of `model`'s output `out`: output_loss_sum / weight_sum with an objective,
/// else `loss`'s loss of the logits. What every memory mode minimizes.
torch::Tensor output_loss(const BlockModel& model, const StepLoss& loss, const Activation& out,
                          const torch::Tensor& y);

/// Each sample's weight in `loss`'s loss_sum (float32 [N] on the targets' device), for a
/// family objective's own per-sample terms. per_sample() losses only.
torch::Tensor sample_weights(const StepLoss& loss, const torch::Tensor& y);

/// Cross-entropy of logits with label ids, weighted per label by `class_weights` when defined
/// (on the training device): classification's loss.
std::unique_ptr<StepLoss> cross_entropy_loss(torch::Tensor class_weights = {});

/// The sizes of the parts a batch of `batch` samples is cut into for `parts` micro-batches:
/// min(parts, batch) parts, in order, the first `batch % parts` of them one sample larger
/// (10 in 3: 4, 3, 3). parts >= 1.
std::vector<std::int64_t> micro_batch_sizes(std::int64_t batch, std::int64_t parts);

/// Forward and backward of the batch `in` with targets `y` under `loss`, in `micro_batches`
/// parts (micro_batch_sizes) run one after the other, each with its own graph. A per-sample
/// loss: each part's loss is its samples' weighted sum over the whole batch's sum of weights,
/// so the accumulated gradient is the whole batch's mean loss's. Any other loss: a first pass
/// without graphs gives every part's outputs; the loss of the whole batch's outputs gives their
/// gradient; each part is then run again with its graph (the same dropout masks, batch norm's
/// statistics moved once) and back-propagates its slice of that gradient — the whole batch's
/// gradient, at the cost of one more forward. Bags (a defined mask) are cut to each part's
/// longest bag. Returns the batch's loss, detached; 1 part is the plain loss. `activation_bytes`,
/// when given, gets the tracked activation peak: the bytes of the block outputs of the largest
/// part (the whole batch for 1 part).
torch::Tensor accumulate_gradients(BlockModel& model, const Activation& in, const torch::Tensor& y,
                                   const StepLoss& loss, std::int64_t micro_batches,
                                   std::int64_t* activation_bytes = nullptr);

}  // namespace mltool::train
