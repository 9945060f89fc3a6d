#include "mltool/slide/image.hpp"

#include <vips/vips.h>
// after vips.h, which it needs
#include <vips/vector.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "flat_image.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/parallel.hpp"
#include "vips_internal.hpp"

namespace mltool::slide {
namespace {

using detail::ImagePtr;
using detail::vips_message;

ImagePtr wrap_rgb(const std::uint8_t* rgb, int width, int height) {
  VipsImage* image = vips_image_new_from_memory(rgb, static_cast<std::size_t>(width) * height * 3,
                                                width, height, 3, VIPS_FORMAT_UCHAR);
  if (!image)
    throw ResourceError("libvips: wrapping a " + std::to_string(width) + "x" +
                        std::to_string(height) + " image: " + vips_message());
  return ImagePtr(image);
}

io::RgbImage to_memory(VipsImage* image, const std::string& what) {
  if (image->Bands != 3 || image->BandFmt != VIPS_FORMAT_UCHAR)
    throw ResourceError(what + ": libvips produced " + std::to_string(image->Bands) +
                        " bands, not 8-bit RGB");
  io::RgbImage out;
  out.width = image->Xsize;
  out.height = image->Ysize;
  std::size_t size = 0;
  void* data = vips_image_write_to_memory(image, &size);
  if (!data) throw ResourceError(what + ": " + vips_message());
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  out.pixels.assign(bytes, bytes + size);
  g_free(data);
  if (out.pixels.size() != static_cast<std::size_t>(out.width) * out.height * 3)
    throw ResourceError(what + ": libvips returned " + std::to_string(size) + " bytes for " +
                        std::to_string(out.width) + "x" + std::to_string(out.height) + " RGB");
  return out;
}

}  // namespace

void init_vips() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (VIPS_INIT("mltool") != 0) throw ResourceError("libvips failed to start: " + vips_message());
    // Tiles are small: the callers run one per thread, so libvips' own workers would only
    // oversubscribe the cores. read_thumbnail raises it for its one large image.
    vips_concurrency_set(1);
    vips_cache_set_max(0);  // every image is new; a cache only holds memory
    // No run-time generated SIMD (orc): its code depends on the CPU it runs on, so resampled
    // pixels and tissue masks could differ between machines; and orc 0.4.33 (Debian 12)
    // stalled at 100% CPU in orc_code_allocate_codemem after thousands of per-tile resizes
    // (a 50k x 50k flat image). libvips' C paths cost about 13% on tile resampling.
    vips_vector_set_enabled(FALSE);
  });
}

io::RgbImage resize(const std::uint8_t* rgb, int width, int height, int out_width, int out_height) {
  init_vips();
  const ImagePtr in = wrap_rgb(rgb, width, height);
  VipsImage* raw = nullptr;
  const double hscale = static_cast<double>(out_width) / width;
  const double vscale = static_cast<double>(out_height) / height;
  if (vips_resize(in.get(), &raw, hscale, "vscale", vscale, "kernel", VIPS_KERNEL_LANCZOS3,
                  nullptr) != 0)
    throw ResourceError("libvips resize " + std::to_string(width) + " -> " +
                        std::to_string(out_width) + ": " + vips_message());
  ImagePtr out(raw);
  if (out->Xsize != out_width || out->Ysize != out_height) {
    // vips rounds the output size; pad by copying the edge (or crop) to the exact size.
    VipsImage* fixed = nullptr;
    if (vips_embed(out.get(), &fixed, 0, 0, out_width, out_height, "extend", VIPS_EXTEND_COPY,
                   nullptr) != 0)
      throw ResourceError("libvips embed: " + vips_message());
    out.reset(fixed);
  }
  return to_memory(out.get(), "libvips resize");
}

