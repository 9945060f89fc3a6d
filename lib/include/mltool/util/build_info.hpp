// What this build of mltool is made of, for `mltool --version` and bug reports. The slide
// readers' versions are slide's (mltool/slide/versions.hpp): util knows no other module.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mltool {

/// The mltool version (from the CMake project version).
std::string version();

/// (component, version) pairs of LibTorch and CUDA (with the GPUs visible now). Defined in
/// mltool_torch only: the command-line program asks its LibTorch module for them.
std::vector<std::pair<std::string, std::string>> torch_component_versions();

}  // namespace mltool
