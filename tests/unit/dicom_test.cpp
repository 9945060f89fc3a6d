// io::read_dicom_header / read_dicom_frames (tile --passthrough on DICOM WSI): files built
// byte by byte as DICOM PS3.5 and PS3.10 lay them out — preamble, file meta group, explicit
// and implicit VR little endian elements, sequences of defined and undefined length,
// encapsulated Pixel Data with a Basic or Extended Offset Table — and malformed ones, which
// are FormatErrors naming the file and the byte offset.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "mltool/io/dicom.hpp"
#include "mltool/util/error.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

namespace {

using mltool::FormatError;
using mltool::InputError;
using mltool::io::read_dicom_frames;
using mltool::io::read_dicom_header;
using mltool::testing::contains;
using mltool::testing::error_of;
using mltool::testing::TempDir;

constexpr const char* kExplicit = "1.2.840.10008.1.2.1";
constexpr const char* kImplicit = "1.2.840.10008.1.2";

// Little-endian DICOM bytes.
struct Dicom {
  std::string s;
  bool implicit = false;

  Dicom& u16(std::uint32_t v) {
    s += static_cast<char>(v & 0xFF), s += static_cast<char>(v >> 8 & 0xFF);
    return *this;
  }
  Dicom& u32(std::uint32_t v) { return u16(v & 0xFFFF).u16(v >> 16); }
  Dicom& u64(std::uint64_t v) { return u32(static_cast<std::uint32_t>(v)).u32(v >> 32); }
  // An element header: explicit VR (short or long form) unless `implicit`.
  Dicom& head(std::uint32_t g, std::uint32_t e, const std::string& vr, std::uint32_t length) {
    u16(g).u16(e);
    if (implicit) return u32(length);
    s += vr;
    const bool long_form = vr == "OB" || vr == "OV" || vr == "SQ" || vr == "UN";
    return long_form ? u16(0).u32(length) : u16(length);
  }
  // A text element, padded to even length as DICOM does.
  Dicom& text(std::uint32_t g, std::uint32_t e, const std::string& vr, std::string v) {
    if (v.size() % 2) v += vr == "UI" ? '\0' : ' ';
    head(g, e, vr, static_cast<std::uint32_t>(v.size()));
    s += v;
    return *this;
  }
  Dicom& us(std::uint32_t g, std::uint32_t e, std::uint32_t v) {
    return head(g, e, "US", 2).u16(v);
  }
  Dicom& ul(std::uint32_t g, std::uint32_t e, std::uint32_t v) {
    return head(g, e, "UL", 4).u32(v);
  }
  Dicom& item(std::uint32_t length) { return u16(0xFFFE).u16(0xE000).u32(length); }
  Dicom& item_end() { return u16(0xFFFE).u16(0xE00D).u32(0); }
  Dicom& sequence_end() { return u16(0xFFFE).u16(0xE0DD).u32(0); }
};

// Preamble, "DICM" and a file meta group naming `syntax`.
Dicom start(const std::string& syntax) {
  Dicom d;
  d.s.assign(128, '\0');
  d.s += "DICM";
  Dicom meta;
  meta.text(0x0002, 0x0002, "UI", "1.2.840.10008.5.1.4.1.1.77.1.6")
      .text(0x0002, 0x0010, "UI", syntax);
  d.ul(0x0002, 0x0000, static_cast<std::uint32_t>(meta.s.size()));
  d.s += meta.s;
  d.implicit = syntax == kImplicit;
  return d;
}

// A whole-slide instance's elements up to Pixel Data: `frames` frames of 16 × 16 over a
// 32 × 32 matrix, with a sequence of undefined length (items of both kinds) to skip.
Dicom wsi(const std::string& syntax, int frames) {
  Dicom d = start(syntax);
  d.text(0x0008, 0x0008, "CS", "ORIGINAL\\PRIMARY\\VOLUME\\NONE")
      .text(0x0008, 0x0016, "UI", "1.2.840.10008.5.1.4.1.1.77.1.6")
      .text(0x0008, 0x0018, "UI", "1.2.3.4")
      .text(0x0020, 0x000E, "UI", "1.2.3");
  d.head(0x0020, 0x9222, "SQ", 0xFFFFFFFF).item(0xFFFFFFFF);
  d.text(0x0020, 0x9165, "AT", "AB").head(0x0020, 0x9167, "SQ", 8).item(0).item_end();
  d.item(4).u32(0).sequence_end();
  d.text(0x0020, 0x9311, "CS", "TILED_FULL")
      .us(0x0028, 0x0002, 3)
      .text(0x0028, 0x0004, "CS", "YBR_FULL_422")
      .text(0x0028, 0x0008, "IS", std::to_string(frames))
      .us(0x0028, 0x0010, 16)
      .us(0x0028, 0x0011, 16)
      .us(0x0028, 0x0100, 8)
      .ul(0x0048, 0x0006, 32)
      .ul(0x0048, 0x0007, 32);
  return d;
}

// Encapsulated Pixel Data: a Basic Offset Table of `bot`, then `fragments` items of 6, 8, 10,
// ... bytes (the item of fragment k at relative offset sum of the earlier ones + 8 each).
void pixel_data(Dicom& d, const std::vector<std::uint32_t>& bot, int fragments) {
  d.head(0x7FE0, 0x0010, "OB", 0xFFFFFFFF).item(static_cast<std::uint32_t>(4 * bot.size()));
  for (auto v : bot) d.u32(v);
  for (int k = 0; k < fragments; ++k) {
    d.item(6 + 2 * k);
    d.s += std::string(6 + 2 * k, static_cast<char>('a' + k));
  }
  d.sequence_end();
}

std::string write(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(Dicom, HeaderOfAWholeSlideInstance) {
  TempDir dir;
  for (const char* syntax : {kExplicit, kImplicit}) {
    Dicom d = wsi(syntax, 4);
    const std::size_t value = d.s.size() + (d.implicit ? 8 : 12);
    pixel_data(d, {}, 4);
    const auto h = read_dicom_header(write(dir, "a.dcm", d.s));
    EXPECT_EQ(h.transfer_syntax, syntax);
    EXPECT_TRUE(h.dataset_read);
    EXPECT_EQ(h.image_type, (std::vector<std::string>{"ORIGINAL", "PRIMARY", "VOLUME", "NONE"}));
    EXPECT_EQ(h.sop_instance, "1.2.3.4");
    EXPECT_EQ(h.series_instance, "1.2.3");
    EXPECT_EQ(h.organization, "TILED_FULL");
    EXPECT_EQ(h.photometric, "YBR_FULL_422");
    EXPECT_EQ(h.samples, 3);
    EXPECT_EQ(h.bits_allocated, 8);
    EXPECT_EQ(h.frames, 4);
    EXPECT_EQ(h.rows, 16);
    EXPECT_EQ(h.columns, 16);
    EXPECT_EQ(h.total_columns, 32);
    EXPECT_EQ(h.total_rows, 32);
    EXPECT_EQ(h.focal_planes, 1);
    EXPECT_TRUE(h.encapsulated);
    EXPECT_EQ(h.pixel_data, value);
    const auto f = read_dicom_frames(h);
    ASSERT_EQ(f.count(), 4u);
    EXPECT_EQ(f.first, (std::vector<std::size_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(f.offset[0], value + 8 + 8);  // after the empty BOT item and the first item's header
    EXPECT_EQ(f.length, (std::vector<std::uint64_t>{6, 8, 10, 12}));
    EXPECT_EQ(f.offset[1], f.offset[0] + 6 + 8);
  }
}

TEST(Dicom, OffsetTablesGroupFragmentsIntoFrames) {
  TempDir dir;
  // Basic Offset Table: frame 0 = fragments 0, 1; frame 1 = fragments 2, 3 (items at 0, 14,
  // 30, 48 relative to the first).
  Dicom d = wsi(kExplicit, 2);
  pixel_data(d, {0, 30}, 4);
  auto f = read_dicom_frames(read_dicom_header(write(dir, "bot.dcm", d.s)));
  EXPECT_EQ(f.first, (std::vector<std::size_t>{0, 2, 4}));
  // Extended Offset Table: frame 0 = fragment 0, frame 1 = fragments 1, 2, 3.
  Dicom e = wsi(kExplicit, 2);
  e.head(0x7FE0, 0x0001, "OV", 16).u64(0).u64(14);
  e.head(0x7FE0, 0x0002, "OV", 16).u64(6).u64(30);
  pixel_data(e, {}, 4);
  const auto h = read_dicom_header(write(dir, "eot.dcm", e.s));
  EXPECT_EQ(h.extended_offsets, (std::vector<std::uint64_t>{0, 14}));
  f = read_dicom_frames(h);
  EXPECT_EQ(f.first, (std::vector<std::size_t>{0, 1, 4}));
}

TEST(Dicom, MalformedFilesNameTheFileAndOffset) {
  TempDir dir;
  const auto header_error = [&](const std::string& bytes) {
    const std::string path = write(dir, "bad.dcm", bytes);
    return error_of<FormatError>([&] { read_dicom_header(path); });
  };
  const auto frames_error = [&](const std::string& bytes) {
    const std::string path = write(dir, "bad.dcm", bytes);
    const auto h = read_dicom_header(path);
    return error_of<FormatError>([&] { read_dicom_frames(h); });
  };
  const std::string bad = dir / "bad.dcm";
  std::string m = header_error(std::string(128, '\0') + "DICX" + start(kExplicit).s.substr(132));
  EXPECT_TRUE(contains(m, bad + ": byte 128: not a DICOM Part 10 file")) << m;
  m = header_error(std::string(100, '\0'));
  EXPECT_TRUE(contains(m, bad + ": byte 0: ") && contains(m, "runs past the end")) << m;

  Dicom truncated = wsi(kExplicit, 1);
  const std::size_t at = truncated.s.size() + 8;
  truncated.head(0x0028, 0x0034, "IS", 40).s += "12";
  m = header_error(truncated.s);
  EXPECT_TRUE(contains(m, bad + ": byte " + std::to_string(at) + ": the value of (0028,0034)"))
      << m;
  EXPECT_TRUE(contains(m, "runs past the end of the file")) << m;

  Dicom stray = wsi(kExplicit, 1);
  const std::size_t stray_at = stray.s.size() + 12;
  stray.head(0x0040, 0x0555, "SQ", 0xFFFFFFFF).us(0x0028, 0x0002, 3);
  m = header_error(stray.s);
  EXPECT_TRUE(contains(m, bad + ": byte " + std::to_string(stray_at) +
                              ": expected an item (FFFE,E000) or a sequence delimiter, "
                              "found (0028,0002)"))
      << m;

  Dicom deep = wsi(kExplicit, 1);
  for (int i = 0; i < 40; ++i) deep.head(0x0040, 0x0555, "SQ", 0xFFFFFFFF).item(0xFFFFFFFF);
  m = header_error(deep.s);
  EXPECT_TRUE(contains(m, bad + ": byte ") && contains(m, "nested more than 32 deep")) << m;

  Dicom count = start(kExplicit);
  count.text(0x0028, 0x0008, "IS", "x1");
  m = header_error(count.s);
  EXPECT_TRUE(contains(m, "(0028,0008) is \"x1\", not a count")) << m;

  Dicom extra = wsi(kExplicit, 3);
  const std::size_t pixels_at = extra.s.size() + 12;
  pixel_data(extra, {}, 4);
  m = frames_error(extra.s);
  EXPECT_TRUE(contains(m, bad + ": byte " + std::to_string(pixels_at) +
                              ": 4 fragments for 3 frames and no offset table"))
      << m;

  Dicom inside = wsi(kExplicit, 2);
  pixel_data(inside, {0, 20}, 4);  // 20 is inside fragment 1
  m = frames_error(inside.s);
  EXPECT_TRUE(contains(m, "the Basic Offset Table's entry 1 (20) is not the offset of a fragment"))
      << m;

  Dicom cut = wsi(kExplicit, 2);
  pixel_data(cut, {}, 2);
  cut.s.resize(cut.s.size() - 12);  // the sequence delimiter and part of fragment 1
  m = frames_error(cut.s);
  EXPECT_TRUE(contains(m, bad + ": byte ") && contains(m, "fragment 1 (8 bytes) runs past")) << m;

  EXPECT_TRUE(contains(error_of<InputError>([&] { read_dicom_header(dir / "absent.dcm"); }),
                       dir / "absent.dcm"));
}

}  // namespace
