#include "flat_image.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "mltool/slide/geometry.hpp"
#include "mltool/slide/image.hpp"
#include "mltool/util/error.hpp"
#include "vips_internal.hpp"

namespace mltool::slide::flat {
namespace {

using detail::ImagePtr;
using detail::vips_message;

// The loader for `format`, with access and (JPEG only) shrink-on-load.
ImagePtr load(const std::string& path, const std::string& format, VipsAccess access,
              int jpeg_shrink = 1) {
  VipsImage* raw = nullptr;
  int rc = -1;
  if (format == "tiff")
    rc = vips_tiffload(path.c_str(), &raw, "access", access, nullptr);
  else if (format == "png")
    rc = vips_pngload(path.c_str(), &raw, "access", access, nullptr);
  else if (format == "jpeg")
    rc = vips_jpegload(path.c_str(), &raw, "access", access, "shrink", jpeg_shrink, nullptr);
  if (rc != 0)
    throw InputError(at_file(path, "libvips cannot read this " + format + ": " + vips_message()));
  return ImagePtr(raw);
}

// 8-bit sRGB, three bands, composited on white: what the tiles hold.
ImagePtr to_rgb8(ImagePtr image, const std::string& path) {
  VipsImage* raw = nullptr;
  auto check = [&](int rc, const char* what) {
    if (rc != 0)
      throw InputError(at_file(path, std::string("libvips ") + what + ": " + vips_message()));
    image.reset(raw);
  };
  if (vips_image_hasalpha(image.get())) {
    const double max = image->BandFmt == VIPS_FORMAT_USHORT ? 65535.0 : 255.0;
    VipsArrayDouble* white = vips_array_double_newv(1, max);
    const int rc = vips_flatten(image.get(), &raw, "background", white, "max_alpha", max, nullptr);
    vips_area_unref(VIPS_AREA(white));
    check(rc, "flatten");
  }
  if (image->Bands != 3 || image->Type != VIPS_INTERPRETATION_sRGB) {
    if (!(image->Bands == 3 && image->BandFmt == VIPS_FORMAT_UCHAR))
      check(vips_colourspace(image.get(), &raw, VIPS_INTERPRETATION_sRGB, nullptr), "colourspace");
  }
  if (image->BandFmt != VIPS_FORMAT_UCHAR)
    check(vips_cast_uchar(image.get(), &raw, nullptr), "cast");
  if (image->Bands != 3)
    throw InputError(at_file(
        path, "libvips makes " + std::to_string(image->Bands) + " bands of this image, not RGB"));
  return image;
}

std::string number(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

// µm per pixel from libvips' resolution (pixels per mm, whatever unit the file used), or
// nothing for a placeholder dpi or none at all (libvips reads a missing one as 1 px/mm).
std::optional<double> mpp_from_resolution(double px_per_mm) {
  if (!(px_per_mm > 0) || !std::isfinite(px_per_mm)) return std::nullopt;
  if (is_placeholder_dpi(px_per_mm * 25.4)) return std::nullopt;
  return 1000.0 / px_per_mm;
}

}  // namespace

std::optional<Info> probe(const std::string& path) {
  init_vips();
  const char* loader = vips_foreign_find_load(path.c_str());
  if (!loader) {
    vips_error_clear();
    return std::nullopt;
  }
  const std::string name = loader;
  Info info;
  if (name.find("Tiff") != std::string::npos)
    info.format = "tiff";
  else if (name.find("Png") != std::string::npos)
    info.format = "png";
  else if (name.find("Jpeg") != std::string::npos)
    info.format = "jpeg";
  else
    return std::nullopt;
  const ImagePtr image = load(path, info.format, VIPS_ACCESS_SEQUENTIAL);
  info.width = image->Xsize;
  info.height = image->Ysize;
  info.mpp_x = mpp_from_resolution(image->Xres);
  info.mpp_y = mpp_from_resolution(image->Yres);
  info.properties = {
      {"flat.format", info.format},
      {"flat.loader", name},
      {"flat.bands", std::to_string(image->Bands)},
      {"flat.xres-px-per-mm", number(image->Xres)},
      {"flat.yres-px-per-mm", number(image->Yres)},
  };
  const char* unit = nullptr;
  if (vips_image_get_typeof(image.get(), "resolution-unit") &&
      vips_image_get_string(image.get(), "resolution-unit", &unit) == 0 && unit)
    info.properties["flat.resolution-unit"] = unit;
  return info;
}

io::RgbImage thumbnail(const std::string& path, const Info& info, double scale) {
  init_vips();
  scale = std::min(scale, 1.0);
  // JPEG decodes at 1/2, 1/4 or 1/8 directly; the rest of the shrink is vips_resize's.
  int shrink = 1;
  if (info.format == "jpeg")
    while (shrink < 8 && scale * shrink * 2 <= 1.0) shrink *= 2;
  ImagePtr image = to_rgb8(load(path, info.format, VIPS_ACCESS_SEQUENTIAL, shrink), path);
  const int out_w = std::max(1, static_cast<int>(std::lround(info.width * scale)));
  const int out_h = std::max(1, static_cast<int>(std::lround(info.height * scale)));
  return detail::shrink_to_memory(std::move(image), out_w, out_h, path);
}

struct RandomAccess::Image {
  ImagePtr image;
};

RandomAccess::RandomAccess(const std::string& path, const Info& info) : path_(path) {
  init_vips();
  image_ = std::make_unique<Image>();
  image_->image = to_rgb8(load(path, info.format, VIPS_ACCESS_RANDOM), path);
}

RandomAccess::~RandomAccess() = default;

void RandomAccess::read_rgb(std::int64_t x, std::int64_t y, std::int64_t w, std::int64_t h,
                            std::uint8_t* rgb) const {
  detail::read_region_rgb(image_->image.get(), path_, x, y, w, h, rgb);
}

namespace {

class BandReader final : public RegionReader {
 public:
  BandReader(const std::string& path, const Info& info)
      : path_(path),
        width_(info.width),
        height_(info.height),
        image_(to_rgb8(load(path, info.format, VIPS_ACCESS_SEQUENTIAL), path)) {}

