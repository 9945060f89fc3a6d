// Tests of the pixel plumbing of `mltool tile`: µm/px from TIFF tags, OpenSlide's ARGB to
// RGB, JPEG and PNG encoding, resampling, opening slides, region readers on a pyramid TIFF
// made here with libvips. (The QC picture: slide_qc_test.cpp.)
#include <gtest/gtest.h>
#include <turbojpeg.h>
#include <vips/vips.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "mltool/slide/image.hpp"
#include "mltool/slide/info.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/region_reader.hpp"
#include "mltool/slide/tiler.hpp"
#include "mltool/slide/tissue.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

using mltool::InputError;
using mltool::io::encode_jpeg;
using mltool::io::encode_png;
using mltool::io::RgbImage;
using mltool::slide::argb_to_rgb_on_white;
using mltool::slide::mpp_from_tiff_resolution;
using mltool::slide::Slide;
using mltool::testing::contains;
using mltool::testing::error_of;

namespace {

// A smooth, non-symmetric test picture: ramps in x and y, a disc, so flips and swaps show.
RgbImage test_picture(int w, int h) {
  RgbImage img{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      std::uint8_t* p = &img.pixels[(static_cast<std::size_t>(y) * w + x) * 3];
      p[0] = static_cast<std::uint8_t>(255 * x / std::max(1, w - 1));
      p[1] = static_cast<std::uint8_t>(255 * y / std::max(1, h - 1));
      const double d = std::hypot(x - 0.3 * w, y - 0.6 * h);
      p[2] = d < 0.2 * std::min(w, h) ? 220 : 40;
    }
  return img;
}

RgbImage constant(int w, int h, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  RgbImage img{w, h, {}};
  img.pixels.reserve(static_cast<std::size_t>(w) * h * 3);
  for (int i = 0; i < w * h; ++i) img.pixels.insert(img.pixels.end(), {r, g, b});
  return img;
}

const std::uint8_t* pixel(const RgbImage& img, int x, int y) {
  return &img.pixels[(static_cast<std::size_t>(y) * img.width + x) * 3];
}

std::uint32_t be32(const std::string& s, std::size_t at) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data()) + at;
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
         b[3];
}

// The frame header of a JPEG, read by walking its marker segments up to the scan.
struct JpegFrame {
  int sof = -1;  // the SOFn marker byte (0xC0 = baseline)
  int width = 0, height = 0;
  std::vector<int> sampling;  // per component: (h << 4) | v
  bool ok = false;
};

JpegFrame parse_jpeg_frame(const std::string& jpeg) {
  JpegFrame f;
  const auto* d = reinterpret_cast<const unsigned char*>(jpeg.data());
  const std::size_t n = jpeg.size();
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return f;
  std::size_t i = 2;
  while (i + 4 <= n) {
    if (d[i] != 0xFF) return f;
    const int marker = d[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    const std::size_t len = (std::size_t{d[i + 2]} << 8) | d[i + 3];
    if (len < 2 || i + 2 + len > n) return f;
    const unsigned char* seg = d + i + 4;
    const bool is_sof =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (is_sof) {
      f.sof = marker;
      f.height = (seg[1] << 8) | seg[2];
      f.width = (seg[3] << 8) | seg[4];
      const int comps = seg[5];
      for (int c = 0; c < comps; ++c) f.sampling.push_back(seg[6 + 3 * c + 1]);
    }
    if (marker == 0xDA) {  // start of scan: the frame header came before it
      f.ok = f.sof >= 0;
      return f;
    }
    i += 2 + len;
  }
  return f;
}

RgbImage decode_jpeg(const std::string& jpeg) {
  tjhandle h = tjInitDecompress();
  int w = 0, hgt = 0, subsamp = 0, colorspace = 0;
  auto* buf = reinterpret_cast<const unsigned char*>(jpeg.data());
  RgbImage out;
  if (tjDecompressHeader3(h, buf, jpeg.size(), &w, &hgt, &subsamp, &colorspace) == 0) {
    out.width = w;
    out.height = hgt;
    out.pixels.resize(static_cast<std::size_t>(w) * hgt * 3);
    if (tjDecompress2(h, buf, jpeg.size(), out.pixels.data(), w, w * 3, hgt, TJPF_RGB, 0) != 0)
      out = {};
  }
  tjDestroy(h);
  return out;
}

RgbImage decode_with_vips(const std::string& encoded) {
  mltool::slide::init_vips();
  VipsImage* image = vips_image_new_from_buffer(encoded.data(), encoded.size(), "", nullptr);
  if (!image) {
    ADD_FAILURE() << "libvips cannot decode: " << vips_error_buffer();
    vips_error_clear();
    return {};
  }
  RgbImage out{image->Xsize, image->Ysize, {}};
  EXPECT_EQ(image->Bands, 3);
  EXPECT_EQ(image->BandFmt, VIPS_FORMAT_UCHAR);
  std::size_t size = 0;
  void* data = vips_image_write_to_memory(image, &size);
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  out.pixels.assign(bytes, bytes + size);
  g_free(data);
  g_object_unref(image);
  return out;
}

double mean_abs_diff(const RgbImage& a, const RgbImage& b, int* worst = nullptr) {
  if (a.pixels.size() != b.pixels.size() || a.pixels.empty()) return 1e9;
  double sum = 0;
  int max = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) {
    const int d = std::abs(int{a.pixels[i]} - int{b.pixels[i]});
    sum += d;
    max = std::max(max, d);
  }
  if (worst) *worst = max;
  return sum / static_cast<double>(a.pixels.size());
}

}  // namespace

