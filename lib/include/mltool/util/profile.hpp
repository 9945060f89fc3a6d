// --profile FILE: a Chrome/Perfetto trace (LibTorch's Kineto profiler: CPU operators, CUDA
// kernels and runtime calls, memory events) of a bounded window of steps or batches, declared
// once for the commands that run a model (train, extract, predict). docs/troubleshooting.md
// shows how to read one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mltool/util/options.hpp"

namespace mltool::util {

/// What to profile: nothing when `file` is empty.
struct ProfileRequest {
  std::string file;         ///< --profile: the trace (JSON, opened by ui.perfetto.dev)
  std::int64_t skip = 3;    ///< --profile-skip: steps (batches) run before recording starts
  std::int64_t steps = 10;  ///< --profile-steps: steps (batches) recorded
};

/// --profile, --profile-skip and --profile-steps, each declared once.
template <class Job>
Option<Job> profile_option(ProfileRequest Job::*member) {
  return option_at<Job>(
      "--profile", [member](Job& j) -> std::string& { return (j.*member).file; },
      "Write a Chrome/Perfetto trace (CPU ops, CUDA kernels, memory) of --profile-steps "
      "steps or batches after --profile-skip to FILE");
}
template <class Job>
Option<Job> profile_skip_option(ProfileRequest Job::*member) {
  return option_at<Job>(
             "--profile-skip", [member](Job& j) -> std::int64_t& { return (j.*member).skip; },
             "Steps or batches run before --profile starts recording (warm-up)")
      .at_least(0);
}
template <class Job>
Option<Job> profile_steps_option(ProfileRequest Job::*member) {
  return option_at<Job>(
             "--profile-steps", [member](Job& j) -> std::int64_t& { return (j.*member).steps; },
             "Steps or batches --profile records")
      .at_least(1);
}

/// Records the window of a ProfileRequest: call begin_step() as each step (batch) begins and
/// end_step() when it is done, on the thread that runs the model; every recorded step is a
/// "ProfilerStep#N" range in the trace (N: 0-based, as PyTorch's profiler names them), and
/// what runs between steps (validation, checkpoints) is recorded outside them. The trace is written
/// (aside, then renamed) once the window is over, or by finish() / the destructor when the run ends
/// inside it; a run shorter than --profile-skip records nothing and says so. Nothing at all when
/// the request's file is empty. Defined in the LibTorch half of the library.
class StepProfiler {
 public:
  /// `cuda`: record CUDA kernels and runtime calls too. `unit`: "step" or "batch" (messages).
  StepProfiler(ProfileRequest request, bool cuda, std::string unit);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void begin_step();
  void end_step();
  /// Ends the recording (if it is on) and writes the trace; the path written, or "".
  std::string finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mltool::util
