// Finds and loads the LibTorch module (torch_module.hpp).
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "mltool/util/math_env.hpp"
#include "torch_module.hpp"

namespace mltool::cli {
namespace {

std::string module_path() {
  if (const char* env = std::getenv("MLTOOL_TORCH_MODULE"); env && *env) return env;
#ifdef MLTOOL_TORCH_MODULE
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return MLTOOL_TORCH_MODULE;
  std::string dir(exe, static_cast<std::size_t>(n));
  dir.resize(dir.rfind('/') + 1);
  return dir + MLTOOL_TORCH_MODULE;
#else
  return {};
#endif
}

}  // namespace

const TorchModule* load_torch_module(std::string& why) {
  static std::string failure;
  static const TorchModule* module = []() -> const TorchModule* {
    const std::string path = module_path();
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
  return module;
}

}  // namespace mltool::cli