// ---------------------------------------------------------------------------------------
// mpp_from_tiff_resolution

TEST(SlideIoMpp, FromTiffResolution) {
  EXPECT_DOUBLE_EQ(mpp_from_tiff_resolution("40000", "centimeter").value_or(-1), 0.25);
  EXPECT_DOUBLE_EQ(mpp_from_tiff_resolution("101600", "inch").value_or(-1), 0.25);
  EXPECT_DOUBLE_EQ(mpp_from_tiff_resolution("20000.000000", "centimeter").value_or(-1), 0.5);
  EXPECT_DOUBLE_EQ(mpp_from_tiff_resolution("50800", "inch").value_or(-1), 0.5);
}

TEST(SlideIoMpp, NothingWithoutAUsableResolution) {
  EXPECT_FALSE(mpp_from_tiff_resolution("40000", "none"));
  EXPECT_FALSE(mpp_from_tiff_resolution("40000", "furlong"));
  EXPECT_FALSE(mpp_from_tiff_resolution("40000", std::nullopt));
  EXPECT_FALSE(mpp_from_tiff_resolution(std::nullopt, "centimeter"));
  EXPECT_FALSE(mpp_from_tiff_resolution(std::nullopt, std::nullopt));
  for (const char* bad : {"0", "0.0", "-40000", "garbage", "", "nan", "inf", "1e999"})
    EXPECT_FALSE(mpp_from_tiff_resolution(std::string(bad), "centimeter")) << "'" << bad << "'";
}

TEST(SlideIoMpp, PlaceholderDotsPerInchAreNoResolution) {
  // What converters write when they know nothing: 72, 96 and 300 dpi.
  for (const char* placeholder : {"72", "72.000000", "96", "300"})
    EXPECT_FALSE(mpp_from_tiff_resolution(std::string(placeholder), "inch")) << placeholder;
  EXPECT_DOUBLE_EQ(mpp_from_tiff_resolution("25400", "inch").value_or(-1), 1.0);
  // The same numbers per centimetre are not placeholders (and are left to slide_mpp's range).
  EXPECT_TRUE(mpp_from_tiff_resolution("72", "centimeter"));
}

// ---------------------------------------------------------------------------------------
// argb_to_rgb_on_white

TEST(SlideIoArgb, CompositesPremultipliedPixelsOnWhite) {
  const std::uint32_t argb[] = {
      0xFF102030u,  // opaque: channels as they are
      0x00000000u,  // fully transparent: white
      0x80800000u,  // half-transparent pure red, premultiplied (255 * 128/255 = 128)
      0x80404040u,  // half-transparent mid grey, premultiplied
      0xFFFFFFFFu,  // opaque white
      0xFF000000u,  // opaque black
  };
  std::vector<std::uint8_t> rgb(sizeof argb / sizeof argb[0] * 3, 0xAA);
  argb_to_rgb_on_white(argb, 6, rgb.data());
  const std::vector<std::uint8_t> expected = {
      0x10, 0x20, 0x30,  //
      255,  255,  255,   //
      255,  127,  127,   // 128 + 127, 0 + 127: red at half strength on white
      191,  191,  191,   // 64 + 127
      255,  255,  255,   //
      0,    0,    0,     //
  };
  EXPECT_EQ(rgb, expected);
}

