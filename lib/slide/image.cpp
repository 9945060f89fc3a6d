#include "mltool/slide/image.hpp"

#include <vips/vips.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>

#include "mltool/util/error.hpp"
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

io::RgbImage read_thumbnail(const std::string& path, int level, double scale) {
  init_vips();
  VipsImage* raw = nullptr;
  if (vips_openslideload(path.c_str(), &raw, "level", level, nullptr) != 0)
    throw InputError(at_file(
        path, "libvips cannot read level " + std::to_string(level) + ": " + vips_message()));
  ImagePtr image(raw);
  VipsArrayDouble* white = vips_array_double_newv(3, 255.0, 255.0, 255.0);
  const int flattened = vips_flatten(image.get(), &raw, "background", white, nullptr);
  vips_area_unref(VIPS_AREA(white));
  if (flattened != 0) throw ResourceError(at_file(path, "libvips flatten: " + vips_message()));
  image.reset(raw);
  if (scale < 1.0) {
    if (vips_resize(image.get(), &raw, scale, "kernel", VIPS_KERNEL_LANCZOS3, nullptr) != 0)
      throw ResourceError(at_file(path, "libvips thumbnail resize: " + vips_message()));
    image.reset(raw);
  }
  if (image->BandFmt != VIPS_FORMAT_UCHAR) {
    if (vips_cast_uchar(image.get(), &raw, nullptr) != 0)
      throw ResourceError(at_file(path, "libvips cast: " + vips_message()));
    image.reset(raw);
  }
  // One large image: let libvips use every core while it streams the level.
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

}  // namespace mltool::slide
