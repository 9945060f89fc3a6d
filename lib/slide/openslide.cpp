#include "mltool/slide/openslide.hpp"

#include "openslide_api.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "dicomweb_slide.hpp"
#include "flat_image.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/parallel.hpp"

namespace mltool::slide {

struct Slide::Handle {
  openslide_t* osr = nullptr;                  // a pyramid, or
  std::optional<flat::Info> flat;              // a flat image,
  std::unique_ptr<flat::RandomAccess> pixels;  // read by random access when asked
  std::once_flag pixels_once;
  std::unique_ptr<DicomwebSeries> web;  // or a DICOMweb series
  std::mutex held_mutex;                // held_level's: levels read whole, by level
  std::map<int, std::unique_ptr<io::RgbImage>> held;
  ~Handle() {
    if (osr) openslide_close(osr);
  }
};

std::optional<double> property_number(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text->c_str(), &end);
  if (errno != 0 || end == text->c_str() || !std::isfinite(v)) return std::nullopt;
  return v;
}

namespace {

std::optional<double> parse_positive(const std::optional<std::string>& text) {
  const auto v = property_number(text);
  return v && *v > 0 ? v : std::nullopt;
}

}  // namespace

std::optional<double> mpp_from_tiff_resolution(const std::optional<std::string>& resolution,
                                               const std::optional<std::string>& unit) {
  const auto per_unit = parse_positive(resolution);
  if (!per_unit || !unit) return std::nullopt;
  if (*unit == "centimeter") return 10000.0 / *per_unit;
  if (*unit == "inch") {
    if (is_placeholder_dpi(*per_unit)) return std::nullopt;
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

namespace {

// The first .dcm file (by name) of a DICOM WSI directory.
std::string dicom_file_in(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".dcm") == 0)
        files.push_back(util::join_path(dir, name));
    }
    ::closedir(d);
  }
  if (files.empty())
    throw InputError(at_file(dir,
                             "a directory is read as a DICOM WSI series, but it holds no "
                             ".dcm file"));
  return *std::min_element(files.begin(), files.end());
}

}  // namespace

std::string openslide_version() { return std::string("OpenSlide ") + openslide_get_version(); }

Slide Slide::open(const std::string& path, const io::DicomwebOptions& web) {
  if (io::is_dicomweb_url(path)) {
    Slide s;
    s.path_ = s.file_ = io::redacted_url(path);  // shown in messages: no credentials
    s.vendor_ = "dicomweb";
    s.handle_ = std::make_unique<Handle>();
    s.handle_->web = std::make_unique<DicomwebSeries>(path, web);
    s.geometry_ = s.handle_->web->geometry();
    return s;
  }
  if (::access(path.c_str(), R_OK) != 0)
    throw InputError(sys_message(path, "cannot open slide", errno));
  Slide s;
  s.path_ = path;
  s.file_ = util::is_directory(path) ? dicom_file_in(path) : path;
  s.handle_ = std::make_unique<Handle>();
  const char* vendor = openslide_detect_vendor(s.file_.c_str());
  if (!vendor) {
    s.handle_->flat = flat::probe(s.file_);
    if (!s.handle_->flat)
      throw InputError(
          at_file(path, "not a slide format " + openslide_version() +
                            " reads, nor a flat image (TIFF, PNG, JPEG) libvips reads"));
    const flat::Info& info = *s.handle_->flat;
    s.vendor_ = "flat-" + info.format;
    s.geometry_.levels.push_back({info.width, info.height, 1.0});
    s.geometry_.mpp_x = info.mpp_x;
    s.geometry_.mpp_y = info.mpp_y;
    return s;
  }
  s.vendor_ = vendor;
  s.handle_->osr = openslide_open(s.file_.c_str());
  if (!s.handle_->osr)
    throw InputError(at_file(path, "OpenSlide cannot open this " + s.vendor_ + " file"));
  if (const char* err = openslide_get_error(s.handle_->osr))
    throw InputError(at_file(path, std::string("OpenSlide: ") + err));
  s.read_pyramid();
  return s;
}

