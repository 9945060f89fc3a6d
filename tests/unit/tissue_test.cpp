#include "mltool/slide/tissue.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "mltool/util/error.hpp"

using mltool::slide::IntegralMask;
using mltool::slide::Mask;
using mltool::slide::otsu_threshold;
using mltool::slide::saturation;
using mltool::slide::tissue_fraction;
using mltool::slide::tissue_mask;
using mltool::slide::TissueOptions;

namespace {

// Between-class variance of splitting at t, computed directly from the values.
double between_class_variance(const std::vector<std::uint8_t>& values, int t) {
  double n0 = 0, n1 = 0, s0 = 0, s1 = 0;
  for (std::uint8_t v : values) {
    if (v <= t) {
      n0 += 1;
      s0 += v;
    } else {
      n1 += 1;
      s1 += v;
    }
  }
  if (n0 == 0 || n1 == 0) return 0.0;
  const double d = s0 / n0 - s1 / n1;
  return n0 * n1 * d * d;
}

struct Rgb {
  int width, height;
  std::vector<std::uint8_t> data;
  void set(int x, int y, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
    std::uint8_t* p = &data[3 * (static_cast<std::size_t>(y) * width + x)];
    p[0] = r;
    p[1] = g;
    p[2] = b;
  }
};

Rgb white(int w, int h) { return Rgb{w, h, std::vector<std::uint8_t>(3u * w * h, 245)}; }

bool in_disc(int x, int y, double cx, double cy, double r) {
  return std::hypot(x + 0.5 - cx, y + 0.5 - cy) <= r;
}

Mask mask_from(int w, int h, std::vector<std::uint8_t> data) { return Mask{w, h, std::move(data)}; }

}  // namespace

TEST(Saturation, MatchesHsvDefinition) {
  const std::uint8_t px[] = {0, 0, 0, 255, 255, 255, 255, 0, 0, 200, 100, 150, 10, 4, 4};
  const auto s = saturation(px, 5, 1);
  EXPECT_EQ(s[0], 0);    // black
  EXPECT_EQ(s[1], 0);    // white
  EXPECT_EQ(s[2], 255);  // pure red
  EXPECT_EQ(s[3], 128);  // 100 * 255 / 200 = 127.5 → 128
  EXPECT_EQ(s[4], 153);  // 6 * 255 / 10
}

TEST(Otsu, MatchesBruteForceOnBimodalData) {
  std::mt19937 rng(7);
  std::normal_distribution<double> low(40, 12), high(170, 20);
  std::vector<std::uint8_t> values;
  for (int i = 0; i < 6000; ++i) {
    const double v = i % 3 == 0 ? high(rng) : low(rng);
    values.push_back(static_cast<std::uint8_t>(std::clamp(std::lround(v), 0L, 255L)));
  }
  const int t = otsu_threshold(values);
  double best = -1;
  int best_t = -1;
  for (int c = 0; c < 256; ++c) {
    const double var = between_class_variance(values, c);
    if (var > best) {
      best = var;
      best_t = c;
    }
  }
  EXPECT_GT(t, 60);
  EXPECT_LT(t, 150);
  // The same maximum; allow rounding differences between the two summations.
  EXPECT_GE(between_class_variance(values, t), best * (1 - 1e-12));
  EXPECT_NEAR(t, best_t, 1);
}

TEST(Otsu, PlateauResolvesToTheSmallestThreshold) {
  // Two spikes with an empty gap: every t in [10, 199] separates them equally.
  std::vector<std::uint8_t> values(100, 10);
  values.resize(150, 200);  // (not insert(): GCC 12 -O3 warns falsely on it, -Warray-bounds)
  EXPECT_EQ(otsu_threshold(values), 10);
}

TEST(Otsu, ConstantOrEmptyMeansNoForeground) {
  EXPECT_EQ(otsu_threshold(std::vector<std::uint8_t>(50, 77)), 77);
  EXPECT_EQ(otsu_threshold({}), 0);
}

