// Where tile pixels come from. OpenSlide reads every format, but each read_region composites
// through cairo with the SATURATE operator (pixman's slow generic path): on a plain tiled
// TIFF it spends more time compositing than decoding. For the TIFF pyramids whose levels
// OpenSlide itself reads 1:1 from TIFF pages (generic-tiff, aperio), the same pixels can be
// decoded by libvips' TIFF loader (libtiff + libjpeg, what `vips dzsave` uses) at about
// twice the speed. The fast reader checks itself against OpenSlide on the first region it
// serves and steps aside if they disagree.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mltool/slide/openslide.hpp"
#include "mltool/util/options.hpp"

namespace mltool::slide {

/// Reads RGB regions of one pyramid level; thread-safe.
class RegionReader {
 public:
  virtual ~RegionReader() = default;
  /// w × h pixels of the level at level-0 position (x, y), interleaved RGB on white.
  virtual void read_rgb(std::int64_t x, std::int64_t y, std::int64_t w, std::int64_t h,
                        std::uint8_t* rgb) = 0;
  /// "openslide", "libvips-tiff" or "libvips-flat", for logs and the slide record.
  virtual const char* name() const = 0;
  /// The version of the library behind name(), for the slide record (reader_version).
  virtual std::string version() const = 0;
  /// True when reads must come in order of y (a flat image decoded once, top to bottom):
  /// callers then issue reads in their tiles' row-major order.
  virtual bool in_order() const { return false; }
};

/// Which reader to use.
enum class ReaderChoice {
  automatic,  ///< libvips' TIFF decoder where it reads the level exactly, else OpenSlide
  openslide,  ///< always OpenSlide
};
/// --reader's names: auto, openslide.
extern const util::EnumNames<ReaderChoice> kReaderChoices;

/// A reader of `level` of `slide`; `slide` must outlive it.
std::unique_ptr<RegionReader> make_region_reader(const Slide& slide, int level,
                                                 ReaderChoice choice);

}  // namespace mltool::slide