  void read_rgb(std::int64_t x, std::int64_t y, std::int64_t w, std::int64_t h,
                std::uint8_t* rgb) override {
    std::lock_guard lock(mutex_);
    if (y < top_)
      throw std::logic_error(at_file(path_, "flat image read out of order: row " +
                                                std::to_string(y) + " after row " +
                                                std::to_string(top_)));
    advance_to(y);
    // Room for one read and one decoded chunk, once: the band never reallocates.
    const std::size_t need = static_cast<std::size_t>(h + kChunkRows) * width_ * 3;
    if (rows_.capacity() < need) rows_.reserve(need);
    fill_to(std::min(y + h, height_));
    const std::size_t row_bytes = static_cast<std::size_t>(width_) * 3;
    for (std::int64_t r = 0; r < h; ++r) {
      std::uint8_t* dst = rgb + static_cast<std::size_t>(r) * w * 3;
      std::memset(dst, 255, static_cast<std::size_t>(w) * 3);  // outside the image: white
      if (y + r >= height_ || x >= width_ || x + w <= 0) continue;
      const std::int64_t x0 = std::max<std::int64_t>(x, 0), x1 = std::min(x + w, width_);
      const std::uint8_t* src = rows_.data() + static_cast<std::size_t>(y + r - top_) * row_bytes;
      std::memcpy(dst + (x0 - x) * 3, src + x0 * 3, static_cast<std::size_t>(x1 - x0) * 3);
    }
  }
  const char* name() const override { return "libvips-flat"; }
  std::string version() const override { return libvips_version(); }
  bool in_order() const override { return true; }

 private:
  // Forgets the rows above `y`; later reads never go back. Rows between the band and `y`
  // are decoded and dropped: skipping them in libvips' sequential mode would make it hold
  // every skipped row (measured: 1.2 GB on a 50k x 50k image with sparse tissue).
  void advance_to(std::int64_t y) {
    const std::size_t row_bytes = static_cast<std::size_t>(width_) * 3;
    const std::int64_t held = static_cast<std::int64_t>(rows_.size() / row_bytes);
    const std::int64_t drop = std::min(y - top_, held);
    rows_.erase(rows_.begin(), rows_.begin() + static_cast<std::ptrdiff_t>(drop * row_bytes));
    top_ += drop;
    if (held > drop) return;
    std::vector<std::uint8_t> scratch;
    while (next_ < y) {
      const std::int64_t n = std::min<std::int64_t>(kChunkRows, y - next_);
      scratch.resize(static_cast<std::size_t>(n) * row_bytes);
      detail::read_region_rgb(image_.get(), path_, 0, next_, width_, n, scratch.data());
      next_ += n;
    }
    top_ = next_;
  }

  // Decodes rows up to `end` (exclusive), kChunkRows at a time.
  void fill_to(std::int64_t end) {
    const std::size_t row_bytes = static_cast<std::size_t>(width_) * 3;
    while (next_ < end) {
      const std::int64_t n = std::min<std::int64_t>(kChunkRows, end - next_);
      const std::size_t at = rows_.size();
      rows_.resize(at + static_cast<std::size_t>(n) * row_bytes);
      detail::read_region_rgb(image_.get(), path_, 0, next_, width_, n, rows_.data() + at);
      next_ += n;
    }
  }

  static constexpr std::int64_t kChunkRows = 64;
  std::string path_;
  std::int64_t width_, height_;
  ImagePtr image_;
  std::mutex mutex_;
  std::int64_t top_ = 0;   // the first row held in rows_
  std::int64_t next_ = 0;  // the next row to decode (top_ + rows held)
  std::vector<std::uint8_t> rows_;
};

}  // namespace

std::unique_ptr<RegionReader> band_reader(const std::string& path, const Info& info) {
  init_vips();
  return std::make_unique<BandReader>(path, info);
}

}  // namespace mltool::slide::flat
