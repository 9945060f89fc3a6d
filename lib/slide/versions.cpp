#include "mltool/slide/versions.hpp"

#ifdef MLTOOL_HAVE_SLIDE
#include <vips/vips.h>

#include "openslide_api.h"
#endif

namespace mltool::slide {

std::vector<std::pair<std::string, std::string>> reader_versions() {
#ifdef MLTOOL_HAVE_SLIDE
  return {{"OpenSlide", openslide_get_version()}, {"libvips", vips_version_string()}};
#else
  return {{"OpenSlide", "not built in"}, {"libvips", "not built in"}};
#endif
}

}  // namespace mltool::slide