// ---------------------------------------------------------------------------------------
// encode_jpeg / encode_png

TEST(SlideIoJpeg, BaselineJpegThatDecodesToThePicture) {
  const RgbImage img = test_picture(96, 64);
  const std::string jpeg = encode_jpeg(img.pixels.data(), img.width, img.height, 90);
  ASSERT_GE(jpeg.size(), 4u);
  EXPECT_EQ(static_cast<unsigned char>(jpeg[0]), 0xFF);
  EXPECT_EQ(static_cast<unsigned char>(jpeg[1]), 0xD8) << "SOI";
  EXPECT_EQ(static_cast<unsigned char>(jpeg[jpeg.size() - 2]), 0xFF);
  EXPECT_EQ(static_cast<unsigned char>(jpeg[jpeg.size() - 1]), 0xD9) << "EOI";
  const JpegFrame f = parse_jpeg_frame(jpeg);
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.sof, 0xC0) << "baseline";
  EXPECT_EQ(f.width, 96);
  EXPECT_EQ(f.height, 64);

  const RgbImage back = decode_jpeg(jpeg);
  ASSERT_EQ(back.width, 96);
  ASSERT_EQ(back.height, 64);
  int worst = 0;
  EXPECT_LT(mean_abs_diff(back, img, &worst), 3.0);
  EXPECT_LT(worst, 60);
  // Not transposed or mirrored: the red ramp runs left to right, green top to bottom.
  EXPECT_LT(pixel(back, 2, 32)[0], 30);
  EXPECT_GT(pixel(back, 93, 32)[0], 225);
  EXPECT_LT(pixel(back, 48, 2)[1], 30);
  EXPECT_GT(pixel(back, 48, 61)[1], 225);
}

TEST(SlideIoJpeg, ChromaSubsamplingFollowsQuality) {
  const RgbImage img = test_picture(40, 24);
  for (int q : {90, 95, 100}) {
    const JpegFrame f = parse_jpeg_frame(encode_jpeg(img.pixels.data(), img.width, img.height, q));
    ASSERT_TRUE(f.ok) << q;
    EXPECT_EQ(f.sampling, (std::vector<int>{0x11, 0x11, 0x11})) << "4:4:4 at quality " << q;
  }
  for (int q : {80, 89, 50}) {
    const JpegFrame f = parse_jpeg_frame(encode_jpeg(img.pixels.data(), img.width, img.height, q));
    ASSERT_TRUE(f.ok) << q;
    EXPECT_EQ(f.sampling, (std::vector<int>{0x22, 0x11, 0x11})) << "4:2:0 at quality " << q;
  }
}

TEST(SlideIoJpeg, HigherQualityIsCloserAndLarger) {
  const RgbImage img = test_picture(128, 128);
  const std::string lo = encode_jpeg(img.pixels.data(), 128, 128, 30);
  const std::string hi = encode_jpeg(img.pixels.data(), 128, 128, 95);
  EXPECT_LT(lo.size(), hi.size());
  EXPECT_LT(mean_abs_diff(decode_jpeg(hi), img), mean_abs_diff(decode_jpeg(lo), img));
}

TEST(SlideIoPng, SignatureHeaderAndLosslessRoundTrip) {
  RgbImage img{37, 21, std::vector<std::uint8_t>(37 * 21 * 3)};
  std::mt19937 rng(5);
  for (auto& v : img.pixels) v = static_cast<std::uint8_t>(rng());
  const std::string png = encode_png(img.pixels.data(), img.width, img.height);
  ASSERT_GT(png.size(), 33u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(be32(png, 8), 13u) << "IHDR length";
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(png, 16), 37u) << "width";
  EXPECT_EQ(be32(png, 20), 21u) << "height";
  EXPECT_EQ(static_cast<int>(png[24]), 8) << "bit depth";
  EXPECT_EQ(static_cast<int>(png[25]), 2) << "colour type: truecolour, no alpha";
  const RgbImage back = decode_with_vips(png);
  EXPECT_EQ(back.width, 37);
  EXPECT_EQ(back.height, 21);
  EXPECT_TRUE(back.pixels == img.pixels) << "PNG must be lossless";
}

