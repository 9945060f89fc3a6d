#include "thumbnail.hpp"

#include <algorithm>
#include <cstdlib>

#include "mltool/slide/geometry.hpp"
#include "mltool/slide/image.hpp"

namespace mltool::slide {
namespace {

// Debian's OpenSlide 3.4.1 with libtiff 4.5 misreads a TIFF level narrower or shorter than
// one of its tiles (the content shifts, the rest stays uninitialised); OpenSlide 4 does not.
// libvips pyramids end in such levels, so thumbnails skip them.
bool covers_its_tiles(const Slide& slide, int level) {
  const Level& l = slide.geometry().levels[level];
  const std::string prefix = "openslide.level[" + std::to_string(level) + "].tile-";
  const auto tile_w = slide.property(prefix + "width"), tile_h = slide.property(prefix + "height");
  return !tile_w || !tile_h ||
         (l.width >= std::atoll(tile_w->c_str()) && l.height >= std::atoll(tile_h->c_str()));
}

}  // namespace

Thumbnail slide_thumbnail(const Slide& slide, double downsample) {
  const auto& levels = slide.geometry().levels;
  const Level& l0 = levels[0];
  const double target = std::max(downsample, 1.0);
  Thumbnail t;
  for (std::size_t l = 0; l < levels.size(); ++l)
    if (levels[l].downsample <= target * (1 + kLevelTolerance) &&
        levels[l].downsample >= levels[t.level].downsample &&
        covers_its_tiles(slide, static_cast<int>(l)))
      t.level = static_cast<int>(l);
  t.image = read_thumbnail(slide.path(), t.level, levels[t.level].downsample / target);
  t.dx = static_cast<double>(l0.width) / t.image.width;
  t.dy = static_cast<double>(l0.height) / t.image.height;
  return t;
}

}  // namespace mltool::slide
