// Data parallel training over c10d (docs/train.md#data-parallel): the TCPStore rendezvous,
// a Gloo process group (NCCL when training on CUDA), broadcasts from rank 0 and the bucketed
// gradient all-reduce. Internal to lib/train.
#pragma once

#include "mltool/train/step.hpp"

#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mltool/train/train_job.hpp"

namespace mltool::train {

class DataParallel {
 public:
  /// Joins the group job.rank of job.world_size at job.master_addr:job.master_port (rank 0
  /// serves the store). Collectives time out after job.dist_timeout seconds.
  DataParallel(const TrainJob& job, const torch::Device& device);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }

  /// Rank 0's values of `tensors` to every rank (in place).
  void broadcast(const std::vector<torch::Tensor>& tensors);
  /// Rank 0 runs `action`; the others wait for it and throw what it threw (as UsageError or
  /// ResourceError with rank 0's message), so no rank goes on when rank 0 could not.
  void on_rank0(const std::function<void()>& action);
  /// Whether `flag` is true on any rank (every rank calls it at the same point).
  bool any_rank(bool flag, const torch::Device& device);
  /// Rank 0's value of `value` (an integer) on every rank.
  std::int64_t broadcast_value(std::int64_t value, const torch::Device& device);
  /// Every rank's rows of a step of `global` samples (rank r holds rank_slice(global, world,
  /// r).size rows of `local`'s width), concatenated in rank order: the global batch's. Not
  /// differentiable (`local` is detached).
  torch::Tensor gather_rows(const torch::Tensor& local, std::int64_t global);

 private:
  friend class GradientReducer;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_ = 1;
};

/// This rank's part of an epoch's `order` (cut into global batches of `steps` sizes): its
/// slice of each batch (rank_slice). `scales` gets each step's gradient weight: this rank's
/// share of the global batch's sum of sample weights (`weights[sample]`; its sample count / the
/// batch's when `weights` is empty), so the summed gradients are the global batch's.
torch::Tensor rank_order(const torch::Tensor& order, const std::vector<std::int64_t>& steps,
                         const DataParallel& dp, const std::vector<double>& weights,
                         std::vector<double>& scales);

/// Sums the gradients of `parameters` over the ranks while backward runs (DDP's reducer):
/// each parameter's gradient accumulator gets a hook; the parameters, in reverse order (the
/// order backward reaches them), are cut into buckets of about `bucket_bytes`; a bucket whose
/// gradients are all final (the step's last backward pass reached each of them) is copied
/// into one flat tensor, scaled, and its all-reduce launched while backward goes on. Buckets
/// are launched strictly in order (every rank launches the same collectives in the same
/// order); finish() launches those whose parameters got no gradient (zeros), waits for all,
/// and writes the sums back into the gradients.
class GradientReducer {
 public:
  GradientReducer(DataParallel& dp, const std::vector<torch::Tensor>& parameters,
                  std::int64_t bucket_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Before a step's backward passes: `passes` backward passes will reach each parameter
  /// (the number of micro-batches; 0 for a rank with nothing in this step), and this rank's
  /// gradients weigh `scale` in the sum.
  void prepare(int passes, double scale);
  /// After them: the global batch's gradients in every parameter's grad, and the global
  /// batch's loss (this rank's `loss` times the scale, summed) returned.
  torch::Tensor finish(const torch::Tensor& loss);

  std::int64_t buckets() const;
  /// Buckets launched from a hook, during backward (the rest: by finish), over all steps.
  std::int64_t launched_in_backward() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Data parallel with a loss over the whole step (Cox): `inner`'s loss of the global batch's
/// outputs (gathered from every rank), as a surrogate of this rank's outputs whose gradient is
/// the global loss's gradient with respect to them and whose value is the global loss divided
/// by the world size (GradientReducer sums the ranks' gradients with scale 1, and their losses).
std::unique_ptr<StepLoss> rank_global_loss(const StepLoss& inner, DataParallel& dp,
                                           std::int64_t global);

/// The module's buffers (batch-norm running statistics), for DataParallel::broadcast.
std::vector<torch::Tensor> buffers_of(torch::nn::Module& module);

/// Checks the data-parallel options of `job` (UsageError): world size and rank, batch at
/// least the world size, --micro-batches at most the smallest rank's part.
void check_data_parallel(const TrainJob& job);

}  // namespace mltool::train