namespace detail {

void read_region_rgb(VipsImage* image, const std::string& path, std::int64_t x, std::int64_t y,
                     std::int64_t w, std::int64_t h, std::uint8_t* rgb) {
  const VipsRect rect{static_cast<int>(x), static_cast<int>(y), static_cast<int>(w),
                      static_cast<int>(h)};
  VipsRect valid = rect;
  const VipsRect bounds{0, 0, image->Xsize, image->Ysize};
  vips_rect_intersectrect(&valid, &bounds, &valid);
  if (valid.width != rect.width || valid.height != rect.height)
    std::memset(rgb, 255, static_cast<std::size_t>(w) * h * 3);
  if (vips_rect_isempty(&valid)) return;
  // Regions belong to the thread that made them; one per read costs little next to a decode.
  VipsRegion* region = vips_region_new(image);
  if (!region) throw ResourceError(at_file(path, "libvips region: " + vips_message()));
  if (vips_region_prepare(region, &valid) != 0) {
    g_object_unref(region);
    throw InputError(at_file(path, "reading " + std::to_string(w) + "x" + std::to_string(h) +
                                       " at (" + std::to_string(x) + ", " + std::to_string(y) +
                                       "): libvips: " + vips_message()));
  }
  const int bands = image->Bands;
  for (int row = 0; row < valid.height; ++row) {
    const auto* src = reinterpret_cast<const std::uint8_t*>(
        VIPS_REGION_ADDR(region, valid.left, valid.top + row));
    std::uint8_t* dst = rgb + (static_cast<std::size_t>(valid.top - rect.top + row) * rect.width +
                               (valid.left - rect.left)) *
                                  3;
    if (bands == 3) {
      std::memcpy(dst, src, static_cast<std::size_t>(valid.width) * 3);
    } else {  // RGBA, straight alpha: composite on white
      for (int i = 0; i < valid.width; ++i) {
        const unsigned a = src[4 * i + 3];
        for (int c = 0; c < 3; ++c)
          dst[3 * i + c] =
              static_cast<std::uint8_t>((src[4 * i + c] * a + 255 * (255 - a) + 127) / 255);
      }
    }
  }
  g_object_unref(region);
}

io::RgbImage shrink_to_memory(ImagePtr image, int out_w, int out_h, const std::string& path) {
  VipsImage* raw = nullptr;
  if (image->Xsize != out_w || image->Ysize != out_h) {
    if (vips_resize(image.get(), &raw, static_cast<double>(out_w) / image->Xsize, "vscale",
                    static_cast<double>(out_h) / image->Ysize, "kernel", VIPS_KERNEL_LANCZOS3,
                    nullptr) != 0)
      throw ResourceError(at_file(path, "libvips thumbnail resize: " + vips_message()));
    image.reset(raw);
    if (image->Xsize != out_w || image->Ysize != out_h) {
      if (vips_embed(image.get(), &raw, 0, 0, out_w, out_h, "extend", VIPS_EXTEND_COPY, nullptr) !=
          0)
        throw ResourceError(at_file(path, "libvips embed: " + vips_message()));
      image.reset(raw);
    }
  }
  if (image->BandFmt != VIPS_FORMAT_UCHAR) {
    if (vips_cast_uchar(image.get(), &raw, nullptr) != 0)
      throw ResourceError(at_file(path, "libvips cast: " + vips_message()));
    image.reset(raw);
  }
  // One large image: let libvips use every core while it streams it.
  const int concurrency = vips_concurrency_get();
  vips_concurrency_set(0);  // 0 = the default, one thread per core
  io::RgbImage out;
  try {
    out = to_memory(image.get(), at_file(path, "thumbnail"));
  } catch (...) {
    vips_concurrency_set(concurrency);
    throw;
  }
  vips_concurrency_set(concurrency);
  return out;
}

}  // namespace detail

