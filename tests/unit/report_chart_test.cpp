// report::Svg and write_chart (mltool/report/chart.hpp): round ticks, escaping, and the PNG libvips
// renders of the SVG (sizes, colours where shapes were drawn, ink where text was).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mltool/io/image_codec.hpp"
#include "mltool/report/chart.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/temp_dir.hpp"

namespace mltool::report {
namespace {

TEST(Chart, TicksAreRoundNumbersCoveringTheRange) {
  EXPECT_EQ(nice_ticks(0, 1), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  EXPECT_EQ(nice_ticks(0, 3000, 4), (std::vector<double>{0, 1000, 2000, 3000}));
  EXPECT_EQ(nice_ticks(-3.3, 17), (std::vector<double>{0, 5, 10, 15}));
  EXPECT_EQ(nice_ticks(0, 137, 4), (std::vector<double>{0, 50, 100}));
  const auto t = nice_ticks(0.013, 0.087);
  ASSERT_GE(t.size(), 3u);
  for (std::size_t i = 1; i < t.size(); ++i) EXPECT_NEAR(t[i] - t[i - 1], 0.01, 1e-12);
  EXPECT_EQ(nice_ticks(5, 5), (std::vector<double>{5}));  // an empty range: one tick
}

TEST(Chart, TickLabelsHaveTheDecimalsTheStepNeeds) {
  EXPECT_EQ(tick_label(0.1 + 0.2, 0.1), "0.3");
  EXPECT_EQ(tick_label(0.25, 0.25), "0.25");
  EXPECT_EQ(tick_label(1000, 1000), "1000");
  EXPECT_EQ(tick_label(-1e-17, 0.2), "0.0");  // never "-0.0"
  EXPECT_EQ(tick_label(2.5, 0.5), "2.5");
}

TEST(Chart, SvgPathSitsBesideThePng) {
  EXPECT_EQ(svg_path_of("out/km.png"), "out/km.svg");
  EXPECT_EQ(svg_path_of("a.b/plot"), "a.b/plot.svg");
  EXPECT_EQ(svg_path_of("x.svg"), "x.svg");
  EXPECT_EQ(svg_path_of(".hidden/.png"), ".hidden/.png.svg");
}

TEST(Chart, DocumentNamesTheFontAndKeepsTextAsText) {
  Svg svg(300, 200);
  svg.text(10, 20, "Time <days>", 16, {0, 0, 0}, Anchor::middle, true, -90);
  const std::string doc = svg.str();
  EXPECT_EQ(doc.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg ", 0), 0u);
  EXPECT_NE(doc.find("font-family=\"DejaVu Sans, sans-serif\""), std::string::npos);
  EXPECT_NE(doc.find(">Time &lt;days&gt;</text>"), std::string::npos);
  EXPECT_NE(doc.find("transform=\"rotate(-90 10 20)\""), std::string::npos);
  EXPECT_NE(doc.find("text-anchor=\"middle\""), std::string::npos);
  EXPECT_EQ(svg.element().find("<?xml"), std::string::npos);
}

#ifdef MLTOOL_HAVE_SLIDE
TEST(Chart, WriteChartRendersTheSvgToAPngOfItsSize) {
  const testing::TempDir tmp;
  const std::string& dir = tmp.path();
  Svg svg(300, 200);
  svg.rect(10, 10, 100, 50, {214, 39, 40});
  svg.line(0, 150, 300, 150, {31, 119, 180}, 4);
  svg.text(150, 110, "Survival", 30, {0, 0, 0}, Anchor::middle);
  const std::string png_path = util::join_path(dir, "c.png");
  write_chart(png_path, svg);
  EXPECT_EQ(util::read_file(util::join_path(dir, "c.svg")), svg.str());
  const std::string png = util::read_file(png_path);
  io::RgbImage image;
  io::decode_image(png.data(), png.size(), image, png_path);
  ASSERT_EQ(image.width, 300);
  ASSERT_EQ(image.height, 200);
  const auto at = [&](int x, int y) {
    const auto* p = &image.pixels[(static_cast<std::size_t>(y) * 300 + x) * 3];
    return std::vector<int>{p[0], p[1], p[2]};
  };
  EXPECT_EQ(at(60, 35), (std::vector<int>{214, 39, 40}));      // inside the rectangle
  EXPECT_EQ(at(150, 150), (std::vector<int>{31, 119, 180}));   // on the line
  EXPECT_EQ(at(290, 190), (std::vector<int>{255, 255, 255}));  // the white background
  // The text's ink: dark pixels in its box, centred on x = 150, none far beside it.
  int dark = 0, left = 300, right = 0;
  for (int y = 80; y < 115; ++y)
    for (int x = 0; x < 300; ++x)
      if (at(x, y)[0] < 100) ++dark, left = std::min(left, x), right = std::max(right, x);
  EXPECT_GT(dark, 150);
  EXPECT_NEAR((left + right) / 2.0, 150, 6);
  // Eight glyphs of 30 px, not a blob: a quarter em a glyph at least, which the narrowest
  // fallback font clears (77 px where fontconfig has no configuration; 100+ with DejaVu).
  EXPECT_GT(right - left, 60);
  // Asking for FILE.svg writes the SVG alone.
  const std::string only = util::join_path(dir, "only.svg");
  write_chart(only, svg);
  EXPECT_EQ(util::read_file(only), svg.str());
}
#endif

}  // namespace
}  // namespace mltool::report