TEST(TissueMask, PinkDiscOnWhiteWithSpeckAndHoles) {
  const int w = 200, h = 160;
  Rgb img = white(w, h);
  const double cx = 90, cy = 80, r = 55;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> jitter(-6, 6);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      if (in_disc(x, y, cx, cy, r)) {
        img.set(x, y, 225 + jitter(rng) / 2, 140 + jitter(rng), 190 + jitter(rng));
      } else {
        const int g = 240 + jitter(rng) / 2;
        img.set(x, y, g, g, g - 2);
      }
    }
  }
  // A 3×3 speck far from the disc, a 3×3 hole and a 20×20 hole inside it.
  for (int y = 10; y < 13; ++y)
    for (int x = 180; x < 183; ++x) img.set(x, y, 200, 60, 150);
  for (int y = 60; y < 63; ++y)
    for (int x = 60; x < 63; ++x) img.set(x, y, 245, 245, 245);
  for (int y = 75; y < 95; ++y)
    for (int x = 95; x < 115; ++x) img.set(x, y, 245, 245, 245);

  TissueOptions opt;
  opt.min_object_px = 30;
  opt.max_hole_px = 100;
  const Mask m = tissue_mask(img.data.data(), w, h, opt);
  ASSERT_EQ(m.width, w);
  ASSERT_EQ(m.height, h);
  const auto at = [&](int x, int y) { return m.data[static_cast<std::size_t>(y) * w + x]; };

  EXPECT_EQ(at(181, 11), 0) << "speck removed";
  EXPECT_EQ(at(61, 61), 1) << "small hole filled";
  EXPECT_EQ(at(105, 85), 0) << "large hole kept";
  int wrong = 0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      if (x >= 95 && x < 115 && y >= 75 && y < 95) continue;
      const double d = std::hypot(x + 0.5 - cx, y + 0.5 - cy);
      if (std::abs(d - r) < 2.0) continue;  // the rim may go either way
      if (at(x, y) != (d < r ? 1 : 0)) ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST(TissueMask, BlankAndDarkThumbnailsHaveNoTissue) {
  Rgb img = white(64, 64);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> noise(-3, 3);
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 64; ++x) {
      if (x < 10)
        img.set(x, y, 12, 3, 3);  // black scan border, saturated by noise
      else
        img.set(x, y, 240 + noise(rng), 240 + noise(rng), 240 + noise(rng));
    }
  const Mask m = tissue_mask(img.data.data(), 64, 64, TissueOptions{});
  for (std::uint8_t v : m.data) ASSERT_EQ(v, 0);
}

namespace {

// Pale pink stroma with purple nuclei (5×5 every 12 px), both saturated, with a little noise.
void paint_tissue(Rgb& img, int x0, int y0, int x1, int y1, std::mt19937& rng) {
  std::uniform_int_distribution<int> jitter(-4, 4);
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      if (x % 12 < 5 && y % 12 < 5)
        img.set(x, y, 120 + jitter(rng), 60 + jitter(rng), 160 + jitter(rng));  // nuclei, S ~ 159
      else
        img.set(x, y, 235 + jitter(rng) / 2, 182 + jitter(rng),
                210 + jitter(rng));  // stroma, S ~ 58
    }
}

}  // namespace

TEST(TissueMask, AllTissueWithoutGlassIsAllTissue) {
  // No glass in view: Otsu alone would split stroma from nuclei and call the stroma
  // background; the lower class is saturated, so the floor decides and all is tissue.
  const int w = 120, h = 96;
  Rgb img = white(w, h);
  std::mt19937 rng(21);
  paint_tissue(img, 0, 0, w, h, rng);
  const TissueOptions opt;
  const Mask m = tissue_mask(img.data.data(), w, h, opt);
  ASSERT_EQ(m.data.size(), static_cast<std::size_t>(w) * h);
  EXPECT_EQ(m.threshold, opt.min_saturation);
  int background = 0;
  for (std::uint8_t v : m.data) background += v == 0;
  EXPECT_EQ(background, 0);
  // Without the rule the mask would be mostly background: Otsu alone splits stroma from
  // nuclei, far above the floor, and leaves the stroma (most of the picture) below it.
  const auto sat = saturation(img.data.data(), w, h);
  const int otsu = otsu_threshold(sat);
  EXPECT_GT(otsu, 2 * opt.min_saturation);
  int above = 0;
  for (std::uint8_t v : sat) above += v > otsu;
  EXPECT_LT(above, w * h / 4) << "Otsu threshold " << otsu;
}

