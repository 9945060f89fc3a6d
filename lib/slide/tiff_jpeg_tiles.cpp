#include "tiff_jpeg_tiles.hpp"

#include <fcntl.h>
#include <tiffio.h>
#include <unistd.h>

#include <cerrno>

#include "mltool/util/error.hpp"

namespace mltool::slide {
namespace {

// libtiff's messages (unknown vendor tags, mostly) are not ours to print: a directory that
// cannot be read simply passes nothing through.
int quiet(TIFF*, void*, const char*, const char*, va_list) { return 1; }

struct TiffCloser {
  void operator()(TIFF* t) const { TIFFClose(t); }
};
using TiffPtr = std::unique_ptr<TIFF, TiffCloser>;

TiffPtr open_quietly(const std::string& file) {
  TIFFOpenOptions* options = TIFFOpenOptionsAlloc();
  TIFFOpenOptionsSetErrorHandlerExtR(options, quiet, nullptr);
  TIFFOpenOptionsSetWarningHandlerExtR(options, quiet, nullptr);
  TiffPtr tiff(TIFFOpenExt(file.c_str(), "rm", options));
  TIFFOpenOptionsFree(options);
  return tiff;
}

template <typename T>
T field(TIFF* tiff, ttag_t tag) {
  T value{};
  TIFFGetFieldDefaulted(tiff, tag, &value);
  return value;
}

// Why the current directory's tiles cannot pass through ("" if they can).
std::string unfit(TIFF* tiff, int tile_size) {
  const auto tw = field<std::uint32_t>(tiff, TIFFTAG_TILEWIDTH);
  const auto th = field<std::uint32_t>(tiff, TIFFTAG_TILELENGTH);
  if (tw != static_cast<std::uint32_t>(tile_size) || th != tw)
    return "the level's TIFF tiles are " + std::to_string(tw) + "x" + std::to_string(th) +
           ", not the tile size " + std::to_string(tile_size);
  if (field<std::uint16_t>(tiff, TIFFTAG_COMPRESSION) != COMPRESSION_JPEG)
    return "the level is not JPEG-compressed (TIFF compression " +
           std::to_string(field<std::uint16_t>(tiff, TIFFTAG_COMPRESSION)) + ")";
  const auto photometric = field<std::uint16_t>(tiff, TIFFTAG_PHOTOMETRIC);
  if (field<std::uint16_t>(tiff, TIFFTAG_PLANARCONFIG) != PLANARCONFIG_CONTIG ||
      field<std::uint16_t>(tiff, TIFFTAG_BITSPERSAMPLE) != 8 ||
      field<std::uint16_t>(tiff, TIFFTAG_SAMPLESPERPIXEL) != 3 ||
      (photometric != PHOTOMETRIC_RGB && photometric != PHOTOMETRIC_YCBCR))
    return "the level's JPEG tiles are not 8-bit RGB or YCbCr";
  return "";
}

}  // namespace

std::unique_ptr<TiffJpegTiles> TiffJpegTiles::open(const Slide& slide, int level, int tile_size,
                                                   std::string& why) {
  const Level& want = slide.geometry().levels[level];
  TiffPtr tiff = open_quietly(slide.file());
  if (!tiff) {
    why = "libtiff cannot open the file";
    return nullptr;
  }
  why = "no tiled TIFF directory is " + std::to_string(want.width) + "x" +
        std::to_string(want.height);
  for (int dir = 0;; ++dir) {
    if (dir > 0 && !TIFFReadDirectory(tiff.get())) return nullptr;
    if (!TIFFIsTiled(tiff.get()) ||
        field<std::uint32_t>(tiff.get(), TIFFTAG_IMAGEWIDTH) != want.width ||
        field<std::uint32_t>(tiff.get(), TIFFTAG_IMAGELENGTH) != want.height)
      continue;
    why = unfit(tiff.get(), tile_size);
    if (!why.empty()) return nullptr;
    const auto colour = field<std::uint16_t>(tiff.get(), TIFFTAG_PHOTOMETRIC) == PHOTOMETRIC_RGB
                            ? io::JpegColour::rgb
                            : io::JpegColour::ycbcr;
    std::unique_ptr<TiffJpegTiles> out(new TiffJpegTiles(want, tile_size, colour));
    out->path_ = slide.path();
    out->directory_ = dir;
    std::uint32_t tables_size = 0;
    const void* tables = nullptr;
    if (TIFFGetField(tiff.get(), TIFFTAG_JPEGTABLES, &tables_size, &tables) && tables)
      out->tables_.assign(static_cast<const char*>(tables), tables_size);
    const std::uint64_t* offsets = nullptr;
    const std::uint64_t* sizes = nullptr;
    const auto count = static_cast<std::size_t>(TIFFNumberOfTiles(tiff.get()));
    if (!TIFFGetField(tiff.get(), TIFFTAG_TILEOFFSETS, &offsets) ||
        !TIFFGetField(tiff.get(), TIFFTAG_TILEBYTECOUNTS, &sizes) || !offsets || !sizes) {
      why = "the level's TIFF directory has no tile offsets";
      return nullptr;
    }
    out->offsets_.assign(offsets, offsets + count);
    out->sizes_.assign(sizes, sizes + count);
    out->fd_ = ::open(slide.file().c_str(), O_RDONLY | O_CLOEXEC);
    if (out->fd_ < 0) throw InputError(sys_message(slide.path(), "cannot open slide", errno));
    why.clear();
    return out;
  }
}

TiffJpegTiles::~TiffJpegTiles() {
  if (fd_ >= 0) ::close(fd_);
}

nlohmann::json TiffJpegTiles::record(std::int64_t passed) const {
  return {{"tiles", passed}, {"tiff_directory", directory_}, {"colour", io::colour_name(colour())}};
}

std::optional<std::string> TiffJpegTiles::tile(std::size_t index) const {
  if (index >= offsets_.size() || sizes_[index] == 0) return std::nullopt;
  const std::string what =
      path_ + ": TIFF directory " + std::to_string(directory_) + " tile " + std::to_string(index);
  return io::standalone_jpeg(read_at(fd_, path_, offsets_[index], sizes_[index], what), tables_,
                             colour(), what);
}

}  // namespace mltool::slide
