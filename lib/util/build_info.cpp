#include "mltool/util/build_info.hpp"

#ifdef MLTOOL_HAVE_SLIDE
#include <vips/vips.h>

#include "../slide/openslide_api.h"
#endif

namespace mltool {

std::string version() { return MLTOOL_VERSION; }

std::vector<std::pair<std::string, std::string>> component_versions() {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("mltool", version());
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
