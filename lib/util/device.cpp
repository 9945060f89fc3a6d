#include "mltool/util/device.hpp"

#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/parallel.hpp"

namespace mltool::util {

std::vector<torch::Device> resolve_devices(const std::string& spec) {
  const bool cuda = torch::cuda::is_available();
  const int count = cuda ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (spec == "cpu" || (spec == "auto" && !cuda)) return {torch::Device(torch::kCPU)};
  if (spec == "auto" || spec == "cuda") {
    if (!cuda) throw ResourceError("--device cuda: no CUDA GPU is visible");
    std::vector<torch::Device> out;
    for (int i = 0; i < count; ++i)
      out.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
    return out;
  }
  if (spec.rfind("cuda:", 0) == 0) {
    char* end = nullptr;
    const long index = std::strtol(spec.c_str() + 5, &end, 10);
    if (*end != '\0' || end == spec.c_str() + 5 || index < 0)
      throw UsageError("--device must be auto, cpu, cuda or cuda:N, not '" + spec + "'");
    if (!cuda) throw ResourceError("--device " + spec + ": no CUDA GPU is visible");
    if (index >= count)
      throw ResourceError("--device " + spec + ": " + std::to_string(count) +
                          " CUDA GPU(s) visible");
    return {torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index))};
  }
  throw UsageError("--device must be auto, cpu, cuda or cuda:N, not '" + spec + "'");
}

int set_math_threads(int asked, int recorded) {
  int threads = asked;
  if (threads == 0 && recorded > 0) {
    threads = recorded;
    log::info("resuming with --math-threads " + std::to_string(threads) + ", the earlier run's");
  }
  if (threads == 0) {
    // LibTorch's default counts the machine's cores; a Slurm allocation or a cpuset may give
    // this process fewer (OMP_NUM_THREADS, when set, is the user's word and stands).
    threads = at::get_num_threads();
    const char* omp = std::getenv("OMP_NUM_THREADS");
    if (!omp || !*omp) threads = std::min(threads, allowed_cpus());
  }
  at::set_num_threads(threads);
  return threads;
}

std::uint64_t free_memory(const torch::Device& device) {
  if (!device.is_cuda()) {
    std::ifstream in("/proc/meminfo");
    std::string name, unit;
    std::uint64_t kib = 0;
    while (in >> name >> kib >> unit)
      if (name == "MemAvailable:") return kib * 1024;
    return ~std::uint64_t{0};
  }
  const c10::cuda::CUDAGuard guard(device.index());
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess)
    throw ResourceError("cannot query the free memory of " + device.str());
  return free;
}

}  // namespace mltool::util
