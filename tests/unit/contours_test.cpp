// slide::trace_polygons: exact outlines of binary masks — shapes by hand (holes, saddles, a
// shape touching itself, an island in a lake) and random masks checked pixel by pixel.
#include "mltool/slide/contours.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

using mltool::slide::GridPoint;
using mltool::slide::GridRing;
using mltool::slide::Polygon;
using mltool::slide::trace_polygons;
using mltool::slide::twice_signed_area;

namespace {

// A mask from rows of '#' (foreground) and '.'.
struct Picture {
  int width = 0, height = 0;
  std::vector<std::uint8_t> data;
  explicit Picture(const std::vector<std::string>& rows)
      : width(static_cast<int>(rows[0].size())), height(static_cast<int>(rows.size())) {
    for (const auto& r : rows)
      for (char c : r) data.push_back(c == '#' ? 1 : 0);
  }
  std::vector<Polygon> polygons() const { return trace_polygons(data.data(), width, height); }
};

// Even-odd test of the point (x + 0.5, y + 0.5) against `ring`.
bool contains_centre(const GridRing& ring, int x, int y) {
  bool inside = false;
  for (std::size_t i = 0, n = ring.size(); i < n; ++i) {
    const GridPoint& a = ring[i];
    const GridPoint& b = ring[(i + 1) % n];
    if ((2 * a.y > 2 * y + 1) != (2 * b.y > 2 * y + 1) && 2 * a.x > 2 * x + 1) inside = !inside;
  }
  return inside;
}

bool covers(const Polygon& p, int x, int y) {
  if (!contains_centre(p.exterior, x, y)) return false;
  for (const auto& h : p.holes)
    if (contains_centre(h, x, y)) return false;
  return true;
}

// Every ring: simple (no corner twice), axis-parallel edges, no collinear corners, exterior
// positive and holes negative; each pixel centre is covered by exactly the polygons it
// should be (one for foreground, none for background); the areas add up.
void expect_exact(const Picture& pic, const std::vector<Polygon>& polygons) {
  std::int64_t area2 = 0;
  auto check_ring = [&](const GridRing& ring, bool exterior) {
    ASSERT_GE(ring.size(), 4u);
    std::set<std::pair<int, int>> seen;
    for (std::size_t i = 0, n = ring.size(); i < n; ++i) {
      const GridPoint& a = ring[(i + n - 1) % n];
      const GridPoint& b = ring[i];
      const GridPoint& c = ring[(i + 1) % n];
      EXPECT_TRUE(seen.insert({b.x, b.y}).second) << "corner (" << b.x << ", " << b.y << ") twice";
      EXPECT_TRUE(b.x == c.x || b.y == c.y) << "diagonal edge";
      EXPECT_FALSE((a.x == b.x && b.x == c.x) || (a.y == b.y && b.y == c.y)) << "collinear";
    }
    const std::int64_t a = twice_signed_area(ring);
    EXPECT_EQ(a > 0, exterior);
    area2 += a;
  };
  for (const auto& p : polygons) {
    check_ring(p.exterior, true);
    for (const auto& h : p.holes) check_ring(h, false);
  }
  std::int64_t pixels = 0;
  for (int y = 0; y < pic.height; ++y)
    for (int x = 0; x < pic.width; ++x) {
      const bool fg = pic.data[static_cast<std::size_t>(y) * pic.width + x] != 0;
      pixels += fg;
      int covering = 0;
      for (const auto& p : polygons) covering += covers(p, x, y);
      EXPECT_EQ(covering, fg ? 1 : 0) << "pixel (" << x << ", " << y << ")";
    }
  EXPECT_EQ(area2, 2 * pixels);
}

}  // namespace

TEST(Contours, EmptyMaskHasNoPolygons) {
  EXPECT_TRUE(Picture({"...", "..."}).polygons().empty());
  EXPECT_TRUE(trace_polygons(nullptr, 0, 0).empty());
}

TEST(Contours, OnePixelAndARectangleAreFourCorners) {
  auto one = Picture({"...", ".#.", "..."}).polygons();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].exterior, (GridRing{{1, 1}, {2, 1}, {2, 2}, {1, 2}}));
  EXPECT_TRUE(one[0].holes.empty());

  const Picture rect({"###", "###"});
  auto all = rect.polygons();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].exterior, (GridRing{{0, 0}, {3, 0}, {3, 2}, {0, 2}}));  // the mask's own border
  expect_exact(rect, all);
}

TEST(Contours, AHoleIsANegativeRingOfItsPolygon) {
  const Picture ring({"####", "#..#", "####"});
  auto p = ring.polygons();
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(p[0].holes.size(), 1u);
  EXPECT_EQ(twice_signed_area(p[0].holes[0]), -4);
  EXPECT_EQ(p[0].holes[0].size(), 4u);
  expect_exact(ring, p);
}

TEST(Contours, PixelsMeetingAtACornerAreTwoPolygonsTouchingThere) {
  const Picture saddle({"#.", ".#"});
  auto p = saddle.polygons();
  ASSERT_EQ(p.size(), 2u);
  expect_exact(saddle, p);
  const Picture other({".#", "#."});
  expect_exact(other, other.polygons());
  EXPECT_EQ(other.polygons().size(), 2u);
}

TEST(Contours, AShapeTouchingItselfAtACornerGetsAHoleTouchingItsExterior) {
  // The inside opens to the outside only through the corner at (1, 1).
  const Picture c({".###", "#..#", "#..#", "####"});
  auto p = c.polygons();
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(p[0].holes.size(), 1u);
  expect_exact(c, p);
  const auto& hole = p[0].holes[0];
  bool touches = false;
  for (const auto& q : hole) touches |= q == GridPoint{1, 1};
  EXPECT_TRUE(touches);
}

TEST(Contours, AnIslandInALakeIsItsOwnPolygon) {
  const Picture lake({"#####", "#...#", "#.#.#", "#...#", "#####"});
  auto p = lake.polygons();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].holes.size(), 1u);
  EXPECT_EQ(p[1].holes.size(), 0u);
  expect_exact(lake, p);
}

TEST(Contours, RandomMasksAreTracedExactly) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 300; ++trial) {
    const int w = 1 + static_cast<int>(rng() % 17), h = 1 + static_cast<int>(rng() % 13);
    const double p = 0.2 + 0.6 * (rng() % 1000) / 1000.0;
    std::vector<std::string> rows(h, std::string(w, '.'));
    for (auto& r : rows)
      for (char& c : r) c = (rng() % 1000) / 1000.0 < p ? '#' : '.';
    const Picture pic(rows);
    SCOPED_TRACE("trial " + std::to_string(trial));
    expect_exact(pic, pic.polygons());
    if (::testing::Test::HasFailure()) break;
  }
}
