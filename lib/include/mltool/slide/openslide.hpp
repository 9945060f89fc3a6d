// A whole-slide image: a pyramid OpenSlide 4 reads (every vendor format, DICOM WSI included)
// or a flat image libvips reads (TIFF without a pyramid, BigTIFF, PNG, JPEG); its levels, its
// µm/px and thread-safe region reads as plain RGB. One Slide may be read from any number of
// threads at once; it is movable, not copyable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mltool/io/dicomweb.hpp"
#include "mltool/io/image_codec.hpp"
#include "mltool/slide/geometry.hpp"

namespace mltool::slide {

namespace flat {
struct Info;
}
class DicomwebSeries;

/// A level of at most this many pixels (48 MiB as RGB) is read whole once and held
/// (Slide::held_level); a larger one is streamed by whoever reads it.
inline constexpr std::int64_t kMaxHeldLevelPx = std::int64_t{16} << 20;

/// An image stored beside the pyramid (OpenSlide's associated images): "label", "macro",
/// "thumbnail", ...
struct AssociatedImage {
  std::string name;
  std::int64_t width = 0, height = 0;
};

class Slide {
 public:
  /// Opens `path`: a file OpenSlide recognises, else a flat TIFF, PNG or JPEG. A directory is
  /// a DICOM WSI series: OpenSlide opens its first .dcm file (by name) and finds the rest of
  /// the series beside it. Throws InputError naming the file for a missing or unreadable
  /// file, a format neither reads ("not a slide format OpenSlide 4.0.1 reads, nor a flat
  /// image ..."), a directory without .dcm files, and a recognised file that OpenSlide fails
  /// to open (its message is quoted). A DICOMweb series URL (io::is_dicomweb_url) is read
  /// over HTTP with `web` (vendor "dicomweb"; io/dicomweb.hpp's errors).
  static Slide open(const std::string& path, const io::DicomwebOptions& web = {});

  Slide(Slide&&) noexcept;
  Slide& operator=(Slide&&) noexcept;
  ~Slide();

  const std::string& path() const { return path_; }
  /// OpenSlide's vendor ("aperio", "hamamatsu", "dicom", "generic-tiff", ...), or for a flat
  /// image "flat-tiff", "flat-png" or "flat-jpeg".
  const std::string& vendor() const { return vendor_; }
  /// The file OpenSlide or libvips opened: path(), or the .dcm file of a DICOM directory.
  const std::string& file() const { return file_; }
  /// A flat image's header (one level, read by libvips), or null for an OpenSlide pyramid.
  const flat::Info* flat_info() const;
  /// The DICOMweb series of a slide given as its URL, or null.
  const DicomwebSeries* dicomweb() const;
  /// Levels and µm/px. The µm/px is openslide.mpp-x/-y or, where OpenSlide gives none
  /// (OpenSlide 3.4 on generic TIFF), the TIFF resolution tags as OpenSlide 4 reads them.
  const SlideGeometry& geometry() const { return geometry_; }
  /// A property value (OpenSlide's, or flat.* for a flat image), or nothing.
  std::optional<std::string> property(const std::string& name) const;
  /// The images stored beside the pyramid, in OpenSlide's order (none for a flat image).
  std::vector<AssociatedImage> associated_images() const;

  /// Reads w × h pixels of `level` whose top-left corner is (x, y) in level-0 pixels into
  /// `rgb` (w * h * 3 bytes, interleaved), composited on white where the slide is
  /// transparent (outside the scanned area). Thread-safe. Throws InputError naming the
  /// file and the region when OpenSlide fails (e.g. a truncated file); after such an error
  /// every later read of this Slide fails too, as OpenSlide's errors are sticky.
  void read_rgb(std::int64_t x, std::int64_t y, int level, std::int64_t w, std::int64_t h,
                std::uint8_t* rgb) const;

  /// The whole of `level` as read_rgb reads it, read once (in strips of whole rows of the
  /// level's tiles, on every allowed core) and held for the Slide's life: the one read of a
  /// small slide that its tissue thumbnail, its QC picture and its µm/px estimate share. Null
  /// for a level over kMaxHeldLevelPx pixels, a level whose downsample is not a whole number
  /// (OpenSlide resamples a fractional level position, so its pixels depend on where each
  /// read starts: those levels are read as before) and a flat image (libvips shrinks those
  /// while it decodes them). Thread-safe; a failed read throws as read_rgb does and holds
  /// nothing.
  const io::RgbImage* held_level(int level) const;

 private:
  struct Handle;
  Slide() = default;
  void read_pyramid();  // levels and µm/px from OpenSlide
  std::string path_;
  std::string file_;
  std::string vendor_;
  SlideGeometry geometry_;
  std::unique_ptr<Handle> handle_;
};

/// Rows of `level` to read at a time where it is read whole (Slide::held_level, thumbnails
/// streamed from a level): whole rows of its tiles (openslide.level[N].tile-height, where the
/// slide says) of about 256 rows, fewer where that would pass 4 Mi pixels.
std::int64_t strip_rows(const Slide& slide, int level);

/// "OpenSlide 4.0.1": the OpenSlide this process reads slides with.
std::string openslide_version();

/// "libcurl 7.88.1": what reads DICOMweb slides (their frames are decoded by libjpeg-turbo).
std::string dicomweb_reader_version();

/// A property's value as a finite number, or nothing (absent, not a number, out of range).
std::optional<double> property_number(const std::optional<std::string>& text);

/// µm per pixel from TIFF resolution properties (tiff.XResolution + tiff.ResolutionUnit
/// "centimeter" or "inch"), or nothing for another unit, a non-positive value or a
/// placeholder (72, 96 or 300 dpi, which converters write when they know nothing).
std::optional<double> mpp_from_tiff_resolution(const std::optional<std::string>& resolution,
                                               const std::optional<std::string>& unit);

/// Converts OpenSlide's premultiplied ARGB pixels to RGB composited on white:
/// channel + (255 - alpha), exact for opaque and fully transparent pixels.
void argb_to_rgb_on_white(const std::uint32_t* argb, std::size_t pixels, std::uint8_t* rgb);

}  // namespace mltool::slide