TEST(SlideIoPng, WritePngWritesTheEncodedFile) {
  mltool::testing::TempDir tmp;
  const RgbImage img = test_picture(20, 10);
  const std::string path = tmp / "qc.png";
  mltool::io::write_png(path, img);
  const std::string bytes = mltool::util::read_file(path);
  const RgbImage back = decode_with_vips(bytes);
  EXPECT_EQ(back.width, 20);
  EXPECT_TRUE(back.pixels == img.pixels);
}

// ---------------------------------------------------------------------------------------
// resize

TEST(SlideIoResize, ReturnsExactlyTheRequestedSize) {
  struct Case {
    int w, h, ow, oh;
  };
  for (const Case c : {Case{307, 307, 256, 256}, Case{512, 512, 256, 256}, Case{100, 100, 37, 37},
                       Case{10, 10, 16, 16}, Case{614, 614, 256, 256}, Case{300, 200, 150, 37},
                       Case{257, 255, 256, 256}, Case{3, 3, 1, 1}}) {
    const RgbImage src = test_picture(c.w, c.h);
    const RgbImage out = mltool::slide::resize(src.pixels.data(), c.w, c.h, c.ow, c.oh);
    EXPECT_EQ(out.width, c.ow) << c.w << "->" << c.ow;
    EXPECT_EQ(out.height, c.oh) << c.h << "->" << c.oh;
    EXPECT_EQ(out.pixels.size(), static_cast<std::size_t>(c.ow) * c.oh * 3) << c.w << "->" << c.ow;
  }
}

TEST(SlideIoResize, ConstantColourStaysThatColour) {
  for (const auto& [w, ow] :
       {std::pair{307, 256}, std::pair{512, 256}, std::pair{100, 37}, std::pair{10, 16}}) {
    const RgbImage src = constant(w, w, 200, 100, 50);
    const RgbImage out = mltool::slide::resize(src.pixels.data(), w, w, ow, ow);
    ASSERT_EQ(out.pixels.size(), static_cast<std::size_t>(ow) * ow * 3);
    int worst = 0;
    for (std::size_t i = 0; i < out.pixels.size(); i += 3) {
      worst = std::max({worst, std::abs(out.pixels[i] - 200), std::abs(out.pixels[i + 1] - 100),
                        std::abs(out.pixels[i + 2] - 50)});
    }
    EXPECT_LE(worst, 1) << w << "->" << ow;
  }
}

TEST(SlideIoResize, KeepsTheLayout) {
  // Left half red, right half blue: after halving, the outer quarters keep their colour.
  RgbImage src = constant(512, 64, 220, 20, 20);
  for (int y = 0; y < 64; ++y)
    for (int x = 256; x < 512; ++x) {
      std::uint8_t* p = &src.pixels[(static_cast<std::size_t>(y) * 512 + x) * 3];
      p[0] = 20, p[1] = 20, p[2] = 220;
    }
  const RgbImage out = mltool::slide::resize(src.pixels.data(), 512, 64, 256, 32);
  ASSERT_EQ(out.width, 256);
  for (int y = 0; y < 32; ++y) {
    for (int x : {0, 60, 120}) {
      EXPECT_NEAR(pixel(out, x, y)[0], 220, 1);
      EXPECT_NEAR(pixel(out, x, y)[2], 20, 1);
    }
    for (int x : {136, 200, 255}) {
      EXPECT_NEAR(pixel(out, x, y)[0], 20, 1);
      EXPECT_NEAR(pixel(out, x, y)[2], 220, 1);
    }
  }
  // And the picture as a whole matches a simple box average of it.
  const RgbImage pic = test_picture(256, 256);
  const RgbImage half = mltool::slide::resize(pic.pixels.data(), 256, 256, 128, 128);
  RgbImage box{128, 128, std::vector<std::uint8_t>(128 * 128 * 3)};
  for (int y = 0; y < 128; ++y)
    for (int x = 0; x < 128; ++x)
      for (int c = 0; c < 3; ++c) {
        const int s = pixel(pic, 2 * x, 2 * y)[c] + pixel(pic, 2 * x + 1, 2 * y)[c] +
                      pixel(pic, 2 * x, 2 * y + 1)[c] + pixel(pic, 2 * x + 1, 2 * y + 1)[c];
        box.pixels[(static_cast<std::size_t>(y) * 128 + x) * 3 + c] =
            static_cast<std::uint8_t>((s + 2) / 4);
      }
  EXPECT_LT(mean_abs_diff(half, box), 2.0);
}