TEST(TissueMask, SameTonesOnGlassStillSeparateTissueFromGlass) {
  const int w = 160, h = 120;
  Rgb img = white(w, h);
  std::mt19937 rng(22);
  std::uniform_int_distribution<int> noise(-3, 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const int g = 240 + noise(rng);
      img.set(x, y, g, g + noise(rng) / 2, g - 1);
    }
  // Tissue in the middle 96×72 block: about 36% of the picture, the rest glass.
  const int x0 = 32, y0 = 24, x1 = 128, y1 = 96;
  paint_tissue(img, x0, y0, x1, y1, rng);
  const TissueOptions opt;
  const Mask m = tissue_mask(img.data.data(), w, h, opt);
  ASSERT_EQ(m.data.size(), static_cast<std::size_t>(w) * h);
  int wrong_glass = 0, wrong_tissue = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const bool tissue = x >= x0 && x < x1 && y >= y0 && y < y1;
      const std::uint8_t v = m.data[static_cast<std::size_t>(y) * w + x];
      if (tissue && v != 1) ++wrong_tissue;
      if (!tissue && v != 0) ++wrong_glass;
    }
  EXPECT_EQ(wrong_glass, 0) << "glass called tissue (threshold " << m.threshold << ")";
  EXPECT_EQ(wrong_tissue, 0) << "stroma or nuclei called glass (threshold " << m.threshold << ")";
  EXPECT_GE(m.threshold, opt.min_saturation);
  EXPECT_LT(m.threshold, 50) << "glass and stroma are split, not stroma and nuclei";
}

TEST(MaskFilters, HoleTouchingTheBorderIsNotFilled) {
  // Tissue ring open on the left edge: the background inside touches the border.
  std::vector<std::uint8_t> d = {
      1, 1, 1, 1,  //
      0, 0, 0, 1,  //
      1, 1, 1, 1,  //
  };
  Mask m = mask_from(4, 3, d);
  mltool::slide::fill_small_holes(m, 100);
  EXPECT_EQ(m.data, d);
  // Closed ring: filled. Diagonal tissue closes a hole (background is 4-connected).
  Mask closed = mask_from(4, 4,
                          {0, 1, 0, 0,  //
                           1, 0, 1, 0,  //
                           0, 1, 0, 0,  //
                           0, 0, 0, 0});
  mltool::slide::fill_small_holes(closed, 2);
  EXPECT_EQ(closed.data[5], 1);
}

TEST(MaskFilters, DiagonalPixelsAreOneObject) {
  Mask m = mask_from(3, 3,
                     {1, 0, 0,  //
                      0, 1, 0,  //
                      0, 0, 1});
  mltool::slide::remove_small_objects(m, 3);  // one 8-connected object of 3: kept
  EXPECT_EQ(m.data[8], 1);
  mltool::slide::remove_small_objects(m, 4);
  EXPECT_EQ(m.data[4], 0);
}

TEST(TissueFraction, BoxesInOutAndHalf) {
  // Left half tissue (x < 8), right half background, 16×8.
  std::vector<std::uint8_t> d(16 * 8, 0);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) d[y * 16 + x] = 1;
  const Mask m = mask_from(16, 8, d);
  const IntegralMask im(m);
  EXPECT_DOUBLE_EQ(im.fraction(0, 0, 8, 8), 1.0);
  EXPECT_DOUBLE_EQ(im.fraction(8, 0, 16, 8), 0.0);
  EXPECT_DOUBLE_EQ(im.fraction(4, 0, 12, 8), 0.5);
  EXPECT_DOUBLE_EQ(im.fraction(2, 2, 3, 3), 1.0);
  EXPECT_DOUBLE_EQ(tissue_fraction(m, 0, 0, 16, 8), 0.5);
  // Partial pixels by area: [7.5, 8.5) is half tissue.
  EXPECT_NEAR(im.fraction(7.5, 1.25, 8.5, 3.75), 0.5, 1e-12);
  EXPECT_NEAR(im.fraction(6.25, 0, 8.75, 8), 0.7, 1e-12);
  // Outside the mask counts as background; empty boxes are 0.
  EXPECT_DOUBLE_EQ(im.fraction(-8, 0, 8, 8), 0.5);
  EXPECT_DOUBLE_EQ(im.fraction(3, 3, 3, 5), 0.0);
  EXPECT_DOUBLE_EQ(im.fraction(20, 0, 30, 8), 0.0);
}

