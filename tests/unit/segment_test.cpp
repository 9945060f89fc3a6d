// Tests of the slide side of `--tissue MODEL.pt` (segmenter.hpp): the contract's checks, the
// windows' geometry, the stitching (no pixel classified within S/8 of its window's border), the
// class map's cells, and the integral of counts that tile shares come from. The model is a fake
// Segmenter written here (no LibTorch); the TorchScript half is tested by segmenter_test.py.
#include <gtest/gtest.h>
#include <vips/vips.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mltool/slide/image.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/segmenter.hpp"
#include "mltool/slide/tissue.hpp"
#include "mltool/util/error.hpp"
#include "support/temp_dir.hpp"

namespace {

using mltool::slide::ClassMap;
using mltool::slide::IntegralMask;
using mltool::slide::Mask;
using mltool::slide::parse_segmenter_contract;
using mltool::slide::SegmenterContract;

const char* kGood =
    R"({"kind": "segmenter", "mpp": 2, "input_size": 64, "classes": ["bg", "tissue", "fold", "edge"],
        "tissue": ["tissue"], "artifacts": ["fold"]})";

std::string refusal(const std::string& text) {
  try {
    parse_segmenter_contract(text, "m.pt");
  } catch (const mltool::InputError& e) {
    return e.what();
  }
  return "";
}

TEST(SegmenterContract, ReadsTheFields) {
  const SegmenterContract c = parse_segmenter_contract(kGood, "m.pt");
  EXPECT_EQ(c.mpp, 2);
  EXPECT_EQ(c.input_size, 64);
  ASSERT_EQ(c.classes.size(), 4u);
  EXPECT_TRUE(c.is_tissue(1));
  EXPECT_FALSE(c.is_tissue(2));
  EXPECT_TRUE(c.is_artifact(2));
  EXPECT_FALSE(c.is_artifact(0));
  EXPECT_FALSE(c.is_tissue(9));
}

TEST(SegmenterContract, RefusesWhatIsMissingOrWrongNamingTheFileAndField) {
  EXPECT_NE(refusal("not json").find("m.pt: mltool.json is not a JSON object"), std::string::npos);
  EXPECT_NE(refusal(R"({"kind": "patch"})").find("'kind' is \"patch\""), std::string::npos);
  EXPECT_NE(refusal(R"({"kind": "segmenter", "input_size": 64})").find("'mpp'"), std::string::npos);
  EXPECT_NE(refusal(R"({"kind": "segmenter", "mpp": 1, "input_size": 64.5, "classes": []})")
                .find("whole number"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"kind": "segmenter", "mpp": 1, "input_size": 64, "classes": ["a"],
                        "tissue": ["a"]})")
                .find("2 to 255"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"kind": "segmenter", "mpp": 1, "input_size": 64, "classes": ["a", "a"],
                        "tissue": ["a"]})")
                .find("'a' twice"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"kind": "segmenter", "mpp": 1, "input_size": 64, "classes": ["a", "b"],
                        "tissue": ["c"]})")
                .find("'c', which is not in 'classes'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"kind": "segmenter", "mpp": 1, "input_size": 64, "classes": ["a", "b"],
                        "tissue": ["a"], "artifacts": ["a"]})")
                .find("both in 'tissue' and in 'artifacts'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"kind": "segmenter", "mpp": 1, "input_size": 64, "classes": ["a", "b"],
                        "tissue": []})")
                .find("at least one"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"kind": "segmenter", "mpp": 0, "input_size": 64})").find("0.05..100"),
            std::string::npos);
}

TEST(SegmenterWindows, CountCoversTheLengthAtThreeQuartersOfTheSize) {
  EXPECT_EQ(mltool::slide::window_count(48, 64), 1);  // stride 48
  EXPECT_EQ(mltool::slide::window_count(49, 64), 2);
  EXPECT_EQ(mltool::slide::window_count(480, 64), 10);
}

TEST(IntegralMaskCounts, UnitOneEqualsTheMask) {
  Mask m{3, 2, {1, 0, 1, 1, 1, 0}, -1};
  const IntegralMask a(m), b(3, 2, std::vector<std::uint16_t>{1, 0, 1, 1, 1, 0}, 1);
  for (double x0 : {0.0, 0.5, 1.25})
    for (double x1 : {1.5, 2.0, 3.0})
      EXPECT_DOUBLE_EQ(a.fraction(x0, 0, x1, 2), b.fraction(x0, 0, x1, 2));
}

TEST(IntegralMaskCounts, CountsAreSharesOfTheUnit) {
  // cells of 2 x 2 model pixels: 4, 2, 0, 1 of them tissue
  const IntegralMask m(2, 2, std::vector<std::uint16_t>{4, 2, 0, 1}, 4);
  EXPECT_DOUBLE_EQ(m.fraction(0, 0, 2, 2), 7.0 / 16);
  EXPECT_DOUBLE_EQ(m.fraction(0, 0, 1, 1), 1.0);
  EXPECT_DOUBLE_EQ(m.fraction(1, 0, 2, 1), 0.5);
  EXPECT_DOUBLE_EQ(m.fraction(0.5, 0, 1.5, 1), 0.75);  // half of each, evenly spread
}