// ---------------------------------------------------------------------------------------
// Slide::open

TEST(SlideIoOpen, MissingFileIsAnInputErrorNamingIt) {
  mltool::testing::TempDir tmp;
  const std::string path = tmp / "no-such-slide.svs";
  const std::string msg = error_of<InputError>([&] { Slide::open(path); });
  EXPECT_TRUE(contains(msg, path)) << msg;
}

TEST(SlideIoOpen, TextFileIsAnInputErrorNamingIt) {
  mltool::testing::TempDir tmp;
  for (const char* name : {"notes.txt", "fake.svs", "fake.tiff"}) {
    const std::string path = tmp / name;
    mltool::util::write_file_atomic(path, "this is not a slide\n");
    const std::string msg = error_of<InputError>([&] { Slide::open(path); });
    EXPECT_TRUE(contains(msg, path)) << msg;
    EXPECT_TRUE(contains(msg, "OpenSlide")) << msg;
  }
}

// ---------------------------------------------------------------------------------------
// Slide and region readers on a pyramid TIFF written here by libvips.

namespace {

class SlideIoTiff : public ::testing::Test {
 protected:
  static constexpr int kWidth = 1024;
  static constexpr int kHeight = 768;

  void SetUp() override {
    mltool::slide::init_vips();
    picture_ = test_picture(kWidth, kHeight);
    VipsImage* image = vips_image_new_from_memory_copy(
        picture_.pixels.data(), picture_.pixels.size(), kWidth, kHeight, 3, VIPS_FORMAT_UCHAR);
    ASSERT_NE(image, nullptr) << vips_error_buffer();
    // 4000 px/mm = 40000 px/cm: 0.25 µm/px, written as XResolution with unit centimeter.
    const int rc = vips_tiffsave(
        image, path_.c_str(), "tile", TRUE, "tile_width", 256, "tile_height", 256, "pyramid", TRUE,
        "compression", VIPS_FOREIGN_TIFF_COMPRESSION_NONE, "xres", 4000.0, "yres", 4000.0, nullptr);
    g_object_unref(image);
    ASSERT_EQ(rc, 0) << vips_error_buffer();
  }

  mltool::testing::TempDir tmp_;
  std::string path_ = tmp_ / "pyramid.tiff";
  RgbImage picture_;
};

RgbImage crop(const RgbImage& img, int x, int y, int w, int h) {
  RgbImage out{w, h, {}};
  for (int r = 0; r < h; ++r) {
    const std::uint8_t* row = pixel(img, x, y + r);
    out.pixels.insert(out.pixels.end(), row, row + static_cast<std::size_t>(w) * 3);
  }
  return out;
}

}  // namespace

TEST_F(SlideIoTiff, OpenReportsPyramidAndMppFromResolution) {
  const Slide slide = Slide::open(path_);
  EXPECT_EQ(slide.path(), path_);
  EXPECT_EQ(slide.vendor(), "generic-tiff");
  const auto& g = slide.geometry();
  ASSERT_GE(g.levels.size(), 3u);
  EXPECT_EQ(g.levels[0].width, kWidth);
  EXPECT_EQ(g.levels[0].height, kHeight);
  EXPECT_DOUBLE_EQ(g.levels[0].downsample, 1.0);
  EXPECT_EQ(g.levels[1].width, kWidth / 2);
  EXPECT_EQ(g.levels[1].height, kHeight / 2);
  EXPECT_NEAR(g.levels[1].downsample, 2.0, 1e-9);
  ASSERT_TRUE(g.mpp_x.has_value());
  ASSERT_TRUE(g.mpp_y.has_value());
  EXPECT_NEAR(*g.mpp_x, 0.25, 1e-6);
  EXPECT_NEAR(*g.mpp_y, 0.25, 1e-6);
  EXPECT_FALSE(slide.property("no.such.property").has_value());
  EXPECT_EQ(slide.property("openslide.vendor"), "generic-tiff");
}