TEST(TissueFraction, MatchesBruteForceOnRandomMask) {
  std::mt19937 rng(11);
  std::bernoulli_distribution coin(0.4);
  std::vector<std::uint8_t> d(37 * 23);
  for (auto& v : d) v = coin(rng) ? 1 : 0;
  const Mask m = mask_from(37, 23, d);
  const IntegralMask im(m);
  std::uniform_real_distribution<double> ux(-2, 39), uy(-2, 25);
  for (int k = 0; k < 200; ++k) {
    double x0 = ux(rng), x1 = ux(rng), y0 = uy(rng), y1 = uy(rng);
    if (x0 > x1) std::swap(x0, x1);
    if (y0 > y1) std::swap(y0, y1);
    double area = 0;
    for (int y = 0; y < 23; ++y)
      for (int x = 0; x < 37; ++x) {
        const double ox = std::max(0.0, std::min(x1, x + 1.0) - std::max(x0, double(x)));
        const double oy = std::max(0.0, std::min(y1, y + 1.0) - std::max(y0, double(y)));
        area += d[y * 37 + x] * ox * oy;
      }
    ASSERT_NEAR(im.tissue_area(x0, y0, x1, y1), area, 1e-9)
        << x0 << " " << y0 << " " << x1 << " " << y1;
  }
}

TEST(TissueFraction, RejectsMismatchedData) {
  EXPECT_THROW(IntegralMask(mask_from(4, 4, std::vector<std::uint8_t>(3))), mltool::UsageError);
}

// ---------------------------------------------------------------- artifacts

namespace {

using mltool::slide::ArtifactRules;
using mltool::slide::is_artifact;

struct Colour {
  const char* what;
  int r, g, b;
};

// Ink as scanners show it: over glass, and half-transparent at a stroke's edge.
const std::vector<Colour> kInk = {
    {"blue marker", 45, 75, 165},
    {"blue ballpoint", 60, 85, 200},
    {"pale blue edge", 150, 165, 215},
    {"violet-blue, g = r", 70, 70, 170},
    {"green marker", 40, 140, 90},
    {"pale green edge", 150, 200, 170},
    {"cyan", 60, 150, 160},
    {"dark green", 20, 60, 40},
    {"black ink", 35, 35, 40},
    {"black ink, bluish", 40, 45, 62},
    {"grey ink", 85, 82, 95},
};
// Black scanner borders and black out-of-slide areas, noisy (values 15..45).
const std::vector<Colour> kBorder = {
    {"black", 0, 0, 0},
    {"border", 30, 30, 30},
    {"border, noisy", 45, 28, 22},
    {"border, noisy", 15, 45, 30},
    {"dark red noise", 39, 4, 4},
    {"border", 44, 40, 25},
};
// H&E: eosin, hematoxylin, their mixes, and the darkest nuclei and folds.
const std::vector<Colour> kTissue = {
    {"eosin, pale", 235, 182, 210}, {"eosin", 220, 120, 170},
    {"eosin, dense", 190, 70, 130}, {"red cells", 200, 60, 80},
    {"hematoxylin", 120, 60, 160},  {"hematoxylin, pale", 170, 140, 200},
    {"dark nucleus", 70, 50, 120},  {"darker nucleus", 55, 35, 95},
    {"fold", 90, 50, 110},          {"dense nuclei", 100, 70, 140},
    {"lumen edge", 230, 200, 225},  {"DAB brown", 140, 90, 50},
};

}  // namespace

TEST(Artifacts, InkAndBordersAreArtifactsAndStainedTissueIsNot) {
  const ArtifactRules rules;
  for (const auto& c : kInk) EXPECT_TRUE(is_artifact(c.r, c.g, c.b, rules)) << c.what;
  for (const auto& c : kBorder) EXPECT_TRUE(is_artifact(c.r, c.g, c.b, rules)) << c.what;
  for (const auto& c : kTissue) EXPECT_FALSE(is_artifact(c.r, c.g, c.b, rules)) << c.what;
  // Every ink and border colour here would be tissue by saturation alone (> 20/255).
  for (const auto& list : {kInk, kBorder})
    for (const auto& c : list) {
      if (c.r == c.g && c.g == c.b) continue;  // pure greys: excluded by the dark rule
      const std::uint8_t px[3] = {static_cast<std::uint8_t>(c.r), static_cast<std::uint8_t>(c.g),
                                  static_cast<std::uint8_t>(c.b)};
      EXPECT_GT(saturation(px, 1, 1)[0], 20) << c.what;
    }
}

