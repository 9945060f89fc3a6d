// Checked readers of DICOM JSON metadata (dicom_json.hpp).
#include "dicom_json.hpp"

#include <charconv>
#include <cmath>
#include <limits>

#include "mltool/io/dicomweb.hpp"
#include "mltool/util/error.hpp"

namespace mltool::slide {
namespace {

using nlohmann::json;

constexpr std::int64_t kMaxUs = 65535;       // US: unsigned 16 bits
constexpr std::int64_t kMaxUl = 4294967295;  // UL: unsigned 32 bits

constexpr DicomTag kSopClass{"00080016", "(0008,0016) SOPClassUID"};
constexpr DicomTag kSopInstance{"00080018", "(0008,0018) SOPInstanceUID"};
constexpr DicomTag kSeriesInstance{"0020000E", "(0020,000E) SeriesInstanceUID"};
constexpr DicomTag kImageType{"00080008", "(0008,0008) ImageType"};
constexpr DicomTag kTransferSyntax{"00083002", "(0008,3002) AvailableTransferSyntaxUID"};
constexpr DicomTag kPhotometric{"00280004", "(0028,0004) PhotometricInterpretation"};
constexpr DicomTag kOrganization{"00209311", "(0020,9311) DimensionOrganizationType"};
constexpr DicomTag kConcatenation{"00209161", "(0020,9161) ConcatenationUID"};
constexpr DicomTag kSamples{"00280002", "(0028,0002) SamplesPerPixel"};
constexpr DicomTag kBitsAllocated{"00280100", "(0028,0100) BitsAllocated"};
constexpr DicomTag kPlanar{"00280006", "(0028,0006) PlanarConfiguration"};
constexpr DicomTag kRows{"00280010", "(0028,0010) Rows"};
constexpr DicomTag kColumns{"00280011", "(0028,0011) Columns"};
constexpr DicomTag kFrames{"00280008", "(0028,0008) NumberOfFrames"};
constexpr DicomTag kTotalColumns{"00480006", "(0048,0006) TotalPixelMatrixColumns"};
constexpr DicomTag kTotalRows{"00480007", "(0048,0007) TotalPixelMatrixRows"};
constexpr DicomTag kFocalPlanes{"00480303", "(0048,0303) TotalPixelMatrixFocalPlanes"};
constexpr DicomTag kOpticalPaths{"00480302", "(0048,0302) NumberOfOpticalPaths"};
constexpr DicomTag kSharedGroups{"52009229", "(5200,9229) SharedFunctionalGroupsSequence"};
constexpr DicomTag kPixelMeasures{"00289110", "(0028,9110) PixelMeasuresSequence"};
constexpr DicomTag kPixelSpacing{"00280030", "(0028,0030) PixelSpacing"};

// A value as messages show it: JSON, cut short (a server may send megabytes).
std::string shown(const json& value) {
  std::string s = value.dump(-1, ' ', true, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

[[noreturn]] void refuse(const std::string& where, const DicomTag& tag, const json& value,
                         const std::string& expected) {
  throw FormatError(where + ": " + tag.name + " is " + shown(value) + ", not " + expected);
}

std::string range(std::int64_t lo, std::int64_t hi) {
  return std::to_string(lo) + " to " + std::to_string(hi);
}

// DICOM's padding and the blanks IS and DS allow around a number.
std::string trimmed(const std::string& s) {
  const auto a = s.find_first_not_of(' ');
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(' ') - a + 1);
}

// An IS or DS string trimmed and without a leading '+' (from_chars takes none), or nothing
// when no number is left.
std::optional<std::string> number_text(const std::string& text) {
  std::string s = trimmed(text);
  if (!s.empty() && s[0] == '+') s.erase(0, 1);
  if (s.empty() || s[0] == '+') return std::nullopt;
  return s;
}

// A decimal integer string (IS: optional sign, digits), or nothing.
std::optional<std::int64_t> parse_is(const std::string& text) {
  const auto t = number_text(text);
  if (!t) return std::nullopt;
  const std::string& s = *t;
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// A decimal number string (DS), finite, or nothing.
std::optional<double> parse_ds(const std::string& text) {
  const auto t = number_text(text);
  if (!t) return std::nullopt;
  const std::string& s = *t;
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// A JSON number as an integer in [lo, hi], or nothing (a fraction, out of range, not finite).
std::optional<std::int64_t> whole_number(const json& v, std::int64_t lo, std::int64_t hi) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi) || (lo > 0 && u < static_cast<std::uint64_t>(lo)))
      return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    return i >= lo && i <= hi ? std::optional(i) : std::nullopt;
  }
  // A float: compared as a double before any conversion (a cast of one above 2^63 is
  // undefined). The bounds are far below 2^53, so they convert exactly.
  const auto d = v.get<double>();
  if (!std::isfinite(d) || d != std::trunc(d) || d < static_cast<double>(lo) ||
      d > static_cast<double>(hi))
    return std::nullopt;
  return static_cast<std::int64_t>(d);
}

// A UID element: absent (""), or text matching DICOM's UID grammar.
std::string uid(const json& dataset, const DicomTag& tag, const std::string& where) {
  std::string s = dicom_json_text(dataset, tag, where);
  // UIDs are padded to even length with NUL, which DICOM JSON should strip; some servers don't.
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  if (!s.empty() && !io::is_dicom_uid(s))
    refuse(where, tag, json(s), "a DICOM UID (digits and dots, at most 64 characters)");
  return s;
}

// The fields of a header that are numbers, each in its value representation's range.
void read_numbers(const json& dataset, const std::string& where, io::DicomHeader& h) {
  const auto us = [&](const DicomTag& tag, std::int64_t absent, std::int64_t lo) {
    return dicom_json_integer(dataset, tag, absent, lo, kMaxUs, where);
  };
  h.samples = static_cast<int>(us(kSamples, 0, 0));
  h.bits_allocated = static_cast<int>(us(kBitsAllocated, 0, 0));
  h.planar = static_cast<int>(us(kPlanar, 0, 0));
  h.rows = dicom_json_integer(dataset, kRows, 0, 1, kDicomMaxFrameSide, where);
  h.columns = dicom_json_integer(dataset, kColumns, 0, 1, kDicomMaxFrameSide, where);
  h.frames = dicom_json_integer(dataset, kFrames, 1, 1, kDicomMaxFrames, where);
  h.total_columns = dicom_json_integer(dataset, kTotalColumns, 0, 1, kDicomMaxTotalSide, where);
  h.total_rows = dicom_json_integer(dataset, kTotalRows, 0, 1, kDicomMaxTotalSide, where);
  h.focal_planes = dicom_json_integer(dataset, kFocalPlanes, 1, 1, kMaxUl, where);
  h.optical_paths = dicom_json_integer(dataset, kOpticalPaths, 1, 1, kMaxUl, where);
}

// The first item of sequence `tag` (an object), or null.
const json* first_item(const json& dataset, const DicomTag& tag, const std::string& where) {
  const json* v = dicom_json_values(dataset, tag, where);
  if (!v) return nullptr;
  if (!(*v)[0].is_object()) refuse(where, tag, (*v)[0], "a sequence item (a JSON object)");
  return &(*v)[0];
}

}  // namespace

