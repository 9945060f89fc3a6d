// Data parallel training over c10d (docs/train.md#data-parallel): the TCPStore rendezvous,
// a Gloo process group (NCCL when training on CUDA), broadcasts from rank 0 and the bucketed
// gradient all-reduce. Internal to lib/train.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mltool/train/train.hpp"

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
  /// Sums `tensors` over the ranks in place, flattened into ~25 MB buckets, one all-reduce
  /// launched per bucket, all awaited at the end.
  void all_reduce_sum(const std::vector<torch::Tensor>& tensors);
  /// Rank 0 runs `action`; the others wait for it and throw what it threw (as UsageError or
  /// ResourceError with rank 0's message), so no rank goes on when rank 0 could not.
  void on_rank0(const std::function<void()>& action);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_ = 1;
};

/// This rank's part of an epoch's `order` (a whole number of global batches of `batch`):
/// its slice of each batch (rank_slice). `scales` gets each step's gradient weight: this
/// rank's share of the global batch's sum of class weights (its sample count / batch when
/// `class_weights` is undefined), so the summed gradients are the global batch's.
torch::Tensor rank_order(const torch::Tensor& order, std::int64_t batch, const DataParallel& dp,
                         const std::vector<std::int64_t>& labels,
                         const torch::Tensor& class_weights, std::vector<double>& scales);

/// After this rank's backward: scales its gradients (undefined ones become zeros) and its
/// `loss` by `scale`, sums both over the ranks (DataParallel::all_reduce_sum) and returns the
/// global batch's loss.
torch::Tensor reduce_gradients(DataParallel& dp, const std::vector<torch::Tensor>& parameters,
                               const torch::Tensor& loss, double scale);

/// The module's buffers (batch-norm running statistics), for DataParallel::broadcast.
std::vector<torch::Tensor> buffers_of(torch::nn::Module& module);

/// Checks the data-parallel options of `job` (UsageError): world size and rank, batch at
/// least the world size, --micro-batches at most the smallest rank's part, no --resume.
void check_data_parallel(const TrainJob& job);

}  // namespace mltool::train
