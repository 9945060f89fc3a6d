#include <torch/cuda.h>
#include <torch/version.h>

#include "mltool/util/build_info.hpp"
#ifdef MLTOOL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mltool {

std::vector<std::pair<std::string, std::string>> torch_component_versions() {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("LibTorch", TORCH_VERSION);
#ifdef MLTOOL_HAVE_CUDA
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  std::string cuda = std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
                     " (kernels built for " MLTOOL_CUDA_ARCHITECTURES ")";
  const auto gpus = torch::cuda::device_count();
  cuda += gpus > 0 ? ", " + std::to_string(gpus) + " GPU(s) visible" : ", no GPU visible";
  out.emplace_back("CUDA", cuda);
#else
  out.emplace_back("CUDA", "not built in (CPU only)");
#endif
  return out;
}

}  // namespace mltool
