// The slide readers this build links, for `mltool --version` and bug reports.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mltool::slide {

/// (component, version) pairs of the slide readers: OpenSlide, then libvips; a reader not
/// built in (MLTOOL_WITH_SLIDE off) says so.
std::vector<std::pair<std::string, std::string>> reader_versions();

}  // namespace mltool::slide