// A fake model: a pixel within S/8 of its window's border is "edge" (3), else its colour
// decides: dark -> fold (2), coloured -> tissue (1), else background (0).
class FakeSegmenter final : public mltool::slide::Segmenter {
 public:
  explicit FakeSegmenter(SegmenterContract c) : c_(std::move(c)) {}
  const SegmenterContract& contract() const override { return c_; }
  int batch() const override { return 3; }
  void classify(const std::uint8_t* rgb, int n, std::uint8_t* classes) override {
    const int s = c_.input_size, m = s / 8;
    ++calls;
    for (int k = 0; k < n; ++k)
      for (int y = 0; y < s; ++y)
        for (int x = 0; x < s; ++x) {
          const std::size_t i = (static_cast<std::size_t>(k) * s + y) * s + x;
          const std::uint8_t* p = rgb + i * 3;
          const int hi = std::max({p[0], p[1], p[2]}), lo = std::min({p[0], p[1], p[2]});
          std::uint8_t cls = hi - lo < 20 ? 0 : hi < 100 ? 2 : 1;
          if (x < m || y < m || x >= s - m || y >= s - m) cls = 3;
          classes[i] = cls;
        }
  }
  int calls = 0;

 private:
  SegmenterContract c_;
};

// A 400 x 300 slide at 0.5 µm/px: white, a pink block, a dark purple band inside it.
class SegmentSlide : public ::testing::Test {
 protected:
  void SetUp() override {
    mltool::slide::init_vips();
    std::vector<std::uint8_t> px(static_cast<std::size_t>(kW) * kH * 3, 255);
    for (int y = 60; y < 240; ++y)
      for (int x = 40; x < 360; ++x) {
        const bool band = x >= 200 && x < 240;
        const std::uint8_t c[3] = {static_cast<std::uint8_t>(band ? 80 : 230),
                                   static_cast<std::uint8_t>(band ? 30 : 150),
                                   static_cast<std::uint8_t>(band ? 90 : 190)};
        std::copy(c, c + 3, px.begin() + (static_cast<std::size_t>(y) * kW + x) * 3);
      }
    VipsImage* image =
        vips_image_new_from_memory_copy(px.data(), px.size(), kW, kH, 3, VIPS_FORMAT_UCHAR);
    ASSERT_NE(image, nullptr);
    const int rc = vips_tiffsave(
        image, path_.c_str(), "tile", TRUE, "tile_width", 128, "tile_height", 128, "pyramid", TRUE,
        "compression", VIPS_FOREIGN_TIFF_COMPRESSION_NONE, "xres", 2000.0, "yres", 2000.0, nullptr);
    g_object_unref(image);
    ASSERT_EQ(rc, 0) << vips_error_buffer();
  }
  static constexpr int kW = 400, kH = 300;
  mltool::testing::TempDir tmp_;
  std::string path_ = tmp_ / "slide.tiff";
};

TEST_F(SegmentSlide, NoPixelIsClassifiedNearItsWindowsBorder) {
  const auto slide = mltool::slide::Slide::open(path_);
  FakeSegmenter model(parse_segmenter_contract(kGood, "m.pt"));  // 2 µm/px: 100 x 75, S = 64
  const ClassMap map = mltool::slide::segment_slide(slide, 0.5, model, 2);
  EXPECT_EQ(map.model_width, 100);
  EXPECT_EQ(map.model_height, 75);
  EXPECT_EQ(map.cell, 1);
  EXPECT_DOUBLE_EQ(map.level0_per_pixel, 4.0);
  EXPECT_EQ(map.windows, 3 * 2);  // ceil(100 / 48) x ceil(75 / 48)
  ASSERT_EQ(map.class_pixels.size(), 4u);
  EXPECT_EQ(map.class_pixels[3], 0) << "a pixel took the class a window gives its border";
  EXPECT_GT(map.class_pixels[1], 0);
  EXPECT_GT(map.class_pixels[2], 0);
  // The band at level-0 x 200..240 is model x 50..60: fold there, tissue beside it.
  const auto at = [&](int x, int y) {
    return map.classes[static_cast<std::size_t>(y) * map.width + x];
  };
  EXPECT_EQ(at(55, 37), 2);
  EXPECT_EQ(at(30, 37), 1);
  EXPECT_EQ(at(2, 2), 0);
  EXPECT_EQ(map.tissue[37 * map.width + 30], 1);
  EXPECT_EQ(map.artifact[37 * map.width + 55], 1);
}

TEST_F(SegmentSlide, ACoarserModelThanTheSlideIsReadFromALevel_AFinerOneIsRefused) {
  const auto slide = mltool::slide::Slide::open(path_);
  auto fine = parse_segmenter_contract(kGood, "m.pt");
  fine.mpp = 0.25;
  FakeSegmenter model(fine);
  EXPECT_THROW(mltool::slide::segment_slide(slide, 0.5, model, 1), mltool::InputError);
}

}  // namespace
