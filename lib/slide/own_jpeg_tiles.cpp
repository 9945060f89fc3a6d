#include "own_jpeg_tiles.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>

#include "dicom_jpeg_frames.hpp"
#include "dicomweb_slide.hpp"
#include "mltool/util/error.hpp"
#include "tiff_jpeg_tiles.hpp"

namespace mltool::slide {

std::unique_ptr<OwnJpegTiles> OwnJpegTiles::open(const Slide& slide, int level, int tile_size,
                                                 std::string& why) {
  if (slide.vendor() == "generic-tiff" || slide.vendor() == "aperio")
    return TiffJpegTiles::open(slide, level, tile_size, why);
  if (slide.vendor() == "dicom") return DicomJpegFrames::open(slide, level, tile_size, why);
  if (const DicomwebSeries* series = slide.dicomweb())
    return DicomwebFrames::open(*series, level, tile_size, why);
  why = "the slide is " + slide.vendor() +
        ", not a TIFF pyramid (generic-tiff, aperio) or a DICOM WSI series";
  return nullptr;
}

OwnJpegTiles::OwnJpegTiles(const Level& level, int tile_size, io::JpegColour colour)
    : colour_(colour),
      downsample_(level.downsample),
      width_(level.width),
      height_(level.height),
      tile_(tile_size),
      across_((level.width + tile_size - 1) / tile_size) {}

std::optional<std::string> OwnJpegTiles::jpeg_at(std::int64_t x, std::int64_t y) const {
  const auto index = index_at(x, y);
  if (!index) return std::nullopt;
  return tile(*index);
}

std::optional<std::size_t> OwnJpegTiles::index_at(std::int64_t x, std::int64_t y) const {
  // Level pixels as OpenSlide's read_region takes them (x / downsample, as a double); a
  // fraction would make it resample.
  const double lx = static_cast<double>(x) / downsample_;
  const double ly = static_cast<double>(y) / downsample_;
  if (lx != std::floor(lx) || ly != std::floor(ly)) return std::nullopt;
  const auto px = static_cast<std::int64_t>(lx), py = static_cast<std::int64_t>(ly);
  if (px < 0 || py < 0 || px % tile_ != 0 || py % tile_ != 0 || px + tile_ > width_ ||
      py + tile_ > height_)
    return std::nullopt;
  return static_cast<std::size_t>((py / tile_) * across_ + px / tile_);
}

std::string OwnJpegTiles::read_at(int fd, const std::string& path, std::uint64_t offset,
                                  std::uint64_t size, const std::string& what) {
  std::string raw(size, '\0');
  std::size_t done = 0;
  while (done < raw.size()) {
    const ssize_t n =
        ::pread(fd, raw.data() + done, raw.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(sys_message(path, "reading " + what, errno));
    if (n == 0) throw InputError(what + ": the file ends inside it (truncated?)");
    done += static_cast<std::size_t>(n);
  }
  return raw;
}

}  // namespace mltool::slide
