// The training loop: epochs of shuffled steps, the learning-rate schedule, gradient clipping,
// validation after every epoch, best-checkpoint tracking, early stopping, metrics.jsonl and
// checkpoints. Internal to lib/train; train.cpp sets it up.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "feed.hpp"
#include "mltool/train/augment.hpp"
#include "mltool/train/checkpoint.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/train/models.hpp"
#include "mltool/train/progress.hpp"
#include "mltool/train/train_job.hpp"
#include "mltool/util/profile.hpp"
#include "run_dir.hpp"
#include "task.hpp"

namespace mltool::train {

class DataParallel;
class GradientReducer;

/// The learning rate of step `step` (0-based) of `total`: linear warmup over job.warmup steps
/// to job.lr, then constant or a cosine decay that reaches 0 after the last step.
double learning_rate(const TrainJob& job, std::int64_t step, std::int64_t total);

/// The order of the training samples in epoch `epoch` (0-based): a permutation of [0, n) that
/// depends only on (seed, epoch), so a resumed run draws the same batches.
torch::Tensor epoch_order(std::uint64_t seed, int epoch, std::int64_t n);

/// Scales the gradients of `parameters` so their global 2-norm is at most `max_norm`, without
/// a host–device synchronization (the scale is applied on the device).
void clip_gradients(const std::vector<torch::Tensor>& parameters, double max_norm);

struct Evaluation {
  torch::Tensor outputs;   ///< CPU float32, samples × outputs, in split order
  nlohmann::json metrics;  ///< the task's: val_loss first
};

/// Runs the model in eval mode over every sample of `samples` in split order; the task gives
/// the metrics. A batch that runs out of memory is split (util::BatchSplitter) unless
/// `oom_retry` is false (--no-oom-retry).
Evaluation evaluate(BlockModel& model, Feed& feed, const SplitSamples& samples, std::int64_t batch,
                    const Task& task, bool oom_retry = true);

/// A split the loop reads: its feed and its samples.
struct LoopSplit {
  Feed& feed;
  const SplitSamples& samples;
};

/// Everything the loop works with: the references given on construction, the rest set by name.
struct Loop {
  Loop(const TrainJob& job_, BlockModel& model_, torch::optim::Optimizer& optimizer_, RunDir& run_,
       LoopSplit train_, LoopSplit val_)
      : job(job_),
        model(model_),
        optimizer(optimizer_),
        train_feed(train_.feed),
        val_feed(val_.feed),
        train(train_.samples),
        val(val_.samples),
        run(run_) {}

  const TrainJob& job;
  BlockModel& model;
  torch::optim::Optimizer& optimizer;
  Feed& train_feed;
  Feed& val_feed;
  const SplitSamples& train;
  const SplitSamples& val;
  torch::Device device = torch::kCPU;
  Task* task = nullptr;  ///< the loss and the metrics
  std::int64_t steps_per_epoch = 0;
  std::int64_t total_steps = 0;
  RunDir& run;
  std::function<void(const TrainProgress&)> progress;
  std::vector<std::size_t> section_bounds;  ///< --sections > 1: plan_sections; else empty
  std::int64_t peak_activation_bytes = 0;   ///< the largest step's tracked activations
  /// Data parallel (docs/train.md#data-parallel): this rank trains on its slice of every
  /// batch, gradients are all-reduced; only a run directory that writes (rank 0) is written.
  DataParallel* dp = nullptr;
  GradientReducer* reducer = nullptr;  ///< with dp: sums the gradients during backward
  /// The global batch size of each step of an epoch (step_sizes); steps_per_epoch of them.
  std::vector<std::int64_t> step_sizes;
  /// The parts each step runs in: --micro-batches, doubled by out-of-memory errors.
  std::int64_t micro_batches = 1;
  /// Out-of-memory fallback once micro-batches of one sample do not fit: sections of one block
  /// each (plan_sections); unset: none.
  std::function<std::vector<std::size_t>(std::int64_t sections)> plan_sections;
  /// Out-of-memory fallback in the first epoch: the pinned feed leaves the device for the host
  /// feed; false when there is none to drop. Unset: none.
  std::function<bool()> drop_pinned_feed;
  /// --augment: applied to each training batch before its step; null: none.
  const Augmenter* augment = nullptr;
  /// --profile: told as each step begins; unset: none.
  util::StepProfiler* profiler = nullptr;
  /// Called when an out-of-memory error changed how the steps run (run.json records it).
  std::function<void(const LoopState&)> on_memory_change;
};

/// Trains from `state` until the epochs are done, early stopping, or job.max_steps (then
/// status stays "" and last.pt holds the position). Returns the final state; status is
/// "complete", "early_stopped" or "" (stopped at max_steps). ResourceError for a non-finite
/// loss, naming its step and the last checkpoint.
LoopState run_loop(Loop& loop, LoopState state);

}  // namespace mltool::train
