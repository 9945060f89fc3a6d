#include <gtest/gtest.h>

#include <string>

#include "mltool/slide/geometry.hpp"
#include "mltool/util/error.hpp"
#include "support/errors.hpp"

using mltool::slide::Level;
using mltool::slide::make_grid;
using mltool::slide::plan_read;
using mltool::slide::ReadPlan;
using mltool::slide::slide_mpp;
using mltool::slide::SlideGeometry;
using mltool::slide::tile_grid;
using mltool::testing::error_of;

namespace {

// A 0.25 µm/px slide with downsamples 1, 4, 16.
SlideGeometry pyramid() {
  SlideGeometry g;
  g.levels = {{40000, 30000, 1.0}, {10000, 7500, 4.0}, {2500, 1875, 16.0}};
  g.mpp_x = 0.25;
  g.mpp_y = 0.25;
  return g;
}

}  // namespace

TEST(SlideGeometry, HalfMicronReadsTwiceTheTileAtLevelZero) {
  const ReadPlan p = plan_read(pyramid(), 0.5, std::nullopt, 256, "a.svs");
  EXPECT_EQ(p.level, 0);
  EXPECT_DOUBLE_EQ(p.target_downsample, 2.0);
  EXPECT_EQ(p.read_size_level, 512);
}

TEST(SlideGeometry, OneMicronIsExactlyLevelOne) {
  const ReadPlan p = plan_read(pyramid(), 1.0, std::nullopt, 256, "a.svs");
  EXPECT_EQ(p.level, 1);
  EXPECT_DOUBLE_EQ(p.level_downsample, 4.0);
  EXPECT_EQ(p.read_size_level, 256);
}

TEST(SlideGeometry, NonIntegerReadSizeRoundsToNearest) {
  // 256 * 0.3 / 0.25 = 307.2 → 307; 256 * 0.325 / 0.25 = 332.8 → 333.
  EXPECT_EQ(plan_read(pyramid(), 0.3, std::nullopt, 256, "a.svs").read_size_level, 307);
  const ReadPlan p = plan_read(pyramid(), 0.325, std::nullopt, 256, "a.svs");
  EXPECT_EQ(p.level, 0);
  EXPECT_EQ(p.read_size_level, 333);
}

TEST(SlideGeometry, NativeResolutionAndCoarserThanAllLevels) {
  EXPECT_EQ(plan_read(pyramid(), 0.25, std::nullopt, 256, "a.svs").read_size_level, 256);
  const ReadPlan p = plan_read(pyramid(), 8.0, std::nullopt, 256, "a.svs");
  EXPECT_EQ(p.level, 2);
  EXPECT_EQ(p.read_size_level, 512);  // 32 / 16 * 256
  const ReadPlan q = plan_read(pyramid(), 2.0, std::nullopt, 256, "a.svs");
  EXPECT_EQ(q.level, 1);
  EXPECT_EQ(q.read_size_level, 512);
}

TEST(SlideGeometry, ScannerDownsampleJitterStillPicksTheLevel) {
  SlideGeometry g = pyramid();
  g.levels[1].downsample = 4.000345;
  const ReadPlan p = plan_read(g, 1.0, std::nullopt, 256, "a.svs");
  EXPECT_EQ(p.level, 1);
  EXPECT_EQ(p.read_size_level, 256);
}

TEST(SlideGeometry, UpsamplingIsRefusedNamingBothResolutions) {
  const std::string m =
      error_of<mltool::UsageError>([] { plan_read(pyramid(), 0.2, std::nullopt, 256, "a.svs"); });
  EXPECT_NE(m.find("a.svs"), std::string::npos) << m;
  EXPECT_NE(m.find("0.2"), std::string::npos) << m;
  EXPECT_NE(m.find("0.25"), std::string::npos) << m;
}

