#include "mltool/io/jpeg_tiff.hpp"

#include <cstdint>
#include <cstring>
#include <optional>

#include "mltool/util/error.hpp"

namespace mltool::io {
namespace {

constexpr unsigned char kMarker = 0xFF;
constexpr unsigned char kSoi = 0xD8, kEoi = 0xD9, kSos = 0xDA, kApp0 = 0xE0, kApp14 = 0xEE;

// JFIF 1.01, no units, 1:1 pixel aspect, no thumbnail: says YCbCr (JFIF implies it).
constexpr unsigned char kJfif[] = {0xFF, 0xE0, 0x00, 0x10, 'J',  'F',  'I',  'F',  0x00,
                                   0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00};
// Adobe APP14, version 100, no flags, transform 0: the components are R, G, B as they are.
constexpr unsigned char kAdobeRgb[] = {0xFF, 0xEE, 0x00, 0x0E, 'A',  'd',  'o',  'b',
                                       'e',  0x00, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00};

bool starts_with(std::string_view body, const char* tag) {
  return body.size() >= std::strlen(tag) && body.compare(0, std::strlen(tag), tag) == 0;
}

// A JFIF or Adobe segment, which says how to read colour: ours replaces it.
bool colour_segment(unsigned char marker, std::string_view body) {
  return (marker == kApp0 && starts_with(body, "JFIF")) ||
         (marker == kApp14 && starts_with(body, "Adobe"));
}

struct Segment {
  unsigned char marker;
  std::size_t at, end;    // the marker code's byte (after 0xFF and fill bytes), one past the end
  std::string_view body;  // after the length; empty for EOI
};

// The segment at `pos` of `jpeg`: FormatError "<what>: ..." where there is none.
Segment segment_at(std::string_view jpeg, std::size_t pos, const std::string& what) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(jpeg[i]); };
  if (pos + 2 > jpeg.size() || byte(pos) != kMarker)
    throw FormatError(what + ": malformed JPEG stream at byte " + std::to_string(pos) +
                      " (expected a marker)");
  std::size_t at = pos + 1;
  while (at < jpeg.size() && byte(at) == kMarker) ++at;  // fill bytes
  if (at >= jpeg.size()) throw FormatError(what + ": JPEG stream ends inside a marker");
  if (byte(at) == kEoi) return {kEoi, at, at + 1, {}};
  if (at + 3 > jpeg.size()) throw FormatError(what + ": JPEG segment truncated");
  const std::size_t length = (std::size_t{byte(at + 1)} << 8) | byte(at + 2);
  if (length < 2 || at + 1 + length > jpeg.size())
    throw FormatError(what + ": JPEG segment at byte " + std::to_string(pos) +
                      " runs past the end");
  return {byte(at), at, at + 1 + length, jpeg.substr(at + 3, length - 2)};
}

void check_soi(std::string_view jpeg, const std::string& what) {
  if (jpeg.size() < 4 || static_cast<unsigned char>(jpeg[0]) != kMarker ||
      static_cast<unsigned char>(jpeg[1]) != kSoi)
    throw FormatError(what + ": not a JPEG stream (no SOI marker)");
}

// Appends the segments of `jpeg` after its SOI to `out`, colour segments left out. With
// `tables_only`, stops at EOI (the JPEGTables tag); otherwise copies everything from the
// first SOS on verbatim (the scan and what follows it, EOI included).
void copy_segments(std::string_view jpeg, bool tables_only, std::string& out,
                   const std::string& what) {
  check_soi(jpeg, what);
  for (std::size_t pos = 2;;) {
    const Segment s = segment_at(jpeg, pos, what);
    if (s.marker == kEoi) {
      if (tables_only) return;
      throw FormatError(what + ": JPEG stream ends before its scan");
    }
    if (s.marker == kSos && !tables_only) {
      out.append(jpeg.substr(pos));
      return;
    }
    if (!colour_segment(s.marker, s.body)) {
      out.push_back(static_cast<char>(kMarker));
      out.append(jpeg.substr(s.at, s.end - s.at));
    }
    pos = s.end;
  }
}

// A start-of-frame marker (SOF0-15 but DHT, JPG and DAC).
bool is_sof(unsigned char marker) {
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

}  // namespace

std::optional<JpegColour> implied_colour(std::string_view jpeg, const std::string& what) {
  check_soi(jpeg, what);
  bool jfif = false;
  int adobe = -1;
  std::string ids;
  for (std::size_t pos = 2;;) {
    const Segment s = segment_at(jpeg, pos, what);
    if (s.marker == kEoi || s.marker == kSos) break;
    if (s.marker == kApp0 && starts_with(s.body, "JFIF")) jfif = true;
    if (s.marker == kApp14 && starts_with(s.body, "Adobe") && s.body.size() >= 12)
      adobe = static_cast<unsigned char>(s.body[11]);
    if (is_sof(s.marker) && s.body.size() >= 6) {
      const std::size_t n = static_cast<unsigned char>(s.body[5]);
      for (std::size_t c = 0; c < n && 6 + 3 * c < s.body.size(); ++c) ids += s.body[6 + 3 * c];
    }
    pos = s.end;
  }
  if (ids.size() != 3 || (jfif && adobe >= 0)) return std::nullopt;
  if (jfif || adobe == 1 || (adobe < 0 && ids == std::string("\x01\x02\x03", 3)))
    return JpegColour::ycbcr;
  if (adobe == 0 || (adobe < 0 && ids == "RGB")) return JpegColour::rgb;
  return std::nullopt;
}

const char* colour_name(JpegColour colour) { return colour == JpegColour::rgb ? "rgb" : "ycbcr"; }

std::string standalone_jpeg(std::string_view tile, std::string_view tables, JpegColour colour,
                            const std::string& what) {
  std::string out;
  out.reserve(tile.size() + tables.size() + sizeof kJfif);
  out.push_back(static_cast<char>(kMarker));
  out.push_back(static_cast<char>(kSoi));
  if (colour == JpegColour::rgb)
    out.append(reinterpret_cast<const char*>(kAdobeRgb), sizeof kAdobeRgb);
  else
    out.append(reinterpret_cast<const char*>(kJfif), sizeof kJfif);
  if (!tables.empty()) copy_segments(tables, true, out, what + " (JPEGTables)");
  copy_segments(tile, false, out, what);
  return out;
}

std::string colour_marked_jpeg(std::string jpeg, JpegColour colour, const std::string& what) {
  if (implied_colour(jpeg, what) == colour) return jpeg;
  return standalone_jpeg(jpeg, "", colour, what);
}

}  // namespace mltool::io
