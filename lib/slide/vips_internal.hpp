// libvips plumbing shared by the slide sources (not a public header).
#pragma once

#include <vips/vips.h>

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

}  // namespace mltool::slide::detail