TEST(SlideGeometry, MissingMppNamesTheSlideAndSuggestsSlideMppAndLevel) {
  SlideGeometry g = pyramid();
  g.mpp_x.reset();
  g.mpp_y.reset();
  const std::string m =
      error_of<mltool::InputError>([&] { plan_read(g, 0.5, std::nullopt, 256, "b.ndpi"); });
  EXPECT_EQ(m,
            "b.ndpi: no usable µm/px metadata (openslide.mpp-x or TIFF resolution; a placeholder "
            "such as 72 dpi, or a value outside 0.05-20 µm/px, counts as none); give the slide's "
            "µm per level-0 pixel with --slide-mpp X (or per slide with --slide-mpp-table CSV), "
            "estimate it from the tissue with --mpp-from-content, take 10 / the objective power "
            "the slide declares with --mpp-from-power, or tile a pyramid level with --level N");
  // --level needs no metadata.
  const ReadPlan p = plan_read(g, std::nullopt, 2, 256, "b.ndpi");
  EXPECT_EQ(p.level, 2);
  EXPECT_FALSE(p.mpp.has_value());
}

TEST(SlideGeometry, LevelPathReadsTheTileAtThatLevel) {
  const ReadPlan p = plan_read(pyramid(), std::nullopt, 1, 224, "a.svs");
  EXPECT_EQ(p.level, 1);
  EXPECT_DOUBLE_EQ(p.target_downsample, 4.0);
  EXPECT_EQ(p.read_size_level, 224);
}

TEST(SlideGeometry, LevelOutOfRangeListsTheLevels) {
  const std::string m =
      error_of<mltool::UsageError>([] { plan_read(pyramid(), std::nullopt, 3, 256, "a.svs"); });
  EXPECT_NE(m.find("--level 3"), std::string::npos) << m;
  EXPECT_NE(m.find("2 (2500x1875, downsample 16)"), std::string::npos) << m;
  EXPECT_THROW(plan_read(pyramid(), std::nullopt, -1, 256, "a.svs"), mltool::UsageError);
}

TEST(SlideGeometry, ExactlyOneOfMppAndLevel) {
  EXPECT_THROW(plan_read(pyramid(), 0.5, 1, 256, "a.svs"), mltool::UsageError);
  EXPECT_THROW(plan_read(pyramid(), std::nullopt, std::nullopt, 256, "a.svs"), mltool::UsageError);
  EXPECT_THROW(plan_read(pyramid(), -0.5, std::nullopt, 256, "a.svs"), mltool::UsageError);
  EXPECT_THROW(plan_read(pyramid(), 0.5, std::nullopt, 0, "a.svs"), mltool::UsageError);
  EXPECT_THROW(plan_read(SlideGeometry{}, 0.5, std::nullopt, 256, "a.svs"), mltool::InputError);
}

TEST(SlideGeometry, AnisotropicPixelsUseTheMean) {
  SlideGeometry g = pyramid();
  g.mpp_y = 0.27;  // 8% apart
  EXPECT_DOUBLE_EQ(*mltool::slide::slide_mpp(g), 0.26);
  g.mpp_y = 0.2501;  // within 1%: mpp_x
  EXPECT_DOUBLE_EQ(*mltool::slide::slide_mpp(g), 0.25);
  g.mpp_x.reset();
  EXPECT_DOUBLE_EQ(*mltool::slide::slide_mpp(g), 0.2501);
}

TEST(TileGrid, OnlyWholeTilesInRowMajorOrder) {
  const Level level0{1000, 700, 1.0};
  SlideGeometry g;
  g.levels = {level0};
  const ReadPlan p = plan_read(g, std::nullopt, 0, 256, "s");
  const auto tiles = tile_grid(level0, p, 256, 0);
  ASSERT_EQ(tiles.size(), 6u);
  EXPECT_EQ(make_grid(level0, p, 256, 0).cols, 3);
  EXPECT_EQ(make_grid(level0, p, 256, 0).rows, 2);
  EXPECT_EQ(tiles[1].x, 256);
  EXPECT_EQ(tiles[1].y, 0);
  EXPECT_EQ(tiles[3].col, 0);
  EXPECT_EQ(tiles[3].row, 1);
  EXPECT_EQ(tiles[3].y, 256);
  EXPECT_EQ(tiles[5].x, 512);
  EXPECT_DOUBLE_EQ(tiles[5].size, 256.0);
}

