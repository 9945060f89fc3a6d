// Tests of the QC pictures of `mltool tile --qc` (qc.hpp): the tissue outline on a synthetic
// mask coarser than the picture, kept tiles as boxes or as their union's outline, the caption
// strip below the slide, the caption's text, and the run's index.html.
#include "mltool/slide/qc.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "mltool/util/file.hpp"
#include "support/temp_dir.hpp"

using mltool::io::RgbImage;
using mltool::slide::Box;
using mltool::slide::caption_lines;
using mltool::slide::kKeptOutline;
using mltool::slide::kTissueOutline;
using mltool::slide::Mask;
using mltool::slide::qc_picture;
using mltool::slide::QcCaption;
using mltool::slide::QcOverlay;
using mltool::slide::SlideReport;
using mltool::slide::SlideStatus;

namespace {

// A light pink "slide" with a gentle ramp, so no pixel happens to be an outline colour.
RgbImage slide_picture(int w, int h) {
  RgbImage img{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      std::uint8_t* p = &img.pixels[(static_cast<std::size_t>(y) * w + x) * 3];
      p[0] = 230, p[1] = static_cast<std::uint8_t>(180 + 40 * x / w), p[2] = 210;
    }
  return img;
}

std::vector<std::uint8_t> at(const RgbImage& img, int x, int y) {
  const auto* p = &img.pixels[(static_cast<std::size_t>(y) * img.width + x) * 3];
  return {p[0], p[1], p[2]};
}

const std::vector<std::uint8_t> kGreen(kTissueOutline, kTissueOutline + 3);
const std::vector<std::uint8_t> kBlue(kKeptOutline, kKeptOutline + 3);

// A 20 × 10 mask with tissue in columns 5..14 and rows 2..7: on a 200 × 100 picture, ten
// picture pixels per mask pixel, its boundary lies at x = 50 and 150, y = 20 and 80.
Mask block_mask() {
  Mask m{20, 10, std::vector<std::uint8_t>(200, 0)};
  for (int y = 2; y < 8; ++y)
    for (int x = 5; x < 15; ++x) m.data[y * 20 + x] = 1;
  return m;
}

std::string read(const std::string& path) { return mltool::util::read_file(path); }

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(QcPicture, OutlinesTheScaledMaskBoundaryTwoPixelsWide) {
  const RgbImage in = slide_picture(200, 100);
  const Mask mask = block_mask();
  QcOverlay overlay;
  overlay.tissue = &mask;
  const RgbImage out = qc_picture(in, overlay);
  ASSERT_EQ(out.width, 200);
  ASSERT_EQ(out.height, 100);  // no caption asked for
  // One pixel each side of every boundary, and nothing else.
  for (const auto& [x, y] : std::vector<std::pair<int, int>>{
           {49, 50}, {50, 50}, {149, 50}, {150, 50}, {100, 19}, {100, 20}, {100, 79}, {100, 80}})
    EXPECT_EQ(at(out, x, y), kGreen) << x << "," << y;
  for (const auto& [x, y] : std::vector<std::pair<int, int>>{
           {48, 50}, {51, 50}, {100, 50}, {100, 18}, {100, 21}, {10, 10}, {190, 90}})
    EXPECT_EQ(at(out, x, y), at(in, x, y)) << x << "," << y;
  int green = 0;
  for (int y = 0; y < 100; ++y)
    for (int x = 0; x < 200; ++x) green += at(out, x, y) == kGreen;
  // The box is 100 × 60: its inner ring (2 · (100 + 60) − 4) and outer ring (no corners),
  // less a few pixels at each corner, which bilinear scaling rounds off.
  EXPECT_LE(green, 2 * (100 + 60) - 4 + 2 * (100 + 60));
  EXPECT_GE(green, 2 * (100 + 60) - 4 + 2 * (100 + 60) - 4 * 10);
}

TEST(QcPicture, OutlineWidthGrowsWithThePicture) {
  const RgbImage in = slide_picture(2000, 1000);  // long side ≈ 2 × 1024: 2 px each side
  const Mask mask = block_mask();
  QcOverlay overlay;
  overlay.tissue = &mask;
  const RgbImage out = qc_picture(in, overlay);
  for (int x = 497; x <= 502; ++x) EXPECT_EQ(at(out, x, 500) == kGreen, x >= 498 && x <= 501) << x;
}

TEST(QcPicture, WideTilesGetABoxEach) {
  const RgbImage in = slide_picture(200, 100);
  QcOverlay overlay;
  overlay.kept = {Box{10, 10, 40, 40}, Box{40, 10, 70, 40}};
  const RgbImage out = qc_picture(in, overlay);
  EXPECT_EQ(at(out, 10, 25), kBlue);
  EXPECT_EQ(at(out, 39, 25), kBlue) << "the first box's right side";
  EXPECT_EQ(at(out, 40, 25), kBlue) << "the second box's left side";
  EXPECT_EQ(at(out, 69, 25), kBlue);
  EXPECT_EQ(at(out, 25, 10), kBlue);
  EXPECT_EQ(at(out, 25, 39), kBlue);
  EXPECT_EQ(at(out, 25, 25), at(in, 25, 25)) << "inside";
  EXPECT_EQ(at(out, 70, 25), at(in, 70, 25)) << "outside";
}

TEST(QcPicture, NarrowTilesGetTheirUnionOutlined) {
  const RgbImage in = slide_picture(200, 100);
  QcOverlay overlay;
  for (int i = 0; i < 4; ++i)
    overlay.kept.push_back(Box{10.0 + 5 * i, 10, 15.0 + 5 * i, 15});  // 5 px: under kMinBoxPx
  const RgbImage out = qc_picture(in, overlay);
  EXPECT_EQ(at(out, 10, 12), kBlue);
  EXPECT_EQ(at(out, 29, 12), kBlue);
  EXPECT_EQ(at(out, 20, 10), kBlue);
  EXPECT_EQ(at(out, 20, 14), kBlue);
  EXPECT_EQ(at(out, 14, 12), at(in, 14, 12)) << "no line between neighbouring tiles";
  EXPECT_EQ(at(out, 15, 12), at(in, 15, 12));
  EXPECT_EQ(at(out, 9, 12), at(in, 9, 12)) << "the outline lies inside the union";
}

TEST(QcPicture, CaptionStripBelowTheSlideWithDarkText) {
  const RgbImage in = slide_picture(300, 200);
  QcOverlay overlay;
  overlay.caption = {"slide-1", "level 0: 4096 × 3072 px, 0.2500 µm/px (metadata)"};
  const RgbImage out = qc_picture(in, overlay);
  ASSERT_EQ(out.width, 300);
  ASSERT_GT(out.height, 200 + 2 * 10) << "two lines of text at least 10 px high";
  EXPECT_TRUE(std::equal(in.pixels.begin(), in.pixels.end(), out.pixels.begin()))
      << "the slide is untouched above the strip";
  int dark = 0, white = 0;
  for (int y = 201; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x) {
      const auto p = at(out, x, y);
      EXPECT_TRUE(p[0] == p[1] && p[1] == p[2]) << "grey text on white at " << x << "," << y;
      dark += p[0] < 100;
      white += p[0] == 255;
    }
  EXPECT_GT(dark, 100) << "text was drawn";
  EXPECT_GT(white, (out.height - 201) * out.width / 2) << "on a white strip";
  EXPECT_EQ(qc_picture(in, overlay).pixels, out.pixels) << "deterministic";
}

TEST(QcPicture, CaptionSaysWhatChoseTheTiles) {
  QcCaption c;
  c.id = "S1", c.width = 4096, c.height = 3072, c.mpp = 0.25, c.mpp_source = "metadata";
  c.target_mpp = 0.5, c.tile_size = 256, c.tiles = 15, c.grid_tiles = 48;
  c.tissue_threshold = 37, c.tissue_fraction = 0.3125, c.min_tissue = 0.5;
  c.reader = "libvips-tiff";
  std::string text;
  for (const auto& line : caption_lines(c)) text += line + "\n";
  EXPECT_EQ(caption_lines(c).front(), "S1");
  for (const char* part : {"0.2500 µm/px (metadata)", "15 / 48", "256 px at 0.500 µm/px", "> 37",
                           "31.2%", "50%", "libvips-tiff", "4096 × 3072"})
    EXPECT_TRUE(has(text, part)) << part << " in\n" << text;
  c.tissue_threshold.reset(), c.tissue_fraction.reset(), c.mpp.reset(), c.mpp_source = "none";
  text.clear();
  for (const auto& line : caption_lines(c)) text += line + "\n";
  EXPECT_TRUE(has(text, "tissue: none")) << text;
  EXPECT_TRUE(has(text, "µm/px unknown (none)")) << text;
  // With an estimate, the metadata says why it is unusable (a 72-dpi TIFF), not just "none".
  c.estimate = "0.553 µm/px (0.445–0.686)";
  c.metadata_problem = "placeholder 72 dpi";
  text.clear();
  for (const auto& line : caption_lines(c)) text += line + "\n";
  EXPECT_TRUE(has(text, "µm/px metadata: unusable: placeholder 72 dpi; estimated")) << text;
  c.metadata_problem = "missing";
  text.clear();
  for (const auto& line : caption_lines(c)) text += line + "\n";
  EXPECT_TRUE(has(text, "µm/px metadata: none; estimated")) << text;
  c.metadata_mpp = 0.25;
  text.clear();
  for (const auto& line : caption_lines(c)) text += line + "\n";
  EXPECT_TRUE(has(text, "µm/px metadata: 0.2500 µm/px; estimated")) << text;
}

TEST(QcIndex, ListsEverySlideMarksEmptyAndFailedAndEscapes) {
  mltool::testing::TempDir dir;
  mltool::util::write_file_atomic(dir / "a b.png", "not read");
  std::vector<SlideReport> slides(4);
  slides[0].id = "a b", slides[0].status = SlideStatus::tiled, slides[0].tiles = 12;
  slides[0].grid_tiles = 40, slides[0].tissue_fraction = 0.25, slides[0].mpp = 0.5;
  slides[0].mpp_source = "override";
  slides[1].id = "W", slides[1].status = SlideStatus::empty, slides[1].grid_tiles = 12;
  slides[2].id = "x<&>", slides[2].status = SlideStatus::failed,
  slides[2].error = "x<&>.svs: broken";
  slides[3].id = "old", slides[3].status = SlideStatus::skipped, slides[3].tiles = 3;
  mltool::slide::write_qc_index(dir / "index.html", slides);
  const std::string html = read(dir / "index.html");
  EXPECT_TRUE(has(html, "<img src=\"a%20b.png\"")) << html;
  EXPECT_FALSE(has(html, "src=\"W.png\"")) << "no picture there: none linked";
  EXPECT_TRUE(has(html, "tiles 12 / 40 grid, tissue 25.0%")) << html;
  EXPECT_TRUE(has(html, "0.5000 µm/px (override)")) << html;
  EXPECT_TRUE(has(html, "class=\"card empty\" id=\"W\"")) << html;
  EXPECT_TRUE(has(html, "NO TILES")) << html;
  EXPECT_TRUE(has(html, "class=\"card failed\" id=\"x&lt;&amp;&gt;\"")) << html;
  EXPECT_TRUE(has(html, "x&lt;&amp;&gt;.svs: broken")) << html;
  EXPECT_FALSE(has(html, "x<&>")) << "every text escaped";
  EXPECT_TRUE(has(html, "4 slides: 1 tiled, 1 empty, 1 skipped, 1 failed; 15 tiles")) << html;
}
