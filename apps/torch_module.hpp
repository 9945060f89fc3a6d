// The LibTorch module: the commands that need LibTorch (extract, train), built as a shared
// object the program loads with dlopen only when one of them (or `--help`, `--version`) is
// asked for. The other commands start without LibTorch, which takes 0.4-0.5 s and 120-490 MiB
// of resident memory to load (the CPU-only module / the one with CUDA).
//
// The module lies at MLTOOL_TORCH_MODULE (a path relative to the program's directory, set
// by the build) or where the environment variable MLTOOL_TORCH_MODULE points. A build with
// CUDA has a second one, MLTOOL_TORCH_CPU_MODULE: the same commands without libtorch_cuda,
// loaded instead where no NVIDIA driver is installed (apps/CMakeLists.txt).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "mltool/io/npy.hpp"
#include "mltool/slide/segmenter.hpp"

namespace mltool::cli {

/// What the module hands the program.
struct TorchModule {
  std::vector<Command> commands;
  /// (component, version) pairs for `mltool --version`: LibTorch, CUDA.
  std::vector<std::pair<std::string, std::string>> (*versions)();
  /// The .pt encoder of `mltool export h5 --format pt` (io::encode_pt_tensor).
  std::string (*encode_pt)(const void* data, std::uint64_t rows, std::uint64_t dims,
                           io::DType dtype);
  /// The segmenter of `mltool tile --tissue MODEL.pt` (features::open_segmenter).
  std::shared_ptr<slide::Segmenter> (*open_segmenter)(const std::string& path,
                                                      const std::string& device);
};

/// The module's entry point, looked up with dlsym.
inline constexpr const char* kTorchModuleSymbol = "mltool_torch_module";

/// Loads the module once. Returns null if this build has none, or if it cannot be loaded;
/// then `why` says why (the path and dlerror()). `loaded`, when given, gets its path.
const TorchModule* load_torch_module(std::string& why, std::string* loaded = nullptr);

}  // namespace mltool::cli