void Slide::read_pyramid() {
  openslide_t* osr = handle_->osr;
  const int levels = openslide_get_level_count(osr);
  if (levels < 1) throw InputError(at_file(path_, "OpenSlide reports no pyramid levels"));
  for (int l = 0; l < levels; ++l) {
    Level level;
    openslide_get_level_dimensions(osr, l, &level.width, &level.height);
    level.downsample = openslide_get_level_downsample(osr, l);
    if (level.width <= 0 || level.height <= 0 || !(level.downsample > 0))
      throw InputError(at_file(path_, "OpenSlide reports an invalid level " + std::to_string(l)));
    geometry_.levels.push_back(level);
  }
  geometry_.mpp_x = parse_positive(property(kOpenSlideMppX));
  geometry_.mpp_y = parse_positive(property(kOpenSlideMppY));
  if (!geometry_.mpp_x && !geometry_.mpp_y) {
    const auto unit = property("tiff.ResolutionUnit");
    geometry_.mpp_x = mpp_from_tiff_resolution(property("tiff.XResolution"), unit);
    geometry_.mpp_y = mpp_from_tiff_resolution(property("tiff.YResolution"), unit);
  }
}

const flat::Info* Slide::flat_info() const { return handle_->flat ? &*handle_->flat : nullptr; }

const DicomwebSeries* Slide::dicomweb() const { return handle_->web.get(); }

Slide::Slide(Slide&&) noexcept = default;
Slide& Slide::operator=(Slide&&) noexcept = default;
Slide::~Slide() = default;

std::optional<std::string> Slide::property(const std::string& name) const {
  if (handle_->web) {
    const auto& all = handle_->web->properties();
    const auto it = all.find(name);
    if (it == all.end()) return std::nullopt;
    return it->second;
  }
  if (handle_->flat) {
    const auto it = handle_->flat->properties.find(name);
    if (it == handle_->flat->properties.end()) return std::nullopt;
    return it->second;
  }
  const char* v = openslide_get_property_value(handle_->osr, name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

std::vector<AssociatedImage> Slide::associated_images() const {
  std::vector<AssociatedImage> out;
  if (!handle_->osr) return out;
  const char* const* names = openslide_get_associated_image_names(handle_->osr);
  for (; names && *names; ++names) {
    AssociatedImage image{*names};
    openslide_get_associated_image_dimensions(handle_->osr, *names, &image.width, &image.height);
    out.push_back(image);
  }
  return out;
}

void Slide::read_rgb(std::int64_t x, std::int64_t y, int level, std::int64_t w, std::int64_t h,
                     std::uint8_t* rgb) const {
  if (handle_->web) return handle_->web->read_rgb(x, y, level, w, h, rgb);
  if (handle_->flat) {
    std::call_once(handle_->pixels_once, [&] {
      handle_->pixels = std::make_unique<flat::RandomAccess>(file_, *handle_->flat);
    });
    return handle_->pixels->read_rgb(x, y, w, h, rgb);
  }
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

std::int64_t strip_rows(const Slide& slide, int level) {
  const auto tile =
      property_number(slide.property("openslide.level[" + std::to_string(level) + "].tile-height"));
  std::int64_t rows = 256;
  if (tile && *tile >= 1 && *tile <= 4096) {
    const auto t = static_cast<std::int64_t>(*tile);
    rows = (256 + t - 1) / t * t;
  }
  const std::int64_t width = slide.geometry().levels.at(static_cast<std::size_t>(level)).width;
  constexpr std::int64_t kMaxStripPx = std::int64_t{4} << 20;
  return std::max<std::int64_t>(1, std::min(rows, kMaxStripPx / std::max<std::int64_t>(1, width)));
}

const io::RgbImage* Slide::held_level(int level) const {
  if (handle_->flat || level < 0 || level >= static_cast<int>(geometry_.levels.size()))
    return nullptr;
  const Level& l = geometry_.levels[level];
  if (l.width * l.height > kMaxHeldLevelPx || l.downsample != std::floor(l.downsample))
    return nullptr;
  const std::lock_guard<std::mutex> lock(handle_->held_mutex);
  auto& slot = handle_->held[level];
  if (slot) return slot.get();
  auto image = std::make_unique<io::RgbImage>();
  image->width = static_cast<int>(l.width);
  image->height = static_cast<int>(l.height);
  image->pixels.resize(static_cast<std::size_t>(l.width * l.height * 3));
  const std::int64_t rows = strip_rows(*this, level);
  const auto strips = static_cast<std::size_t>((l.height + rows - 1) / rows);
  util::parallel_for(strips, 0, [&](std::size_t i) {
    const std::int64_t top = static_cast<std::int64_t>(i) * rows;
    read_rgb(0, top * static_cast<std::int64_t>(l.downsample), level, l.width,
             std::min(rows, l.height - top),
             image->pixels.data() + static_cast<std::size_t>(top * l.width * 3));
  });
  slot = std::move(image);
  return slot.get();
}

}  // namespace mltool::slide