bool is_uncompressed_syntax(const std::string& syntax) {
  return syntax == "1.2.840.10008.1.2.1" || syntax == "1.2.840.10008.1.2";
}

const json* dicom_json_values(const json& dataset, const DicomTag& tag, const std::string& where) {
  const auto it = dataset.find(tag.key);
  if (it == dataset.end()) return nullptr;
  if (!it->is_object()) refuse(where, tag, *it, "a DICOM JSON element (a JSON object)");
  const auto v = it->find("Value");
  if (v == it->end()) return nullptr;
  if (!v->is_array()) refuse(where, tag, *v, "a Value array");
  return v->empty() || (*v)[0].is_null() ? nullptr : &*v;
}

std::string dicom_json_text(const json& dataset, const DicomTag& tag, const std::string& where) {
  const json* v = dicom_json_values(dataset, tag, where);
  if (!v) return "";
  if (!(*v)[0].is_string()) refuse(where, tag, (*v)[0], "text");
  return (*v)[0].get<std::string>();
}

std::int64_t dicom_json_integer(const json& dataset, const DicomTag& tag, std::int64_t absent,
                                std::int64_t lo, std::int64_t hi, const std::string& where) {
  const json* v = dicom_json_values(dataset, tag, where);
  if (!v) return absent;
  const json& value = (*v)[0];
  std::optional<std::int64_t> got;
  if (value.is_number()) {
    got = whole_number(value, lo, hi);
  } else if (value.is_string()) {
    got = parse_is(value.get<std::string>());
    if (got && (*got < lo || *got > hi)) got.reset();
  }
  if (!got) refuse(where, tag, value, "an integer from " + range(lo, hi));
  return *got;
}

