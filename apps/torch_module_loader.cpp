// Finds and loads the LibTorch module (torch_module.hpp).
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "mltool/util/math_env.hpp"
#include "torch_module.hpp"

namespace mltool::cli {
namespace {

// Whether an NVIDIA driver is installed: its libcuda.so.1 loads. It stays loaded (LibTorch
// loads it next), and nothing of CUDA is initialised here.
bool nvidia_driver() { return ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr; }

// MLTOOL_TORCH_MODULE from the environment; else, beside the program, the CPU-only module
// where there is no NVIDIA driver (when the build has one), the full one elsewhere.
std::string module_path() {
  if (const char* env = std::getenv("MLTOOL_TORCH_MODULE"); env && *env) return env;
#ifdef MLTOOL_TORCH_MODULE
  std::string file = MLTOOL_TORCH_MODULE;
#ifdef MLTOOL_TORCH_CPU_MODULE
  if (!nvidia_driver()) file = MLTOOL_TORCH_CPU_MODULE;
#endif
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return file;
  std::string dir(exe, static_cast<std::size_t>(n));
  dir.resize(dir.rfind('/') + 1);
  return dir + file;
#else
  return {};
#endif
}

}  // namespace

const TorchModule* load_torch_module(std::string& why, std::string* loaded) {
  static std::string failure, path;
  static const TorchModule* module = []() -> const TorchModule* {
    path = module_path();
    if (path.empty()) {
      failure = "this build has no LibTorch (configured with MLTOOL_WITH_TORCH=OFF)";
      return nullptr;
    }
    util::set_reproducible_math_env();  // read by MKL when it starts, so before LibTorch loads
    // RTLD_LOCAL: LibTorch's symbols (it exports its own std::filesystem) stay out of the
    // program's global scope.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      failure = std::string("cannot load the LibTorch module: ") + ::dlerror();
      return nullptr;
    }
    using Entry = const TorchModule* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(handle, kTorchModuleSymbol));
    if (!entry) {
      failure = path + ": no symbol " + kTorchModuleSymbol;
      return nullptr;
    }
    return entry();
  }();
  why = failure;
  if (loaded) *loaded = path;
  return module;
}

}  // namespace mltool::cli
