#include "thumbnail.hpp"

#include <algorithm>

#include "mltool/slide/geometry.hpp"
#include "mltool/slide/image.hpp"

namespace mltool::slide {
Thumbnail slide_thumbnail(const Slide& slide, double downsample) {
  const auto& levels = slide.geometry().levels;
  const Level& l0 = levels[0];
  const double target = std::max(downsample, 1.0);
  Thumbnail t;
  for (std::size_t l = 0; l < levels.size(); ++l)
    if (levels[l].downsample <= target * (1 + kLevelTolerance) &&
        levels[l].downsample >= levels[t.level].downsample)
      t.level = static_cast<int>(l);
  t.image = read_thumbnail(slide, t.level, levels[t.level].downsample / target);
  t.dx = static_cast<double>(l0.width) / t.image.width;
  t.dy = static_cast<double>(l0.height) / t.image.height;
  return t;
}

}  // namespace mltool::slide