// libvips writes its resolution in pixels per centimetre: `vips tiffsave --xres 2.835` (px/mm)
// is 28.35 px/cm, 72 dpi, which OpenSlide 4 turns into 352.7 µm/px. It is the placeholder,
// as 72 px/inch is, not an implausible µm/px.
TEST_F(SlideIoTiff, LibvipsSeventyTwoDpiInCentimetresIsAPlaceholder) {
  const std::string path = tmp_ / "dpi72.tiff";
  VipsImage* image = vips_image_new_from_memory_copy(picture_.pixels.data(), picture_.pixels.size(),
                                                     kWidth, kHeight, 3, VIPS_FORMAT_UCHAR);
  ASSERT_NE(image, nullptr) << vips_error_buffer();
  const int rc =
      vips_tiffsave(image, path.c_str(), "tile", TRUE, "pyramid", TRUE, "compression",
                    VIPS_FOREIGN_TIFF_COMPRESSION_JPEG, "xres", 2.835, "yres", 2.835, nullptr);
  g_object_unref(image);
  ASSERT_EQ(rc, 0) << vips_error_buffer();
  const Slide slide = Slide::open(path);
  ASSERT_EQ(slide.property("tiff.ResolutionUnit"), "centimeter");
  const auto m = mltool::slide::metadata_mpp(slide);
  EXPECT_FALSE(m.mpp.has_value());
  EXPECT_EQ(m.problem, "placeholder 72 dpi");
  EXPECT_EQ(m.source, "TIFF resolution");
  // A real resolution in centimetres is read as one: 40000 px/cm, 0.25 µm/px.
  const auto real = mltool::slide::metadata_mpp(Slide::open(path_));
  ASSERT_TRUE(real.mpp.has_value()) << real.problem;
  EXPECT_NEAR(*real.mpp, 0.25, 1e-6);
}

TEST_F(SlideIoTiff, ReadRgbReturnsThePixelsAndWhiteOutside) {
  const Slide slide = Slide::open(path_);
  std::vector<std::uint8_t> rgb(64 * 40 * 3);
  slide.read_rgb(300, 200, 0, 64, 40, rgb.data());
  EXPECT_TRUE(rgb == crop(picture_, 300, 200, 64, 40).pixels)
      << "uncompressed level 0 reads back exactly";

  // Half outside the right edge: the outside is white.
  slide.read_rgb(kWidth - 8, 0, 0, 16, 4, rgb.data());
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 8; ++x)
      EXPECT_EQ(rgb[(y * 16 + x) * 3], pixel(picture_, kWidth - 8 + x, y)[0]);
    for (int x = 8; x < 16; ++x)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(rgb[(y * 16 + x) * 3 + c], 255) << x << "," << y;
  }
}

TEST_F(SlideIoTiff, RegionReadersAgreeWithOpenSlide) {
  const Slide slide = Slide::open(path_);
  for (int level : {0, 1}) {
    auto fast =
        mltool::slide::make_region_reader(slide, level, mltool::slide::ReaderChoice::automatic);
    auto plain =
        mltool::slide::make_region_reader(slide, level, mltool::slide::ReaderChoice::openslide);
    std::vector<std::uint8_t> a(100 * 60 * 3), b(100 * 60 * 3), c(100 * 60 * 3);
    // The last two reach past the level's right and bottom edges: white there, as OpenSlide.
    const int w0 = static_cast<int>(kWidth), h0 = static_cast<int>(kHeight);
    for (const auto& [x, y] : {std::pair{0, 0}, std::pair{412, 202}, std::pair{600, 400},
                               std::pair{(w0 >> level) * (1 << level) - 40 * (1 << level), 0},
                               std::pair{w0 - 20, h0 - 10}}) {
      fast->read_rgb(x, y, 100, 60, a.data());
      plain->read_rgb(x, y, 100, 60, b.data());
      slide.read_rgb(x, y, level, 100, 60, c.data());
      EXPECT_TRUE(a == c) << "automatic reader, level " << level << " at " << x << "," << y;
      EXPECT_TRUE(b == c) << "openslide reader, level " << level << " at " << x << "," << y;
    }
    EXPECT_STREQ(fast->name(), "libvips-tiff") << "level " << level;
    EXPECT_STREQ(plain->name(), "openslide");
  }
}

