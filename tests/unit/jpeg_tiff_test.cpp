// io::standalone_jpeg (tile --passthrough): a JPEG split as TIFF stores it — its tables in a
// JPEGTables stream, the frame and scan in a tile stream — and merged again decodes to the
// pixels of the whole; malformed streams are FormatErrors naming the tile.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mltool/io/image_codec.hpp"
#include "mltool/io/jpeg_tiff.hpp"
#include "mltool/util/error.hpp"
#include "support/errors.hpp"

namespace {

using mltool::FormatError;
using mltool::io::colour_marked_jpeg;
using mltool::io::JpegColour;
using mltool::io::standalone_jpeg;
using mltool::testing::contains;
using mltool::testing::error_of;

std::vector<std::uint8_t> gradient(int w, int h) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      auto* p = &rgb[(static_cast<std::size_t>(y) * w + x) * 3];
      p[0] = static_cast<std::uint8_t>(x * 4), p[1] = static_cast<std::uint8_t>(y * 4);
      p[2] = static_cast<std::uint8_t>((x * y) % 251);
    }
  return rgb;
}

// Splits a whole JPEG as a TIFF writer would: DQT/DHT segments to the tables stream (SOI ...
// EOI), the rest (APPn dropped) to the tile stream (SOI, SOF, SOS ... EOI).
void split(const std::string& jpeg, std::string& tables, std::string& tile) {
  tables = "\xFF\xD8";
  tile = "\xFF\xD8";
  std::size_t pos = 2;
  while (static_cast<unsigned char>(jpeg[pos + 1]) != 0xDA) {
    const auto marker = static_cast<unsigned char>(jpeg[pos + 1]);
    const std::size_t len = (static_cast<unsigned char>(jpeg[pos + 2]) << 8) |
                            static_cast<unsigned char>(jpeg[pos + 3]);
    const std::string segment = jpeg.substr(pos, 2 + len);
    if (marker == 0xDB || marker == 0xC4)
      tables += segment;
    else if (marker < 0xE0 || marker > 0xEF)
      tile += segment;
    pos += 2 + len;
  }
  tables += "\xFF\xD9";
  tile += jpeg.substr(pos);
}

TEST(StandaloneJpeg, SplitStreamsMergeToTheWholeImage) {
  const auto rgb = gradient(64, 48);
  const std::string whole = mltool::io::encode_jpeg(rgb.data(), 64, 48, 80);
  std::string tables, tile;
  split(whole, tables, tile);
  mltool::io::RgbImage want, got;
  mltool::io::decode_image(whole.data(), whole.size(), want, "whole");
  const std::string merged = standalone_jpeg(tile, tables, JpegColour::ycbcr, "tile 0");
  mltool::io::decode_image(merged.data(), merged.size(), got, "merged");
  EXPECT_EQ(got.width, 64);
  EXPECT_EQ(got.height, 48);
  EXPECT_EQ(got.pixels, want.pixels);
  EXPECT_EQ(merged.substr(2, 4), std::string("\xFF\xE0\x00\x10", 4));  // JFIF first
  // RGB-coded: Adobe transform 0 replaces the JFIF marker, and the tile's own is dropped.
  const std::string rgb_coded = standalone_jpeg(merged, "", JpegColour::rgb, "tile 0");
  EXPECT_EQ(rgb_coded.substr(2, 9), std::string("\xFF\xEE\x00\x0E"
                                                "Adobe",
                                                9));
  EXPECT_EQ(rgb_coded.find("JFIF"), std::string::npos);
}

TEST(StandaloneJpeg, MalformedStreamsNameTheTile) {
  std::string tables, tile;
  split(mltool::io::encode_jpeg(gradient(16, 16).data(), 16, 16, 80), tables, tile);
  EXPECT_TRUE(contains(error_of<FormatError>([&] {
                         standalone_jpeg("GIF89a", tables, JpegColour::ycbcr, "S1.svs: tile 7");
                       }),
                       "S1.svs: tile 7: not a JPEG stream"));
  EXPECT_TRUE(contains(error_of<FormatError>([&] {
                         standalone_jpeg(tile.substr(0, 9), tables, JpegColour::ycbcr, "t");
                       }),
                       "t: "));
  EXPECT_TRUE(contains(error_of<FormatError>([&] {
                         standalone_jpeg(tile, tables.substr(0, 7), JpegColour::rgb, "t");
                       }),
                       "t (JPEGTables): "));
}

// A DICOM frame is a whole JPEG: it stays as it is where its own markers give the colour the
// DICOM PhotometricInterpretation says, and gets the marker that does where they do not.
TEST(StandaloneJpeg, ColourMarkedKeepsAFrameThatSaysItsColour) {
  const std::string whole = mltool::io::encode_jpeg(gradient(32, 16).data(), 32, 16, 85);
  ASSERT_EQ(whole.substr(2, 4), std::string("\xFF\xE0\x00\x10", 4));  // libjpeg-turbo's JFIF
  EXPECT_EQ(colour_marked_jpeg(whole, JpegColour::ycbcr, "f"), whole);
  const std::string bare = "\xFF\xD8" + whole.substr(2 + 18);  // no JFIF: component ids 1, 2, 3
  EXPECT_EQ(colour_marked_jpeg(bare, JpegColour::ycbcr, "f"), bare);
  for (const std::string& frame : {whole, bare}) {
    const std::string rgb = colour_marked_jpeg(frame, JpegColour::rgb, "f");
    EXPECT_EQ(rgb, standalone_jpeg(frame, "", JpegColour::rgb, "f"));
    EXPECT_EQ(rgb.substr(2, 9), std::string("\xFF\xEE\x00\x0E"
                                            "Adobe",
                                            9));
    EXPECT_EQ(rgb.find("JFIF"), std::string::npos);
    EXPECT_EQ(colour_marked_jpeg(rgb, JpegColour::rgb, "f"), rgb);  // Adobe transform 0
    EXPECT_EQ(colour_marked_jpeg(rgb, JpegColour::ycbcr, "f"),
              standalone_jpeg(rgb, "", JpegColour::ycbcr, "f"));
  }
  mltool::io::RgbImage a, b;
  mltool::io::decode_image(whole.data(), whole.size(), a, "whole");
  mltool::io::decode_image(bare.data(), bare.size(), b, "bare");
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_TRUE(contains(error_of<FormatError>([&] {
                         colour_marked_jpeg("\xFF\xD8\xFF\xC0\x00", JpegColour::rgb,
                                            "a.dcm: frame 3");
                       }),
                       "a.dcm: frame 3: JPEG segment truncated"));
}

}  // namespace
