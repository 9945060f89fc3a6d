// What this build of mltool is made of, for `mltool --version` and bug reports.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mltool {

/// The mltool version (from the CMake project version).
std::string version();

/// (component, version) pairs: mltool, LibTorch, CUDA (with the GPUs visible now),
/// OpenSlide, libvips — in that order; a component not built in says so.
std::vector<std::pair<std::string, std::string>> component_versions();

}  // namespace mltool