TEST_F(SlideIoTiff, ThumbnailIsTheShrunkLevel) {
  const RgbImage thumb = mltool::slide::read_thumbnail(Slide::open(path_), 0, 0.25);
  EXPECT_EQ(thumb.width, kWidth / 4);
  EXPECT_EQ(thumb.height, kHeight / 4);
  const RgbImage ref =
      mltool::slide::resize(picture_.pixels.data(), kWidth, kHeight, kWidth / 4, kHeight / 4);
  EXPECT_LT(mean_abs_diff(thumb, ref), 2.0);
  const std::string msg = error_of<InputError>(
      [&] { mltool::slide::read_thumbnail(Slide::open(tmp_ / "none.tiff"), 0, 0.5); });
  EXPECT_TRUE(contains(msg, tmp_ / "none.tiff")) << msg;
}

// ---------------------------------------------------------------------------------------
// Flat images (libvips): a PNG and a strip TIFF written here.

namespace {

class SlideIoFlat : public ::testing::Test {
 protected:
  static constexpr int kWidth = 600;
  static constexpr int kHeight = 450;

  void SetUp() override {
    mltool::slide::init_vips();
    picture_ = test_picture(kWidth, kHeight);
    VipsImage* image = vips_image_new_from_memory_copy(
        picture_.pixels.data(), picture_.pixels.size(), kWidth, kHeight, 3, VIPS_FORMAT_UCHAR);
    ASSERT_NE(image, nullptr) << vips_error_buffer();
    // 2000 px/mm: 0.5 µm/px; a strip TIFF (no tiles, no pyramid) and a PNG (pHYs).
    image->Xres = image->Yres = 2000.0;
    ASSERT_EQ(vips_tiffsave(image, strip_.c_str(), "compression", VIPS_FOREIGN_TIFF_COMPRESSION_LZW,
                            "resunit", VIPS_FOREIGN_TIFF_RESUNIT_CM, nullptr),
              0)
        << vips_error_buffer();
    ASSERT_EQ(vips_pngsave(image, png_.c_str(), nullptr), 0) << vips_error_buffer();
    g_object_unref(image);
  }

  mltool::testing::TempDir tmp_;
  std::string strip_ = tmp_ / "strip.tif";
  std::string png_ = tmp_ / "flat.png";
  RgbImage picture_;
};

}  // namespace

TEST_F(SlideIoFlat, OpensAsOneLevelWithTheFileResolution) {
  for (const auto& [path, vendor] : {std::pair{strip_, "flat-tiff"}, std::pair{png_, "flat-png"}}) {
    const Slide slide = Slide::open(path);
    EXPECT_EQ(slide.vendor(), vendor);
    ASSERT_NE(slide.flat_info(), nullptr);
    const auto& g = slide.geometry();
    ASSERT_EQ(g.levels.size(), 1u);
    EXPECT_EQ(g.levels[0].width, kWidth);
    EXPECT_EQ(g.levels[0].height, kHeight);
    ASSERT_TRUE(g.mpp_x.has_value()) << path;
    EXPECT_NEAR(*g.mpp_x, 0.5, 1e-3) << path;
    EXPECT_FALSE(slide.property("openslide.quickhash-1").has_value());
  }
}

