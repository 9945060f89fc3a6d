#include "mltool/util/oom.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string_view>

#include "mltool/util/device.hpp"
#include "mltool/util/error.hpp"

namespace mltool::util {
namespace {

std::set<std::uint64_t> parse_debug_oom() {
  std::set<std::uint64_t> out;
  const char* value = std::getenv("MLTOOL_DEBUG_OOM");
  if (value == nullptr) return out;
  const std::string_view text(value);
  std::size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    const std::string item(text.substr(pos, end - pos));
    char* stop = nullptr;
    const unsigned long long n = std::strtoull(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || item[0] == '-')
      throw FormatError("MLTOOL_DEBUG_OOM must be a comma list of batch or step numbers, not '" +
                        std::string(text) + "'");
    out.insert(n);
    pos = end + 1;
  }
  return out;
}

}  // namespace

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const std::string_view what = e.what();
  for (const char* text :
       {"CUDA out of memory", "OutOfMemoryError", "out of memory",
        "DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory"})
    if (what.find(text) != std::string_view::npos) return true;
  return false;
}

void release_cached_memory(const torch::Device& device) {
  if (!device.is_cuda()) return;
  cudaDeviceSynchronize();
  cudaGetLastError();  // an allocation failure leaves no sticky error, but clear what is there
  c10::cuda::CUDACachingAllocator::emptyCache();
}

bool debug_oom_listed(std::uint64_t number) {
  static const std::set<std::uint64_t> listed = parse_debug_oom();
  return listed.count(number) != 0;
}

void throw_debug_oom(const std::string& what) {
  // The type and the first words of the CUDA caching allocator's error.
  TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory (MLTOOL_DEBUG_OOM: ", what,
                   "'s first attempt)");
  std::abort();  // not reached
}

std::string free_memory_text(const torch::Device& device) {
  try {
    char text[64];
    std::snprintf(text, sizeof text, "%.2f GiB free on ",
                  static_cast<double>(free_memory(device)) / (1024.0 * 1024.0 * 1024.0));
    return text + device.str();
  } catch (const Error&) {
    return "free memory of " + device.str() + " unknown";
  }
}

}  // namespace mltool::util