TEST(Artifacts, EachRuleAtItsEdge) {
  const ArtifactRules rules;
  EXPECT_TRUE(is_artifact(39, 10, 10, rules)) << "dark: hi 39";
  EXPECT_FALSE(is_artifact(40, 10, 30, rules)) << "hi 40, chroma 30: neither dark nor grey";
  EXPECT_TRUE(is_artifact(99, 80, 90, rules)) << "grey: hi 99, chroma 19";
  EXPECT_TRUE(is_artifact(99, 75, 90, rules)) << "grey: chroma 24";
  EXPECT_FALSE(is_artifact(99, 74, 90, rules)) << "chroma 25 is colour";
  EXPECT_FALSE(is_artifact(120, 100, 110, rules)) << "hi 120 is not grey";
  EXPECT_TRUE(is_artifact(100, 111, 105, rules)) << "green: g - r = 11";
  EXPECT_FALSE(is_artifact(100, 110, 105, rules)) << "g - r = 10 is within noise";
  EXPECT_TRUE(is_artifact(100, 100, 130, rules)) << "blue: g = r, b 30 above";
  EXPECT_FALSE(is_artifact(100, 100, 129, rules)) << "b 29 above";
  EXPECT_FALSE(is_artifact(101, 100, 200, rules)) << "r > g: purple side of 240°";
}

TEST(Artifacts, PenStrokesAndBordersLeaveTheMaskAndTheThreshold) {
  // Glass, a block of tissue, a black border band on the left and three pen strokes
  // (blue, green, black) crossing glass and tissue.
  const int w = 200, h = 120;
  Rgb img = white(w, h);
  std::mt19937 rng(31);
  paint_tissue(img, 60, 30, 160, 100, rng);
  std::uniform_int_distribution<int> border(15, 45);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < 16; ++x) img.set(x, y, border(rng), border(rng), border(rng));
  const Colour pens[3] = {{"blue", 45, 75, 165}, {"green", 40, 140, 90}, {"black", 35, 35, 40}};
  for (int p = 0; p < 3; ++p)
    for (int y = 4 + 38 * p; y < 16 + 38 * p; ++y)
      for (int x = 20; x < 196; ++x) img.set(x, y, pens[p].r, pens[p].g, pens[p].b);
  const auto count_in = [&](const Mask& m, int x0, int y0, int x1, int y1) {
    int n = 0;
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) n += m.data[static_cast<std::size_t>(y) * w + x];
    return n;
  };
  TissueOptions opt;
  opt.min_object_px = 20;
  opt.max_hole_px = 20;
  const Mask m = tissue_mask(img.data.data(), w, h, opt);
  EXPECT_EQ(count_in(m, 0, 0, 16, h), 0) << "border";
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(count_in(m, 20, 4 + 38 * p, 60, 16 + 38 * p), 0) << pens[p].what << " over glass";
    EXPECT_EQ(count_in(m, 160, 4 + 38 * p, 196, 16 + 38 * p), 0) << pens[p].what << " over glass";
  }
  // Tissue outside the strokes stays; the threshold splits glass from tissue as without ink.
  EXPECT_EQ(count_in(m, 60, 54, 160, 80), 100 * 26);
  EXPECT_LT(m.threshold, 50);

  opt.artifacts.reset();  // --artifacts keep: strokes and border count by saturation
  const Mask kept = tissue_mask(img.data.data(), w, h, opt);
  EXPECT_GT(count_in(kept, 0, 0, 16, h), 16 * h / 2) << "border";
  for (int p = 0; p < 2; ++p)  // not black ink (35, 35, 40): saturation 32, near the threshold
    EXPECT_EQ(count_in(kept, 20, 4 + 38 * p, 60, 16 + 38 * p), 40 * 12) << pens[p].what;
}