TEST_F(SlideIoFlat, RandomReadsAndTheInOrderReaderGiveThePixels) {
  const Slide slide = Slide::open(strip_);
  std::vector<std::uint8_t> rgb(64 * 40 * 3);
  slide.read_rgb(300, 200, 0, 64, 40, rgb.data());
  EXPECT_TRUE(rgb == crop(picture_, 300, 200, 64, 40).pixels);
  auto reader = mltool::slide::make_region_reader(slide, 0, mltool::slide::ReaderChoice::automatic);
  EXPECT_STREQ(reader->name(), "libvips-flat");
  EXPECT_TRUE(reader->in_order());
  // Row-major, overlapping bands, then a read past the right and bottom edges (white there).
  for (const auto& [x, y] : {std::pair{0, 0}, std::pair{500, 0}, std::pair{10, 30},
                             std::pair{300, 200}, std::pair{0, 400}}) {
    reader->read_rgb(x, y, 64, 40, rgb.data());
    EXPECT_TRUE(rgb == crop(picture_, x, y, 64, 40).pixels) << x << "," << y;
  }
  reader->read_rgb(kWidth - 8, kHeight - 4, 16, 8, rgb.data());
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) {
        const int want = x < 8 && y < 4 ? pixel(picture_, kWidth - 8 + x, kHeight - 4 + y)[c] : 255;
        EXPECT_EQ(rgb[(y * 16 + x) * 3 + c], want) << x << "," << y;
      }
  EXPECT_THROW(reader->read_rgb(0, 0, 8, 8, rgb.data()), std::logic_error) << "rows already gone";
}

TEST_F(SlideIoFlat, ThumbnailIsTheShrunkImage) {
  const Slide slide = Slide::open(png_);
  const RgbImage thumb = mltool::slide::read_thumbnail(slide, 0, 0.25);
  EXPECT_EQ(thumb.width, 150);
  EXPECT_EQ(thumb.height, 113);  // round(450 / 4)
  const RgbImage ref = mltool::slide::resize(picture_.pixels.data(), kWidth, kHeight, 150, 113);
  EXPECT_LT(mean_abs_diff(thumb, ref), 2.0);
}

TEST(SlideIoFlatMpp, PlaceholderResolutionsCountAsNone) {
  mltool::slide::init_vips();
  mltool::testing::TempDir tmp;
  const RgbImage picture = test_picture(64, 48);
  for (const double dpi : {72.0, 96.0, 300.0}) {
    VipsImage* image = vips_image_new_from_memory_copy(picture.pixels.data(), picture.pixels.size(),
                                                       64, 48, 3, VIPS_FORMAT_UCHAR);
    image->Xres = image->Yres = dpi / 25.4;
    const std::string path = tmp / ("p" + std::to_string(static_cast<int>(dpi)) + ".png");
    ASSERT_EQ(vips_pngsave(image, path.c_str(), nullptr), 0) << vips_error_buffer();
    g_object_unref(image);
    EXPECT_FALSE(Slide::open(path).geometry().mpp_x.has_value()) << dpi << " dpi";
  }
}

TEST(SlideMppTable, ReadsSlideAndMppColumnsAndNamesTheLineOfABadRow) {
  mltool::testing::TempDir tmp;
  const std::string path = tmp / "mpp.csv";
  mltool::util::write_file_atomic(path,
                                  "site,mpp,slide\r\nA,0.25,S1\nB, 0.5 ,\"/data/x, y.svs\"\n\n");
  const auto table = mltool::slide::load_mpp_table(path);
  EXPECT_EQ(table.path, path);
  ASSERT_EQ(table.mpp.size(), 2u);
  EXPECT_DOUBLE_EQ(table.mpp.at("S1"), 0.25);
  EXPECT_DOUBLE_EQ(table.mpp.at("/data/x, y.svs"), 0.5);
  const auto error = [&](const std::string& text) {
    mltool::util::write_file_atomic(path, text);
    return error_of<InputError>([&] { mltool::slide::load_mpp_table(path); });
  };
  EXPECT_TRUE(contains(error("slide,um\nS1,0.25\n"), path + ":1")) << "no mpp column";
  EXPECT_TRUE(contains(error("slide,mpp\nS1,0.25\nS2,abc\n"), path + ":3"));
  EXPECT_TRUE(contains(error("slide,mpp\nS1,352.78\n"), path + ":2")) << "72 dpi is no mpp";
  EXPECT_TRUE(contains(error("slide,mpp\nS1,0.25\nS1,0.5\n"), "listed twice"));
  EXPECT_TRUE(contains(error(""), "empty"));
}