TEST(TileGrid, TileEndingExactlyAtTheEdgeIsKept) {
  const Level level0{768, 256, 1.0};
  const ReadPlan p{0, 1.0, 1.0, 256, std::nullopt};
  EXPECT_EQ(tile_grid(level0, p, 256, 0).size(), 3u);
  EXPECT_EQ(tile_grid(Level{255, 4000, 1.0}, p, 256, 0).size(), 0u);
}

TEST(TileGrid, OverlapShortensTheStride) {
  const Level level0{1000, 700, 1.0};
  const ReadPlan p{0, 1.0, 1.0, 256, std::nullopt};
  const auto grid = make_grid(level0, p, 256, 56);  // stride 200
  EXPECT_DOUBLE_EQ(grid.stride_level0, 200.0);
  EXPECT_EQ(grid.cols, 4);  // x = 0, 200, 400, 600 (+256 = 856 <= 1000; 800 + 256 > 1000)
  EXPECT_EQ(grid.rows, 3);  // y = 0, 200, 400
  const auto tiles = tile_grid(level0, p, 256, 56);
  EXPECT_EQ(tiles[3].x, 600);
  EXPECT_EQ(tiles[4].y, 200);
}

TEST(TileGrid, DownsampledTilesUseLevelZeroCoordinates) {
  const SlideGeometry g = pyramid();
  const ReadPlan p = plan_read(g, 1.0, std::nullopt, 256, "a.svs");  // 1024 level-0 px
  const auto grid = make_grid(g.levels[0], p, 256, 0);
  EXPECT_EQ(grid.cols, 39);  // 40000 / 1024
  EXPECT_EQ(grid.rows, 29);  // 30000 / 1024
  EXPECT_EQ(grid.at(2, 1).x, 2048);
  EXPECT_EQ(grid.at(2, 1).y, 1024);
}

TEST(TileGrid, FractionalStrideDoesNotDrift) {
  const SlideGeometry g = pyramid();
  const ReadPlan p = plan_read(g, 0.3, std::nullopt, 256, "a.svs");  // 307.2 level-0 px
  const auto grid = make_grid(g.levels[0], p, 256, 0);
  EXPECT_EQ(grid.at(5, 0).x, 1536);     // 5 * 307.2
  EXPECT_EQ(grid.at(100, 0).x, 30720);  // not 100 * 307
  EXPECT_EQ(grid.cols, 130);            // 129 * 307.2 + 307.2 = 39936 <= 40000
  const auto last = grid.at(grid.cols - 1, grid.rows - 1);
  EXPECT_LE(static_cast<double>(last.x) + grid.extent_level0, 40000.0);
  EXPECT_LE(static_cast<double>(last.y) + grid.extent_level0, 30000.0);
  EXPECT_GT(static_cast<double>(grid.at(grid.cols, 0).x) + grid.extent_level0, 40000.0);
}

TEST(TileGrid, RejectsBadOverlap) {
  const ReadPlan p{0, 1.0, 1.0, 256, std::nullopt};
  EXPECT_THROW(make_grid(Level{1000, 1000, 1.0}, p, 256, 256), mltool::UsageError);
  EXPECT_THROW(make_grid(Level{1000, 1000, 1.0}, p, 256, -1), mltool::UsageError);
  EXPECT_THROW(make_grid(Level{1000, 1000, 1.0}, p, 0, 0), mltool::UsageError);
}

TEST(SlideGeometry, ImplausibleMicronsPerPixelCountAsNone) {
  SlideGeometry g = pyramid();
  g.mpp_x = g.mpp_y = 25400.0 / 72;  // 72 dpi read as a resolution: 352.78 µm/px
  EXPECT_FALSE(slide_mpp(g));
  g.mpp_x = g.mpp_y = 0.01;
  EXPECT_FALSE(slide_mpp(g));
  g.mpp_x = g.mpp_y = 0.25;
  EXPECT_DOUBLE_EQ(slide_mpp(g).value_or(-1), 0.25);
  g.mpp_y = 500;  // one usable axis is used alone
  EXPECT_DOUBLE_EQ(slide_mpp(g).value_or(-1), 0.25);
}
