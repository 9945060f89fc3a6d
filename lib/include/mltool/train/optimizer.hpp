// The optimizer of a run: AdamW or SGD with momentum, weight decay on weights (dimension
// >= 2) only. On a GPU, AdamW's update is ATen's fused kernel: one launch a parameter group
// instead of about eight a parameter, where the per-launch cost dominates a small model's step
// (the H200 run of 2026-11-27: about 1 ms a step for an MLP at any batch size). On the CPU,
// LibTorch's own loop, whose bits the CPU tests compare with PyTorch's. The state (step,
// moments) is LibTorch's AdamW's either way, so checkpoints resume on either device.
#pragma once

#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "mltool/train/models.hpp"
#include "mltool/train/train_job.hpp"

namespace mltool::train {

/// AdamW whose step on CUDA parameters is at::_fused_adamw_ (one call a group); the same
/// state as torch::optim::AdamW, and its step on the CPU.
class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
  /// Whether the next step is fused: every parameter with a gradient on one CUDA device (or
  /// the CPU, after fuse_on_cpu), of one type, dense, and no amsgrad.
  bool fusable() const;
  /// Fuses on the CPU too (ATen has a CPU kernel): for tests, which compare the fused step
  /// with LibTorch's loop where no GPU is.
  void fuse_on_cpu() { cpu_ = true; }
  /// The learning rate the fused steps read from this device scalar instead of the groups'
  /// own (undefined: the groups'): a step captured in a CUDA graph follows the schedule when
  /// its replays are given each step's rate there.
  void read_lr_from(torch::Tensor lr) { lr_ = std::move(lr); }
  /// The parameters (their TensorImpl) the last fused step updated.
  const std::vector<void*>& last_stepped() const { return last_stepped_; }
  /// A replay of a captured fused step advanced the device counts of `stepped`: the host's
  /// counts (what checkpoints save) advance with them.
  void count_replayed(const std::vector<void*>& stepped);

 private:
  // Per parameter, its step as a float tensor on its device (what the fused kernel reads) and
  // the state's count it was made from; remade when the two part (the first step, a load).
  struct DeviceStep {
    torch::Tensor value;
    std::int64_t count = -1;
  };
  std::unordered_map<void*, DeviceStep> device_steps_;
  // Per group, its learning rate as the float32 device scalar the fused kernel reads, and the
  // rate it holds.
  struct DeviceRate {
    torch::Tensor value;
    double rate = 0;
  };
  std::vector<DeviceRate> group_rates_;
  std::vector<void*> last_stepped_;
  torch::Tensor lr_;
  bool cpu_ = false;
};

/// The run's optimizer over `model`'s parameters (job.optimizer, lr, momentum, weight decay).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainJob& job, BlockModel& model);

}  // namespace mltool::train