double dicom_json_number(const json& value, const DicomTag& tag, const std::string& where) {
  std::optional<double> got;
  if (value.is_number()) {
    got = value.get<double>();
    if (!std::isfinite(*got)) got.reset();
  } else if (value.is_string()) {
    got = parse_ds(value.get<std::string>());
  }
  if (!got) refuse(where, tag, value, "a decimal number");
  return *got;
}

io::DicomHeader dicom_json_header(const json& dataset, const std::string& where) {
  if (!dataset.is_object())
    throw FormatError(where + ": an instance's metadata is " + shown(dataset) +
                      ", not a DICOM JSON dataset (a JSON object)");
  io::DicomHeader h;
  h.sop_instance = uid(dataset, kSopInstance, where + ": an instance");
  const std::string at = where + ": instance " + h.sop_instance;
  h.sop_class = uid(dataset, kSopClass, at);
  h.path = "instance " + h.sop_instance;
  h.series_instance = uid(dataset, kSeriesInstance, at);
  if (const json* v = dicom_json_values(dataset, kImageType, at))
    for (const auto& part : *v) {
      if (!part.is_string() && !part.is_null()) refuse(at, kImageType, part, "text");
      h.image_type.push_back(part.is_string() ? part.get<std::string>() : "");
    }
  h.transfer_syntax = uid(dataset, kTransferSyntax, at);  // where given
  h.encapsulated = !h.transfer_syntax.empty() && !is_uncompressed_syntax(h.transfer_syntax);
  h.dataset_read = true;
  h.photometric = trimmed(dicom_json_text(dataset, kPhotometric, at));
  h.organization = trimmed(dicom_json_text(dataset, kOrganization, at));
  h.concatenation = uid(dataset, kConcatenation, at);
  read_numbers(dataset, at, h);
  return h;
}

void check_dicom_level(const io::DicomHeader& h, const std::string& where) {
  const std::string at = where + ": VOLUME instance " + h.sop_instance;
  if (h.total_columns <= 0 || h.total_rows <= 0 || h.columns <= 0 || h.rows <= 0)
    throw InputError(at + " has no TotalPixelMatrixColumns/Rows or frame size in its metadata");
  // Both at most 2^32 (totals of at most 2^32 - 1, frames at least 1 pixel): no overflow.
  const auto across = static_cast<std::uint64_t>((h.total_columns + h.columns - 1) / h.columns);
  const auto down = static_cast<std::uint64_t>((h.total_rows + h.rows - 1) / h.rows);
  if (across > static_cast<std::uint64_t>(kDicomMaxFrames) / down)
    throw InputError(at + ": a total pixel matrix of " + std::to_string(h.total_columns) + " x " +
                     std::to_string(h.total_rows) + " in frames of " + std::to_string(h.columns) +
                     " x " + std::to_string(h.rows) + " takes " + std::to_string(across) + " x " +
                     std::to_string(down) + " frames, more than NumberOfFrames can count (" +
                     std::to_string(kDicomMaxFrames) + ")");
}

std::size_t dicom_frame_bytes(const io::DicomHeader& h, const std::string& where) {
  const auto fail = [&] {
    return FormatError(where + ": a frame of Rows " + std::to_string(h.rows) + " x Columns " +
                       std::to_string(h.columns) + " x 3 bytes does not fit in memory");
  };
  if (h.rows <= 0 || h.columns <= 0) throw fail();
  const auto rows = static_cast<std::size_t>(h.rows), columns = static_cast<std::size_t>(h.columns);
  const std::size_t most = std::numeric_limits<std::size_t>::max();
  if (rows > most / columns || rows * columns > most / 3) throw fail();
  return rows * columns * 3;
}

std::optional<std::pair<double, double>> dicom_json_pixel_spacing(const json& dataset,
                                                                  const std::string& where) {
  const json* found = nullptr;
  if (const json* shared = first_item(dataset, kSharedGroups, where))
    if (const json* measures = first_item(*shared, kPixelMeasures, where))
      found = dicom_json_values(*measures, kPixelSpacing, where);
  if (!found) found = dicom_json_values(dataset, kPixelSpacing, where);
  if (!found || found->size() != 2) return std::nullopt;
  return std::pair{dicom_json_number((*found)[0], kPixelSpacing, where),
                   dicom_json_number((*found)[1], kPixelSpacing, where)};
}

}  // namespace mltool::slide
