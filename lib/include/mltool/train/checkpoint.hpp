// Training checkpoints: the model (parameters and buffers), the optimizer, the RNG states
// (torch's CPU generator, and the CUDA one of the device) and the loop's position and
// accumulators, in one torch archive written atomically (write aside, rename). Loading one
// and continuing gives, on the CPU, exactly the run that was never interrupted: the sampler
// is a pure function of (seed, epoch), so its position is the epoch and the step in it.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "mltool/train/run_status.hpp"

namespace mltool::train {

/// Everything of the loop besides model, optimizer and RNGs that a resumed run needs.
struct LoopState {
  int epoch = 0;                ///< epochs completed
  std::int64_t epoch_step = 0;  ///< steps done in the epoch in progress
  std::int64_t step = 0;        ///< steps done in all
  double window_loss = 0;       ///< sum of the step losses since the last step line, in order
  std::int64_t window_count = 0;
  double epoch_loss = 0;  ///< sum of the step losses of the epoch in progress
  std::int64_t epoch_count = 0;
  std::optional<double> best;  ///< best monitored value so far
  int best_epoch = 0;
  int bad_epochs = 0;               ///< epochs since the last improvement
  std::uint64_t metrics_bytes = 0;  ///< length of metrics.jsonl when saved (resume truncates to it)
  RunStatus status = RunStatus::running;  ///< running while training; complete, early_stopped
  /// Set by an out-of-memory error (docs/memory-modes.md#out-of-memory): the micro-batches the
  /// steps run in from then on, and the sections (one a block) it fell back to; 0: the job's.
  std::int64_t oom_micro_batches = 0;
  std::int64_t oom_sections = 0;

  nlohmann::json to_json() const;
  /// FormatError naming `where` for a missing or mistyped field.
  static LoopState from_json(const nlohmann::json& doc, const std::string& where);
};

/// Writes a checkpoint atomically. `device`'s CUDA generator is saved when it is a GPU.
void save_checkpoint(const std::string& path, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, const LoopState& state,
                     const torch::Device& device);

/// Loads a checkpoint into `model` and `optimizer` (built as the saved ones were, on
/// `device`), restores the RNG states and returns the loop state. InputError if the file is
/// missing; FormatError naming it for anything unreadable or a model that does not match.
LoopState load_checkpoint(const std::string& path, torch::nn::Module& model,
                          torch::optim::Optimizer& optimizer, const torch::Device& device);

}  // namespace mltool::train
