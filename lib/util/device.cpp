#include "mltool/util/device.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/parallel.hpp"

namespace mltool::util {
namespace {

// The CPU allocator with a count of the bytes it holds and their peak: LibTorch's own CPU
// allocator underneath, what the CUDA caching allocator's statistics are on a GPU (the CPU has
// none). Its blocks keep LibTorch's shape (the context is the data pointer, one deleter for
// all), since parts of ATen allocate raw memory through it; each block's size and the inner
// allocator's deleter wait in a table until it is freed.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::DataPtr allocate(std::size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    if (data == nullptr) return inner;
    const auto device = inner.device();
    const c10::DeleterFnPtr free_inner = inner.get_deleter();
    void* context = inner.release_context();
    if (context != data) return {data, context, free_inner, device};  // not counted
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_[data] = {n, free_inner};
    }
    const auto now = bytes_.fetch_add(static_cast<std::int64_t>(n)) + static_cast<std::int64_t>(n);
    for (auto p = peak_.load(); now > p && !peak_.compare_exchange_weak(p, now);) {
    }
    return {data, data, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  void reset_peak() { peak_.store(bytes_.load()); }
  std::int64_t peak() const { return peak_.load(); }

 private:
  struct BlockInfo {
    std::size_t size;
    c10::DeleterFnPtr free;
  };
  static CountingCpuAllocator* instance;
  static void release(void* data) {
    auto& self = *instance;
    BlockInfo info{};
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      const auto it = self.blocks_.find(data);
      if (it == self.blocks_.end()) return;  // never ours
      info = it->second;
      self.blocks_.erase(it);
    }
    self.bytes_.fetch_sub(static_cast<std::int64_t>(info.size));
    info.free(data);
  }
  friend CountingCpuAllocator& counting_cpu_allocator();
  c10::Allocator* inner_;
  std::mutex mutex_;
  std::unordered_map<void*, BlockInfo> blocks_;
  std::atomic<std::int64_t> bytes_{0}, peak_{0};
};
CountingCpuAllocator* CountingCpuAllocator::instance = nullptr;

CountingCpuAllocator& counting_cpu_allocator() {
  // Installed on first use, above LibTorch's default (priority 0); never destroyed, since
  // blocks it gave out may be freed during exit.
  static auto* allocator = [] {
    auto* a = new CountingCpuAllocator(c10::GetCPUAllocator());
    CountingCpuAllocator::instance = a;
    c10::SetCPUAllocator(a, /*priority=*/1);
    return a;
  }();
  return *allocator;
}

}  // namespace

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

void count_cpu_memory() { counting_cpu_allocator(); }

void reset_peak_memory(const torch::Device& device) {
  if (device.is_cuda())
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  else
    counting_cpu_allocator().reset_peak();
}

std::int64_t peak_memory(const torch::Device& device) {
  if (!device.is_cuda()) return counting_cpu_allocator().peak();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .peak;
}

}  // namespace mltool::util