namespace {

// A pyramid level as a libvips image whose pixels OpenSlide reads on demand, so libvips
// shrinks it in strips on all cores without holding the level.
struct LevelSource {
  const Slide* slide;
  int level;
  double downsample;
};

int generate_level(VipsRegion* out, void* /*seq*/, void* a, void* /*b*/, gboolean* /*stop*/) {
  const auto* source = static_cast<const LevelSource*>(a);
  const VipsRect& r = out->valid;
  thread_local std::vector<std::uint8_t> rgb;
  rgb.resize(static_cast<std::size_t>(r.width) * r.height * 3);
  try {
    // Level pixels → level-0 position, as libvips' own OpenSlide loader does.
    source->slide->read_rgb(static_cast<std::int64_t>(r.left * source->downsample),
                            static_cast<std::int64_t>(r.top * source->downsample), source->level,
                            r.width, r.height, rgb.data());
  } catch (const std::exception& e) {
    vips_error("mltool", "%s", e.what());
    return -1;
  }
  for (int row = 0; row < r.height; ++row)
    std::memcpy(VIPS_REGION_ADDR(out, r.left, r.top + row),
                rgb.data() + static_cast<std::size_t>(row) * r.width * 3,
                static_cast<std::size_t>(r.width) * 3);
  return 0;
}

// `source`'s level as a libvips image read on demand. Where its downsample is a whole number
// it is read in strips of whole rows, each strip once: vips_resize asks for overlapping lines,
// and read line by line (as it asks) each line was read again for every output line that
// needed it, 6.8 times over on the real slide. Another level is read as libvips asks, as
// before: OpenSlide resamples a fractional level position, so its pixels depend on where
// each read starts.
ImagePtr streamed_level(const Slide& slide, const LevelSource& source) {
  const Level& l = slide.geometry().levels[source.level];
  ImagePtr image(vips_image_new());
  vips_image_init_fields(image.get(), static_cast<int>(l.width), static_cast<int>(l.height), 3,
                         VIPS_FORMAT_UCHAR, VIPS_CODING_NONE, VIPS_INTERPRETATION_sRGB, 1.0, 1.0);
  if (vips_image_pipelinev(image.get(), VIPS_DEMAND_STYLE_SMALLTILE, nullptr) != 0 ||
      vips_image_generate(image.get(), nullptr, generate_level, nullptr,
                          const_cast<LevelSource*>(&source), nullptr) != 0)
    throw ResourceError(at_file(slide.path(), "libvips: " + vips_message()));
  if (l.downsample != std::floor(l.downsample)) return image;
  VipsImage* cached = nullptr;
  const int threads = util::allowed_cpus();  // shrink_to_memory streams on every core
  if (vips_tilecache(image.get(), &cached, "tile_width", static_cast<int>(l.width), "tile_height",
                     static_cast<int>(strip_rows(slide, source.level)), "max_tiles",
                     2 * threads + 2, "threaded", TRUE, nullptr) != 0)
    throw ResourceError(at_file(slide.path(), "libvips tilecache: " + vips_message()));
  return ImagePtr(cached);
}

}  // namespace

io::RgbImage read_thumbnail(const Slide& slide, int level, double scale) {
  init_vips();
  if (const flat::Info* info = slide.flat_info())
    return flat::thumbnail(slide.path(), *info, scale * slide.geometry().levels[level].downsample);
  const Level& l = slide.geometry().levels[level];
  scale = std::min(scale, 1.0);
  const int out_w = std::max(1, static_cast<int>(std::lround(l.width * scale)));
  const int out_h = std::max(1, static_cast<int>(std::lround(l.height * scale)));
  // A small level is read once and held by the Slide, for every picture made of it.
  if (const io::RgbImage* held = slide.held_level(level))
    return detail::shrink_to_memory(wrap_rgb(held->pixels.data(), held->width, held->height), out_w,
                                    out_h, slide.path());
  const LevelSource source{&slide, level, l.downsample};
  return detail::shrink_to_memory(streamed_level(slide, source), out_w, out_h, slide.path());
}

std::string libvips_version() { return std::string("libvips ") + vips_version_string(); }

}  // namespace mltool::slide
