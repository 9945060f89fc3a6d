// The metadata of a DICOMweb series' instances (DICOM JSON, PS3.18 F.2) read as the header
// io::read_dicom_header gives for a local file (not a public header; dicomweb_slide.cpp reads a
// series with it, fuzz/fuzz_dicom_json.cpp fuzzes it). What a server says is untrusted: every
// value is read by a checked reader that throws a FormatError naming the series URL, the
// instance, the tag ("(0028,0010) Rows") and the value, for a value of the wrong type (a
// string where a number goes, a non-numeric IS, a fraction), out of the range of its value
// representation, or out of what mltool can read (a frame grid of more frames than
// NumberOfFrames can count); every UID must match DICOM's UID grammar (io::is_dicom_uid).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "mltool/io/dicom.hpp"

namespace mltool::slide {

/// A data element: its key in DICOM JSON ("00280010") and its name in messages.
struct DicomTag {
  const char* key;
  const char* name;  ///< "(0028,0010) Rows"
};

/// Rows and Columns are US: a frame is at most 65535 pixels a side.
inline constexpr std::int64_t kDicomMaxFrameSide = 65535;
/// TotalPixelMatrixColumns/Rows are UL: at most 2^32 - 1 pixels a side.
inline constexpr std::int64_t kDicomMaxTotalSide = 4294967295;
/// NumberOfFrames is an IS (at most 2^31 - 1): the frame grid that tiles a level's total pixel
/// matrix (columns across times rows down) holds at most that many frames.
inline constexpr std::int64_t kDicomMaxFrames = 2147483647;

/// Whether `syntax` is an uncompressed transfer syntax (explicit or implicit VR little endian).
bool is_uncompressed_syntax(const std::string& syntax);

/// Element `tag`'s Value array in `dataset`, or null when the element or its value is absent
/// (or empty). FormatError "<where>: <tag> ..." when the element is no JSON object or its Value
/// no array.
const nlohmann::json* dicom_json_values(const nlohmann::json& dataset, const DicomTag& tag,
                                        const std::string& where);

/// The first value of `tag` as text ("" when absent). FormatError when it is not a string.
std::string dicom_json_text(const nlohmann::json& dataset, const DicomTag& tag,
                            const std::string& where);

/// The first value of `tag` as an integer in [lo, hi] (`absent` when there is none): a JSON
/// integer, a float that is a whole number, or text holding a decimal integer (IS). FormatError
/// naming the tag and the value for anything else or a value out of range.
std::int64_t dicom_json_integer(const nlohmann::json& dataset, const DicomTag& tag,
                                std::int64_t absent, std::int64_t lo, std::int64_t hi,
                                const std::string& where);

/// `value` (a value of `tag`) as a finite number: a JSON number, or text holding a decimal
/// number (DS). FormatError naming the tag and the value for anything else.
double dicom_json_number(const nlohmann::json& value, const DicomTag& tag,
                         const std::string& where);

/// An instance's metadata as a header: the fields that say how its frames are laid out
/// (io::DicomHeader; `path` is "instance SOP"). `where` (the series URL) is named in errors.
/// Every value checked as above: Rows and Columns in 1..kDicomMaxFrameSide, the totals in
/// 1..kDicomMaxTotalSide, NumberOfFrames in 1..kDicomMaxFrames; the UIDs (SOPInstanceUID,
/// SeriesInstanceUID, SOPClassUID, transfer syntax) match DICOM's UID grammar.
io::DicomHeader dicom_json_header(const nlohmann::json& dataset, const std::string& where);

/// Checks that a VOLUME instance's header describes a level mltool can read: its frame size
/// and total pixel matrix present, and its frame grid of at most kDicomMaxFrames frames.
/// InputError naming `where` and the instance otherwise.
void check_dicom_level(const io::DicomHeader& h, const std::string& where);

/// The bytes of one decoded frame of `h`: Rows × Columns × 3 (8-bit RGB), multiplied in
/// checked size_t arithmetic. FormatError naming `where` if it does not fit.
std::size_t dicom_frame_bytes(const io::DicomHeader& h, const std::string& where);

/// PixelSpacing (mm: row spacing, column spacing) of an instance: its shared functional
/// groups' pixel measures, else a top-level element; nothing when absent or not two values.
/// FormatError for a value that is not a number.
std::optional<std::pair<double, double>> dicom_json_pixel_spacing(const nlohmann::json& dataset,
                                                                  const std::string& where);

}  // namespace mltool::slide
