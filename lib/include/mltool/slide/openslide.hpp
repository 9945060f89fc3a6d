// A whole-slide image opened with OpenSlide: its pyramid, its µm/px and thread-safe region
// reads as plain RGB. One Slide may be read from any number of threads at once (OpenSlide
// handles are thread-safe); it is movable, not copyable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mltool/slide/geometry.hpp"

namespace mltool::slide {

class Slide {
 public:
  /// Opens `path`. Throws InputError naming the file for a missing or unreadable file, a
  /// file OpenSlide does not recognise ("not a slide format OpenSlide reads"), and a
  /// recognised file that OpenSlide fails to open (its message is quoted).
  static Slide open(const std::string& path);

  Slide(Slide&&) noexcept;
  Slide& operator=(Slide&&) noexcept;
  ~Slide();

  const std::string& path() const { return path_; }
  /// OpenSlide's vendor ("aperio", "hamamatsu", "generic-tiff", ...).
  const std::string& vendor() const { return vendor_; }
  /// Levels and µm/px. The µm/px is openslide.mpp-x/-y or, where OpenSlide gives none
  /// (OpenSlide 3.4 on generic TIFF), the TIFF resolution tags as OpenSlide 4 reads them.
  const SlideGeometry& geometry() const { return geometry_; }
  /// A property value, or nothing.
  std::optional<std::string> property(const std::string& name) const;

  /// Reads w × h pixels of `level` whose top-left corner is (x, y) in level-0 pixels into
  /// `rgb` (w * h * 3 bytes, interleaved), composited on white where the slide is
  /// transparent (outside the scanned area). Thread-safe. Throws InputError naming the
  /// file and the region when OpenSlide fails (e.g. a truncated file); after such an error
  /// every later read of this Slide fails too, as OpenSlide's errors are sticky.
  void read_rgb(std::int64_t x, std::int64_t y, int level, std::int64_t w, std::int64_t h,
                std::uint8_t* rgb) const;

 private:
  struct Handle;
  Slide() = default;
  std::string path_;
  std::string vendor_;
  SlideGeometry geometry_;
  std::unique_ptr<Handle> handle_;
};

/// µm per pixel from TIFF resolution properties (tiff.XResolution + tiff.ResolutionUnit
/// "centimeter" or "inch"), or nothing for another unit, a non-positive value or a
/// placeholder (72, 96 or 300 dpi, which converters write when they know nothing).
std::optional<double> mpp_from_tiff_resolution(const std::optional<std::string>& resolution,
                                               const std::optional<std::string>& unit);

/// Converts OpenSlide's premultiplied ARGB pixels to RGB composited on white:
/// channel + (255 - alpha), exact for opaque and fully transparent pixels.
void argb_to_rgb_on_white(const std::uint32_t* argb, std::size_t pixels, std::uint8_t* rgb);

}  // namespace mltool::slide
