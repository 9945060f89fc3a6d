#include "mltool/util/build_info.hpp"

namespace mltool {

std::string version() { return MLTOOL_VERSION; }

}  // namespace mltool
