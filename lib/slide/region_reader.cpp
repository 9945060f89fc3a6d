#include "mltool/slide/region_reader.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "flat_image.hpp"
#include "mltool/slide/image.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "vips_internal.hpp"

namespace mltool::slide {
namespace {

using detail::ImagePtr;
using detail::vips_message;

class OpenSlideReader final : public RegionReader {
 public:
  OpenSlideReader(const Slide& slide, int level) : slide_(slide), level_(level) {}
  // Slide::read_rgb: OpenSlide's, or a DICOMweb series' frames decoded (dicomweb_slide.hpp).
  void read_rgb(std::int64_t x, std::int64_t y, std::int64_t w, std::int64_t h,
                std::uint8_t* rgb) override {
    slide_.read_rgb(x, y, level_, w, h, rgb);
  }
  const char* name() const override { return slide_.dicomweb() ? "dicomweb" : "openslide"; }
  std::string version() const override {
    return slide_.dicomweb() ? dicomweb_reader_version() : openslide_version();
  }

 private:
  const Slide& slide_;
  int level_;
};

// One TIFF page (the level) through libvips, read with a VipsRegion per read.
class VipsTiffReader final : public RegionReader {
 public:
  VipsTiffReader(const Slide& slide, int level, ImagePtr page)
      : slide_(slide),
        level_(level),
        downsample_(slide.geometry().levels[level].downsample),
        page_(std::move(page)) {}

  void read_rgb(std::int64_t x, std::int64_t y, std::int64_t w, std::int64_t h,
                std::uint8_t* rgb) override {
    std::call_once(checked_, [&] { verify(x, y, w, h); });
    if (fallback_) return slide_.read_rgb(x, y, level_, w, h, rgb);
    decode(x, y, w, h, rgb);
  }
  const char* name() const override { return fallback_ ? "openslide" : "libvips-tiff"; }
  std::string version() const override {
    return fallback_ ? openslide_version() : libvips_version();
  }

 private:
  void decode(std::int64_t x, std::int64_t y, std::int64_t w, std::int64_t h, std::uint8_t* rgb) {
    // Level-0 position → level pixels, as OpenSlide does for a 1:1 TIFF level; pixels outside
    // the level are white, as OpenSlide gives them.
    detail::read_region_rgb(
        page_.get(), slide_.path(), static_cast<std::int64_t>(static_cast<double>(x) / downsample_),
        static_cast<std::int64_t>(static_cast<double>(y) / downsample_), w, h, rgb);
  }

  // The first region is read both ways; any disagreement beyond JPEG decoder rounding sends
  // every read of this slide to OpenSlide.
  void verify(std::int64_t x, std::int64_t y, std::int64_t w, std::int64_t h) {
    const std::size_t n = static_cast<std::size_t>(w) * h * 3;
    std::vector<std::uint8_t> ours(n), theirs(n);
    slide_.read_rgb(x, y, level_, w, h, theirs.data());
    try {
      decode(x, y, w, h, ours.data());
    } catch (const Error& e) {
      log::debug(slide_.path() + ": libvips cannot decode level " + std::to_string(level_) +
                 ", using OpenSlide: " + e.what());
      fallback_ = true;
      return;
    }
    std::uint64_t diff = 0;
    int worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const int d = std::abs(int{ours[i]} - int{theirs[i]});
      diff += d;
      worst = std::max(worst, d);
    }
    if (static_cast<double>(diff) / n > 0.5 || worst > 32) {
      log::debug(slide_.path() + ": libvips and OpenSlide disagree on level " +
                 std::to_string(level_) + " (mean difference " +
                 std::to_string(static_cast<double>(diff) / n) + "), using OpenSlide");
      fallback_ = true;
    }
  }

  const Slide& slide_;
  int level_;
  double downsample_;
  ImagePtr page_;
  std::once_flag checked_;
  bool fallback_ = false;
};

// The TIFF page that holds `level` pixel for pixel, or null.
ImagePtr find_page(const Slide& slide, int level) {
  const Level& want = slide.geometry().levels[level];
  VipsImage* raw = nullptr;
  if (vips_tiffload(slide.path().c_str(), &raw, "access", VIPS_ACCESS_RANDOM, nullptr) != 0) {
    vips_error_clear();
    return nullptr;
  }
  ImagePtr first(raw);
  int pages = 1;
  if (vips_image_get_typeof(first.get(), VIPS_META_N_PAGES))
    vips_image_get_int(first.get(), VIPS_META_N_PAGES, &pages);
  for (int p = 0; p < pages; ++p) {
    ImagePtr page;
    if (p == 0) {
      page = std::move(first);
    } else if (vips_tiffload(slide.path().c_str(), &raw, "page", p, "access", VIPS_ACCESS_RANDOM,
                             nullptr) == 0) {
      page.reset(raw);
    } else {
      vips_error_clear();
      continue;
    }
    const bool rgb = page->BandFmt == VIPS_FORMAT_UCHAR && (page->Bands == 3 || page->Bands == 4) &&
                     page->Type == VIPS_INTERPRETATION_sRGB;
    if (rgb && page->Xsize == want.width && page->Ysize == want.height) return page;
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<RegionReader> make_region_reader(const Slide& slide, int level,
                                                 ReaderChoice choice) {
  if (const flat::Info* info = slide.flat_info()) return flat::band_reader(slide.path(), *info);
  const bool tiff_levels = slide.vendor() == "generic-tiff" || slide.vendor() == "aperio";
  if (choice == ReaderChoice::automatic && tiff_levels) {
    init_vips();
    const double ds = slide.geometry().levels[level].downsample;
    // 1:1 only where level-0 positions map to whole level pixels (integral downsamples).
    if (ds == static_cast<double>(static_cast<std::int64_t>(ds)))
      if (ImagePtr page = find_page(slide, level))
        return std::make_unique<VipsTiffReader>(slide, level, std::move(page));
  }
  return std::make_unique<OpenSlideReader>(slide, level);
}

}  // namespace mltool::slide
