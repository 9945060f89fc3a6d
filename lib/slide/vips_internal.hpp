// libvips plumbing shared by the slide sources (not a public header).
#pragma once

#include <vips/vips.h>

#include "mltool/io/image_codec.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace mltool::slide::detail {

struct VipsUnref {
  void operator()(VipsImage* image) const { g_object_unref(image); }
};
using ImagePtr = std::unique_ptr<VipsImage, VipsUnref>;

// libvips reports failures in a per-thread error buffer; take and clear it.
inline std::string vips_message() {
  std::string message = vips_error_buffer();
  vips_error_clear();
  while (!message.empty() && message.back() == '\n') message.pop_back();
  return message.empty() ? "unknown libvips error" : message;
}

// Copies w × h pixels of the 8-bit RGB or RGBA `image` at (x, y) into `rgb` (RGBA composited
// on white, straight alpha); pixels outside the image are white. InputError naming `path`
// and the region when libvips fails.
void read_region_rgb(VipsImage* image, const std::string& path, std::int64_t x, std::int64_t y,
                     std::int64_t w, std::int64_t h, std::uint8_t* rgb);

// `image` (8-bit RGB) resized to exactly out_w × out_h with vips_resize (Lanczos-3) and
// written to memory on every core: a thumbnail of a large image, streamed in strips.
io::RgbImage shrink_to_memory(ImagePtr image, int out_w, int out_h, const std::string& path);

}  // namespace mltool::slide::detail
