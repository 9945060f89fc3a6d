#include "dicom_jpeg_frames.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <vector>

#include "mltool/util/error.hpp"

namespace mltool::slide {
namespace {

namespace fs = std::filesystem;

// A transfer syntax's name, for the reason a level does not pass through.
std::string syntax_name(const std::string& uid) {
  static const std::pair<const char*, const char*> names[] = {
      {"1.2.840.10008.1.2", "uncompressed"},       {"1.2.840.10008.1.2.1", "uncompressed"},
      {"1.2.840.10008.1.2.4.51", "JPEG extended"}, {"1.2.840.10008.1.2.4.57", "JPEG lossless"},
      {"1.2.840.10008.1.2.4.70", "JPEG lossless"}, {"1.2.840.10008.1.2.4.80", "JPEG-LS"},
      {"1.2.840.10008.1.2.4.81", "JPEG-LS"},       {"1.2.840.10008.1.2.4.90", "JPEG 2000 lossless"},
      {"1.2.840.10008.1.2.4.91", "JPEG 2000"},     {"1.2.840.10008.1.2.4.201", "HTJ2K lossless"},
      {"1.2.840.10008.1.2.4.203", "HTJ2K"},
  };
  for (const auto& [id, name] : names)
    if (uid == id) return std::string(name) + ", transfer syntax " + uid;
  return "transfer syntax " + uid;
}

// The series' files: `first` (the one OpenSlide opened), then the directory's other regular
// files by name (OpenSlide looks at every file beside it).
std::vector<std::string> series_candidates(const std::string& first) {
  std::vector<std::string> others;
  std::error_code ec;
  const fs::path dir = fs::path(first).parent_path();
  for (fs::directory_iterator it(dir.empty() ? fs::path(".") : dir, ec), end; !ec && it != end;
       it.increment(ec))
    if (it->is_regular_file(ec) && it->path().filename() != fs::path(first).filename())
      others.push_back(it->path().string());
  std::sort(others.begin(), others.end());
  others.insert(others.begin(), first);
  return others;
}

// The header of the series' instance of `level`, or nothing (`why` says why).
std::optional<io::DicomHeader> level_instance(const Slide& slide, const Level& level,
                                              std::string& why) {
  std::string series, unread;
  for (const std::string& path : series_candidates(slide.file())) {
    io::DicomHeader h;
    try {
      h = io::read_dicom_header(path);
    } catch (const Error& e) {
      why = e.what();
      if (path == slide.file()) return std::nullopt;
      if (unread.empty()) unread = why;  // not DICOM, or one mltool's reader cannot parse
      continue;
    }
    if (path == slide.file()) series = h.series_instance;
    if (!h.dataset_read || h.series_instance != series || h.image_type.size() < 3 ||
        h.image_type[2] != "VOLUME" || h.total_columns != level.width ||
        h.total_rows != level.height)
      continue;
    if (!h.concatenation.empty()) {
      why = "the level is a concatenation of DICOM instances (" +
            fs::path(path).filename().string() + ", ...)";
      return std::nullopt;
    }
    return h;
  }
  why = "no DICOM instance of the series beside " + slide.file() + " is the level's " +
        std::to_string(level.width) + "x" + std::to_string(level.height) + " pixels" +
        (unread.empty() ? "" : " (a file mltool cannot read: " + unread + ")");
  return std::nullopt;
}

}  // namespace

// Why `h`'s frames cannot pass through as tiles of `tile` pixels ("" if they can); `colour`
// is how they code colour.
std::string dicom_frames_unfit(const io::DicomHeader& h, std::int64_t tile,
                               io::JpegColour& colour) {
  const std::string file = fs::path(h.path).filename().string();
  if (h.transfer_syntax != io::kDicomJpegBaseline)
    return "the level's DICOM instance " + file + " is not JPEG baseline (" +
           syntax_name(h.transfer_syntax) + ")";
  if (!h.encapsulated) return "the level's DICOM instance " + file + " has no encapsulated frames";
  if (h.organization != "TILED_FULL")
    return "the level's DICOM frames are " +
           (h.organization.empty() ? std::string("TILED_SPARSE (no DimensionOrganizationType)")
                                   : h.organization) +
           ", not TILED_FULL";
  if (h.focal_planes != 1 || h.optical_paths != 1)
    return "the level has " + std::to_string(h.focal_planes) + " focal planes and " +
           std::to_string(h.optical_paths) + " optical paths, not one";
  if (h.columns != tile || h.rows != tile)
    return "the level's DICOM frames are " + std::to_string(h.columns) + "x" +
           std::to_string(h.rows) + ", not the tile size " + std::to_string(tile);
  const std::int64_t grid =
      ((h.total_columns + tile - 1) / tile) * ((h.total_rows + tile - 1) / tile);
  if (h.frames != grid)
    return "the level's DICOM instance has " + std::to_string(h.frames) +
           " frames, not one per tile of its " + std::to_string(grid) + "-tile grid";
  if (h.samples != 3 || h.bits_allocated != 8 || h.planar != 0)
    return "the level's DICOM frames are not 8-bit, three-component, interleaved";
  if (h.photometric == "YBR_FULL_422")
    colour = io::JpegColour::ycbcr;
  else if (h.photometric == "RGB")
    colour = io::JpegColour::rgb;
  else
    return "the level's DICOM frames are " + h.photometric + ", not YBR_FULL_422 or RGB";
  return "";
}

std::unique_ptr<DicomJpegFrames> DicomJpegFrames::open(const Slide& slide, int level, int tile_size,
                                                       std::string& why) {
  const Level& want = slide.geometry().levels[level];
  const auto header = level_instance(slide, want, why);
  if (!header) return nullptr;
  io::JpegColour colour = io::JpegColour::ycbcr;
  why = dicom_frames_unfit(*header, tile_size, colour);
  if (!why.empty()) return nullptr;
  std::unique_ptr<DicomJpegFrames> out(new DicomJpegFrames(want, tile_size, colour));
  try {
    out->frames_ = io::read_dicom_frames(*header);
  } catch (const FormatError& e) {
    why = e.what();
    return nullptr;
  }
  out->path_ = header->path;
  out->instance_ = header->sop_instance;
  out->fd_ = ::open(out->path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (out->fd_ < 0) throw InputError(sys_message(out->path_, "cannot open", errno));
  return out;
}

DicomJpegFrames::~DicomJpegFrames() {
  if (fd_ >= 0) ::close(fd_);
}

nlohmann::json DicomJpegFrames::record(std::int64_t passed) const {
  return {{"tiles", passed},
          {"dicom_file", fs::path(path_).filename().string()},
          {"dicom_instance", instance_},
          {"colour", io::colour_name(colour())}};
}

std::optional<std::string> DicomJpegFrames::tile(std::size_t index) const {
  if (index >= frames_.count()) return std::nullopt;
  const std::string what = path_ + ": frame " + std::to_string(index + 1);
  std::string jpeg;
  for (std::size_t k = frames_.first[index]; k < frames_.first[index + 1]; ++k)
    jpeg += read_at(fd_, path_, frames_.offset[k], frames_.length[k],
                    what + " (fragment at byte " + std::to_string(frames_.offset[k]) + ")");
  if (jpeg.empty()) return std::nullopt;
  return io::colour_marked_jpeg(std::move(jpeg), colour(), what);
}

}  // namespace mltool::slide
