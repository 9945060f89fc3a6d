// The name and version mltool writes into the manifests it publishes ("created_by").
#pragma once

#include <string>

namespace mltool::util {

/// "mltool <version>" (MLTOOL_VERSION comes from the CMake project version).
inline std::string tool_version() { return std::string("mltool ") + MLTOOL_VERSION; }

}  // namespace mltool::util
