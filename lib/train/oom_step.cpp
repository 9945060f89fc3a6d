// Redoing a training step after an out-of-memory error (oom_step.hpp).
#include "oom_step.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <string>

#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/oom.hpp"
#include "replay.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

// What the steps run in now, for the messages: "4 micro-batches", "3 sections".
std::string mode_text(const Loop& loop) {
  return loop.section_bounds.empty() ? std::to_string(loop.micro_batches) + " micro-batch" +
                                           (loop.micro_batches == 1 ? "" : "es")
                                     : std::to_string(loop.section_bounds.size() - 1) + " sections";
}

// The first remedy in the first epoch: --feed auto's pinned feed leaves the device. Whether
// there was one to drop.
bool drop_feed(Loop& loop, LoopState& state, std::int64_t samples, std::int64_t step) {
  if (state.epoch != 0 || !loop.drop_pinned_feed || !loop.drop_pinned_feed()) return false;
  util::release_cached_memory(loop.device);  // the rows the pinned feed held
  log::warn("out of memory in step " + std::to_string(step + 1) +
            " of the first epoch: the pinned feed's rows leave the device, the host feed "
            "serves the same batches from here on");
  loop.run.log({{"event", "oom"}, {"step", step + 1}, {"samples", samples}, {"feed", "host"}});
  if (loop.on_memory_change) loop.on_memory_change(state);
  return true;
}

// Makes the steps smaller after an out-of-memory error in step `step` (0-based) of `samples`
// samples: the pinned feed dropped (drop_feed), else twice the micro-batches, else sections of
// one block each; ResourceError when none is left.
void shrink(Loop& loop, LoopState& state, std::int64_t samples, std::int64_t step) {
  if (drop_feed(loop, state, samples, step)) return;
  const std::string before = mode_text(loop);
  const auto blocks = static_cast<std::int64_t>(loop.model.part_count());
  const auto sections =
      loop.section_bounds.empty() ? 1 : static_cast<std::int64_t>(loop.section_bounds.size()) - 1;
  if (loop.section_bounds.empty() && loop.micro_batches < samples) {
    loop.micro_batches = std::min(2 * loop.micro_batches, samples);
    state.oom_micro_batches = loop.micro_batches;
  } else if (sections < blocks && loop.plan_sections) {  // --sections K: one part each
    loop.section_bounds = loop.plan_sections(blocks);
    loop.micro_batches = 1;
    state.oom_sections = blocks;
  } else {
    const std::string message =
        "out of memory in step " + std::to_string(step + 1) + " of " + std::to_string(samples) +
        " samples even with " + before +
        (loop.section_bounds.empty() ? " of one sample (the model has one block: no sections)"
                                     : " of one block (or residual unit) each") +
        " (" + util::free_memory_text(loop.device) +
        "); free the device, lower --batch, or use a smaller model";
    loop.run.log({{"event", "error"}, {"step", step + 1}, {"message", message}});
    throw ResourceError(at_file(loop.run.dir(), message));
  }
  const std::string now = mode_text(loop);
  log::warn("out of memory in step " + std::to_string(step + 1) + " (" + std::to_string(samples) +
            " samples in " + before + "): redoing it in " + now + ", kept for the rest of the run");
  loop.run.log({{"event", "oom"},
                {"step", step + 1},
                {"samples", samples},
                {"micro_batches", loop.micro_batches},
                {"sections", loop.section_bounds.empty() ? 1 : loop.section_bounds.size() - 1}});
  if (loop.on_memory_change) loop.on_memory_change(state);
}

}  // namespace

torch::Tensor with_oom_retry(Loop& loop, LoopState& state, std::int64_t samples,
                             const std::function<torch::Tensor()>& attempt) {
  const bool retry = !loop.job.no_oom_retry && loop.dp == nullptr;
  bool inject = util::debug_oom_listed(static_cast<std::uint64_t>(state.step));
  if (!retry && !inject) return attempt();
  // What a redo must find as the first attempt did: dropout's draws, batch norm's statistics.
  const RngState rng = save_rng(loop.device);
  const BufferSnapshot buffers = snapshot_buffers(loop.model, 0, loop.model.part_count());
  for (;;) {
    try {
      torch::Tensor loss = attempt();
      if (inject) util::throw_debug_oom("step " + std::to_string(state.step));
      return loss;
    } catch (const std::exception& e) {
      if (!retry || !util::is_out_of_memory(e)) throw;
      inject = false;
      loop.optimizer.zero_grad(true);
      restore_buffers(buffers);
      restore_rng(rng, loop.device);
      util::release_cached_memory(loop.device);
      shrink(loop, state, samples, state.step);
    }
  }
}

}  // namespace mltool::train
