// Saving and restoring what a recompute replays (replay.hpp).
#include "replay.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <mutex>

namespace mltool::train {
namespace {

at::Generator cuda_generator(const torch::Device& device) {
  return at::globalContext().defaultGenerator(device);
}

}  // namespace

RngState save_rng(const torch::Device& device) {
  RngState s;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.cpu = gen.get_state();
  }
  if (device.is_cuda()) {
    auto gen = cuda_generator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    s.cuda = gen.get_state();
  }
  return s;
}

void restore_rng(const RngState& s, const torch::Device& device) {
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(s.cpu);
  }
  if (s.cuda.defined()) {
    auto gen = cuda_generator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(s.cuda);
  }
}

// The buffers of parts [begin, end) — batch norm's running statistics and count; the
// stem's constant mean and std come along, unchanged — copied, to be put back after a
// recompute so they move once per step.
BufferSnapshot snapshot_buffers(BlockModel& model, std::size_t begin, std::size_t end) {
  BufferSnapshot out;
  for (auto& b : model.part_buffers(begin, end)) out.emplace_back(b, b.clone());
  return out;
}

void restore_buffers(const BufferSnapshot& saved) {
  const torch::NoGradGuard no_grad;
  for (const auto& [live, copy] : saved) live.copy_(copy);
}

}  // namespace mltool::train
