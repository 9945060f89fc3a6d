// libFuzzer target: arbitrary bytes as a DICOMweb series' metadata (the JSON array of DICOM JSON
// datasets a server answers .../series/SERIES/metadata with), through the checked readers
// DicomwebSeries reads it with (lib/slide/dicom_json.hpp): each dataset as a header, a VOLUME
// instance's level checked, its frame size and its PixelSpacing. No network: the answer is the
// input. The oracle: every reader returns or throws mltool::Error (an exception of nlohmann's
// or the standard library's, a crash or a sanitizer report is a finding), and what it accepts
// is in the bounds it promises: sizes in range, the frame grid countable, UIDs DICOM UIDs.
//
// Seeds: fuzz/seeds/fuzz_dicom_json (Orthanc's answer for the pydicom-written test series).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "../lib/slide/dicom_json.hpp"
#include "mltool/io/dicomweb.hpp"
#include "mltool/util/error.hpp"

namespace {

namespace slide = mltool::slide;

void check_header(const mltool::io::DicomHeader& h) {
  const bool sized = h.rows >= 0 && h.rows <= slide::kDicomMaxFrameSide && h.columns >= 0 &&
                     h.columns <= slide::kDicomMaxFrameSide && h.total_rows >= 0 &&
                     h.total_rows <= slide::kDicomMaxTotalSide && h.total_columns >= 0 &&
                     h.total_columns <= slide::kDicomMaxTotalSide && h.frames >= 1 &&
                     h.frames <= slide::kDicomMaxFrames;
  if (!sized) std::abort();
  if (!h.sop_instance.empty() && !mltool::io::is_dicom_uid(h.sop_instance)) std::abort();
}

void read(const nlohmann::json& dataset) {
  const std::string where = "http://fuzz/studies/1/series/2";
  const mltool::io::DicomHeader h = slide::dicom_json_header(dataset, where);
  check_header(h);
  slide::dicom_json_pixel_spacing(dataset, where);
  if (h.image_type.size() < 3 || h.image_type[2] != "VOLUME") return;
  slide::check_dicom_level(h, where);
  // A level that passed: its frame grid fits NumberOfFrames, its frame size a size_t.
  const auto across = (h.total_columns + h.columns - 1) / h.columns;
  const auto down = (h.total_rows + h.rows - 1) / h.rows;
  if (across * down > slide::kDicomMaxFrames) std::abort();
  if (slide::dicom_frame_bytes(h, where) !=
      static_cast<std::size_t>(h.rows) * static_cast<std::size_t>(h.columns) * 3)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto doc = nlohmann::json::parse(data, data + size, nullptr, false);
  if (doc.is_discarded() || !doc.is_array()) return 0;  // DicomwebClient::metadata refuses these
  for (const auto& dataset : doc) try {
      read(dataset);
    } catch (const mltool::Error&) {
    }
  return 0;
}
