// A DICOM WSI level's own JPEG frames (OwnJpegTiles for OpenSlide's dicom vendor; not a public
// header). A level is one VL Whole Slide Microscopy Image instance (a .dcm file of the
// series) whose frames are JPEG baseline files, TILED_FULL: row-major over the total pixel
// matrix in Columns × Rows tiles, edge frames padded. OpenSlide decodes each frame alone
// (libdicom reads it, openslide-vendor-dicom.c decodes it as YCbCr for PhotometricInterpretation
// YBR_FULL_422 and as RGB for RGB), so a whole frame, marked with that colour space where its
// own markers do not say it (io::colour_marked_jpeg), decodes to what read_region gives.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "mltool/io/dicom.hpp"
#include "own_jpeg_tiles.hpp"

namespace mltool::slide {

/// Why the frames of instance `h` cannot pass through as tiles of `tile` pixels ("" if they
/// can: then `colour` is how they code colour). Local series and DICOMweb ones alike.
std::string dicom_frames_unfit(const io::DicomHeader& h, std::int64_t tile, io::JpegColour& colour);

class DicomJpegFrames : public OwnJpegTiles {
 public:
  /// The instance of `slide`'s series (the .dcm files beside the one OpenSlide opened, with its
  /// SeriesInstanceUID, ImageType VOLUME) whose total pixel matrix is `level`, if its frames
  /// can pass through as tiles of `tile_size` pixels: JPEG baseline, TILED_FULL, one focal
  /// plane and optical path, not a concatenation, tile_size × tile_size frames, 8-bit
  /// YBR_FULL_422 or RGB. Otherwise null, and `why` says what differs (a file mltool's DICOM
  /// reader cannot parse, too, with its FormatError: OpenSlide reads such a slide as usual).
  static std::unique_ptr<DicomJpegFrames> open(const Slide& slide, int level, int tile_size,
                                               std::string& why);
  ~DicomJpegFrames() override;

  /// {"tiles", "dicom_file": the instance's file name in the series directory,
  /// "dicom_instance": its SOPInstanceUID, "colour"}.
  nlohmann::json record(std::int64_t passed) const override;

 private:
  DicomJpegFrames(const Level& level, int tile_size, io::JpegColour colour)
      : OwnJpegTiles(level, tile_size, colour) {}
  std::optional<std::string> tile(std::size_t index) const override;
  std::string path_, instance_;
  int fd_ = -1;
  io::DicomFrames frames_;
};

}  // namespace mltool::slide
