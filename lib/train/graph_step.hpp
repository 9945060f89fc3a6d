// Training steps replayed from a CUDA graph. A small model's step on a GPU is bound by the
// host: on the H100 (2026-11-28) an MLP's step of 30 kernels took 0.64 ms with the GPU busy 9%
// of it, the time going to dispatching about 25 operators and the autograd engine's hand-offs.
// A graph captured once replays the whole step — forward, loss, backward, clipping, the fused
// AdamW update — with one launch. The batch is copied into the graph's input tensors and the
// step's learning rate into a device scalar the update reads, so the replays follow the feed
// and the schedule; the host's step counts (what checkpoints save) follow the replays. The
// first steps run eagerly on the capture stream (lazy set-up must not happen inside a
// capture), the next is captured, then replayed; a batch of another shape (the last one of
// an epoch) runs eagerly. Internal to lib/train.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>

#include "feed.hpp"

namespace mltool::train {

class FusedAdamW;

/// One step's work on a batch: forward, loss, backward, clipping and the optimizer's update,
/// gradients starting from none; returns the loss, detached, on the device.
using StepWork = std::function<torch::Tensor(const Batch&)>;

class GraphStep {
 public:
  virtual ~GraphStep() = default;
  /// Whether `b` can be the captured step's (a batch without a bag mask, of the captured
  /// shapes, or of any before the capture).
  virtual bool takes(const Batch& b) const = 0;
  /// Runs the step on `b` at learning rate `lr`, the gradients none (zero_grad(true)):
  /// eagerly (the first three), captured and replayed (the fourth), or replayed. Returns the
  /// loss (a tensor of its own). After an error before the capture ended, the caller runs the
  /// step eagerly instead (a capture executes nothing, so the parameters are as they were).
  virtual torch::Tensor step(const Batch& b, double lr) = 0;
  /// Whether the graph is captured (an error now is the step's own).
  virtual bool captured() const = 0;
};

/// A graph step on `device` around `work` and `optimizer` (its fused AdamW), or null where
/// there is no CUDA graph: not CUDA, or mltool's CPU-only module.
std::unique_ptr<GraphStep> make_graph_step(const torch::Device& device, FusedAdamW& optimizer,
                                           StepWork work);

}  // namespace mltool::train
