// write_chart (chart.hpp): the SVG as written, and its PNG rendered by libvips' svgload
// (librsvg, text through Pango/fontconfig, so DejaVu Sans is the font the QC pictures use).
#include <mutex>

#include "mltool/io/image_codec.hpp"
#include "mltool/report/chart.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

#ifdef MLTOOL_HAVE_SLIDE
#include <vips/vips.h>

#include <memory>
#endif

namespace mltool::report {
namespace {

#ifdef MLTOOL_HAVE_SLIDE
struct Unref {
  void operator()(VipsImage* image) const { g_object_unref(image); }
};
using Image = std::unique_ptr<VipsImage, Unref>;

std::string vips_error_text() {
  std::string message = vips_error_buffer();
  vips_error_clear();
  while (!message.empty() && message.back() == '\n') message.pop_back();
  return message;
}

io::RgbImage render(const std::string& svg, const std::string& what) {
  static std::once_flag once;
  std::call_once(once, [] {
    // vips_init is idempotent: the slide half of the library may have started it already.
    if (VIPS_INIT("mltool") != 0)
      throw ResourceError("libvips failed to start: " + vips_error_text());
  });
  VipsImage* raw = nullptr;
  if (vips_svgload_buffer(const_cast<char*>(svg.data()), svg.size(), &raw, "dpi", 72.0, nullptr) !=
      0)
    throw ResourceError(what + ": libvips could not render the SVG: " + vips_error_text());
  Image loaded(raw);
  double white[3] = {255, 255, 255};
  VipsArrayDouble* background = vips_array_double_new(white, 3);
  const int flattened = vips_flatten(loaded.get(), &raw, "background", background, nullptr);
  vips_area_unref(VIPS_AREA(background));
  if (flattened != 0) throw ResourceError(what + ": flattening the chart: " + vips_error_text());
  Image flat(raw);
  if (vips_cast_uchar(flat.get(), &raw, nullptr) != 0)
    throw ResourceError(what + ": the chart to 8 bits: " + vips_error_text());
  Image rgb(raw);
  if (rgb->Bands != 3)
    throw ResourceError(what + ": libvips rendered " + std::to_string(rgb->Bands) +
                        " bands, not RGB");
  std::size_t size = 0;
  void* data = vips_image_write_to_memory(rgb.get(), &size);
  if (!data) throw ResourceError(what + ": " + vips_error_text());
  io::RgbImage out;
  out.width = rgb->Xsize;
  out.height = rgb->Ysize;
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  out.pixels.assign(bytes, bytes + size);
  g_free(data);
  return out;
}
#else
io::RgbImage render(const std::string&, const std::string& what) {
  throw ResourceError(what +
                      ": this mltool was built without libvips (MLTOOL_WITH_SLIDE off), "
                      "which renders charts to PNG");
}
#endif

}  // namespace

void write_chart(const std::string& png_path, const Svg& svg) {
  const std::string svg_path = svg_path_of(png_path);
  const std::string doc = svg.str();
  if (svg_path == png_path) {  // asked for FILE.svg: the SVG alone
    util::write_file_atomic(svg_path, doc);
    return;
  }
  const io::RgbImage image = render(doc, png_path);
  if (image.width != svg.width() || image.height != svg.height())
    throw ResourceError(png_path + ": libvips rendered " + std::to_string(image.width) + "x" +
                        std::to_string(image.height) + " pixels of a " +
                        std::to_string(svg.width()) + "x" + std::to_string(svg.height()) +
                        " chart");
  util::write_file_atomic(svg_path, doc);
  io::write_png(png_path, image);
}

}  // namespace mltool::report
