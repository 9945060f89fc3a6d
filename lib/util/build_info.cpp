#include "mltool/util/build_info.hpp"

#ifdef MLTOOL_HAVE_TORCH
#include <torch/cuda.h>
#include <torch/version.h>
#endif
#ifdef MLTOOL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef MLTOOL_HAVE_SLIDE
#include <openslide.h>
#include <vips/vips.h>
#endif

namespace mltool {
namespace {

#ifdef MLTOOL_HAVE_CUDA
std::string cuda_description() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  std::string s = std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) + " (kernels built for";
  s += " " MLTOOL_CUDA_ARCHITECTURES ")";
  const auto gpus = torch::cuda::device_count();
  s += gpus > 0 ? ", " + std::to_string(gpus) + " GPU(s) visible" : ", no GPU visible";
  return s;
}
#endif

}  // namespace

std::string version() { return MLTOOL_VERSION; }

std::vector<std::pair<std::string, std::string>> component_versions() {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("mltool", version());
#ifdef MLTOOL_HAVE_TORCH
  out.emplace_back("LibTorch", TORCH_VERSION);
#else
  out.emplace_back("LibTorch", "not built in");
#endif
#ifdef MLTOOL_HAVE_CUDA
  out.emplace_back("CUDA", cuda_description());
#else
  out.emplace_back("CUDA", "not built in (CPU only)");
#endif
#ifdef MLTOOL_HAVE_SLIDE
  out.emplace_back("OpenSlide", openslide_get_version());
  out.emplace_back("libvips", vips_version_string());
#else
  out.emplace_back("OpenSlide", "not built in");
  out.emplace_back("libvips", "not built in");
#endif
  return out;
}

}  // namespace mltool
