// Flat (single-resolution) images as slides, through libvips: a strip or tiled TIFF without a
// pyramid, BigTIFF, PNG, JPEG (not a public header). OpenSlide reads none of these; libvips
// decodes them in strips, so nothing here needs the whole decoded image in memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "mltool/io/image_codec.hpp"
#include "mltool/slide/region_reader.hpp"

namespace mltool::slide::flat {

/// What a flat image's header says.
struct Info {
  std::string format;  ///< "tiff", "png" or "jpeg"
  std::int64_t width = 0;
  std::int64_t height = 0;
  /// µm per pixel from the resolution the file declares, where it is not a placeholder.
  std::optional<double> mpp_x, mpp_y;
  /// flat.format, flat.bands, flat.interpretation, flat.xres-dpi ... for Slide::property.
  std::map<std::string, std::string> properties;
};

/// The header of `path` if libvips reads it as a TIFF, PNG or JPEG; nothing otherwise.
std::optional<Info> probe(const std::string& path);

/// The whole image shrunk by `scale` (<= 1), 8-bit RGB on white, decoded once in strips
/// (JPEG shrinks while it decodes).
io::RgbImage thumbnail(const std::string& path, const Info& info, double scale);

/// Pixels of the image by random access (libvips decodes what the region needs; a PNG or
/// JPEG is decoded once, to memory or a temporary file for large ones). Thread-safe.
class RandomAccess {
 public:
  RandomAccess(const std::string& path, const Info& info);
  ~RandomAccess();
  void read_rgb(std::int64_t x, std::int64_t y, std::int64_t w, std::int64_t h,
                std::uint8_t* rgb) const;

 private:
  struct Image;
  std::string path_;
  std::unique_ptr<Image> image_;
};

/// A reader that decodes the image once from top to bottom, keeping only the rows that the
/// current and later reads need: reads must come in order of y (RegionReader::in_order).
std::unique_ptr<RegionReader> band_reader(const std::string& path, const Info& info);

}  // namespace mltool::slide::flat
