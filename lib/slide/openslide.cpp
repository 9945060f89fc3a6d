#include "mltool/slide/openslide.hpp"

#include <openslide.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <unistd.h>

#include "mltool/util/error.hpp"

namespace mltool::slide {

struct Slide::Handle {
  openslide_t* osr = nullptr;
  ~Handle() {
    if (osr) openslide_close(osr);
  }
};

namespace {

std::optional<double> parse_positive(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text->c_str(), &end);
  if (errno != 0 || end == text->c_str() || !std::isfinite(v) || v <= 0) return std::nullopt;
  return v;
}

}  // namespace

std::optional<double> mpp_from_tiff_resolution(const std::optional<std::string>& resolution,
                                               const std::optional<std::string>& unit) {
  const auto per_unit = parse_positive(resolution);
  if (!per_unit || !unit) return std::nullopt;
  if (*unit == "centimeter") return 10000.0 / *per_unit;
  if (*unit == "inch") {
    // 72, 96 and 300 dpi are what converters write when they know nothing: no µm/px.
    for (const double placeholder : {72.0, 96.0, 300.0})
      if (std::abs(*per_unit - placeholder) < 1e-6) return std::nullopt;
    return 25400.0 / *per_unit;
  }
  return std::nullopt;
}

void argb_to_rgb_on_white(const std::uint32_t* argb, std::size_t pixels, std::uint8_t* rgb) {
  for (std::size_t i = 0; i < pixels; ++i) {
    const std::uint32_t p = argb[i];
    const unsigned a = p >> 24;
    const unsigned bg = 255 - a;  // premultiplied: c + (1 - a) * 255 composites on white
    rgb[3 * i + 0] = static_cast<std::uint8_t>(((p >> 16) & 0xff) + bg);
    rgb[3 * i + 1] = static_cast<std::uint8_t>(((p >> 8) & 0xff) + bg);
    rgb[3 * i + 2] = static_cast<std::uint8_t>((p & 0xff) + bg);
  }
}

Slide Slide::open(const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0)
    throw InputError(sys_message(path, "cannot open slide", errno));
  const char* vendor = openslide_detect_vendor(path.c_str());
  if (!vendor) throw InputError(at_file(path, "not a slide format OpenSlide reads"));
  Slide s;
  s.path_ = path;
  s.vendor_ = vendor;
  s.handle_ = std::make_unique<Handle>();
  s.handle_->osr = openslide_open(path.c_str());
  if (!s.handle_->osr)
    throw InputError(at_file(path, "OpenSlide cannot open this " + s.vendor_ + " file"));
  if (const char* err = openslide_get_error(s.handle_->osr))
    throw InputError(at_file(path, std::string("OpenSlide: ") + err));

  openslide_t* osr = s.handle_->osr;
  const int levels = openslide_get_level_count(osr);
  if (levels < 1) throw InputError(at_file(path, "OpenSlide reports no pyramid levels"));
  for (int l = 0; l < levels; ++l) {
    Level level;
    openslide_get_level_dimensions(osr, l, &level.width, &level.height);
    level.downsample = openslide_get_level_downsample(osr, l);
    if (level.width <= 0 || level.height <= 0 || !(level.downsample > 0))
      throw InputError(at_file(path, "OpenSlide reports an invalid level " + std::to_string(l)));
    s.geometry_.levels.push_back(level);
  }
  s.geometry_.mpp_x = parse_positive(s.property(OPENSLIDE_PROPERTY_NAME_MPP_X));
  s.geometry_.mpp_y = parse_positive(s.property(OPENSLIDE_PROPERTY_NAME_MPP_Y));
  if (!s.geometry_.mpp_x && !s.geometry_.mpp_y) {
    const auto unit = s.property("tiff.ResolutionUnit");
    s.geometry_.mpp_x = mpp_from_tiff_resolution(s.property("tiff.XResolution"), unit);
    s.geometry_.mpp_y = mpp_from_tiff_resolution(s.property("tiff.YResolution"), unit);
  }
  return s;
}

Slide::Slide(Slide&&) noexcept = default;
Slide& Slide::operator=(Slide&&) noexcept = default;
Slide::~Slide() = default;

std::optional<std::string> Slide::property(const std::string& name) const {
  const char* v = openslide_get_property_value(handle_->osr, name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

void Slide::read_rgb(std::int64_t x, std::int64_t y, int level, std::int64_t w, std::int64_t h,
                     std::uint8_t* rgb) const {
  const auto pixels = static_cast<std::size_t>(w) * static_cast<std::size_t>(h);
  thread_local std::vector<std::uint32_t> argb;
  argb.resize(pixels);
  openslide_read_region(handle_->osr, argb.data(), x, y, level, w, h);
  if (const char* err = openslide_get_error(handle_->osr))
    throw InputError(at_file(path_, "reading " + std::to_string(w) + "x" + std::to_string(h) +
                                        " at (" + std::to_string(x) + ", " + std::to_string(y) +
                                        ") level " + std::to_string(level) +
                                        ": OpenSlide: " + err));
  argb_to_rgb_on_white(argb.data(), pixels, rgb);
}

}  // namespace mltool::slide
