// Devices for the LibTorch half of the library: what a --device value names, and how much
// memory a device has free. One home for both, used by extract and train.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mltool::util {

/// The devices `spec` names: "cpu"; "cuda:N" (that GPU); "cuda" (every visible GPU, exit 3
/// without one); "auto" (every visible GPU, else the CPU). A command that runs on one device
/// takes the first. UsageError for anything else, naming --device; ResourceError for a GPU
/// that is not there.
std::vector<torch::Device> resolve_devices(const std::string& spec);

/// Sets LibTorch's math (intra-op) threads for a CPU run, whose bits depend on them, and
/// returns the count: `asked` if given (> 0), else `recorded` (a resumed run's, > 0; logged),
/// else LibTorch's default (OMP_NUM_THREADS, or the cores). Threads that run math later take
/// it with at::init_num_threads().
int set_math_threads(int asked, int recorded);

/// Free memory of `device` in bytes: the GPU's free memory (CUDA), or the memory available
/// to the process (CPU: /proc/meminfo's MemAvailable; all of it when that is unknown).
std::uint64_t free_memory(const torch::Device& device);

/// Installs the CPU allocator that counts (idempotent): a command calls it before it
/// allocates, so that peak_memory on the CPU sees its tensors as the CUDA allocator would.
void count_cpu_memory();
/// Starts a new peak of `device`'s allocated bytes (the CUDA caching allocator's statistics on
/// a GPU; on the CPU, those of a counting allocator installed above LibTorch's on first use,
/// which sees the tensors allocated from then on).
void reset_peak_memory(const torch::Device& device);
/// The peak of `device`'s allocated bytes since reset_peak_memory.
std::int64_t peak_memory(const torch::Device& device);

}  // namespace mltool::util
