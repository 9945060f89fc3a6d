// The µm/px estimate's parts that need no slide: nuclear cores measured on drawn images whose
// sizes are known, the estimate and its interval from given measurements, and the verdict.
#include "mltool/slide/mpp_estimate.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "mltool/slide/info.hpp"

using mltool::slide::estimate_from_samples;
using mltool::slide::kCoreBlurPx;
using mltool::slide::kNucleusCoreUm;
using mltool::slide::measure_nuclei;
using mltool::slide::MetadataMpp;
using mltool::slide::mpp_verdict;
using mltool::slide::MppEstimate;
using mltool::slide::NucleusSample;

namespace {

struct Image {
  int width, height;
  std::vector<std::uint8_t> rgb;
  void fill(int x, int y, const std::uint8_t (&c)[3]) {
    std::copy(c, c + 3, rgb.begin() + 3 * (static_cast<std::size_t>(y) * width + x));
  }
};

constexpr std::uint8_t kPink[3] = {235, 170, 200};  // eosin stroma
constexpr std::uint8_t kRim[3] = {110, 60, 150};    // a nucleus' lighter rim
constexpr std::uint8_t kCore[3] = {60, 30, 110};    // its dense core

// Nuclei packed on a grid, as in a cellular region: a core of diameter `core` px inside a
// lighter rim twice as wide, each an ellipse of axis ratio `ratio` (1: discs), with a little
// noise so Otsu sees real histograms. Otsu's first threshold parts stroma from nuclei, the
// second rims from cores.
Image draw_nuclei(int core, double ratio = 1.0) {
  const int pitch = 2 * core + 4, per_side = 8;
  Image im{pitch * per_side, pitch * per_side, {}};
  im.rgb.resize(static_cast<std::size_t>(im.width) * im.height * 3);
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x) im.fill(x, y, kPink);
  for (int j = 0; j < per_side; ++j)
    for (int i = 0; i < per_side; ++i) {
      const double cx = (i + 0.5) * pitch, cy = (j + 0.5) * pitch;
      for (int y = static_cast<int>(cy - pitch / 2); y < cy + pitch / 2; ++y)
        for (int x = static_cast<int>(cx - pitch / 2); x < cx + pitch / 2; ++x) {
          const double u = (x + 0.5 - cx) / (core / 2.0 * std::sqrt(ratio));
          const double v = (y + 0.5 - cy) / (core / 2.0 / std::sqrt(ratio));
          const double r2 = u * u + v * v;
          if (r2 < 1)
            im.fill(x, y, kCore);
          else if (r2 < 4)
            im.fill(x, y, kRim);
        }
    }
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> noise(-3, 3);
  for (auto& v : im.rgb) v = static_cast<std::uint8_t>(std::clamp(v + noise(rng), 0, 255));
  return im;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

NucleusSample sample_of(double diameter, int count) {
  NucleusSample s;
  s.diameters_px.assign(count, diameter);
  s.areas_px.assign(count, M_PI * diameter * diameter / 4);
  return s;
}

}  // namespace

TEST(MppEstimate, MeasuresCoresOfDrawnNuclei) {
  for (int core : {6, 12, 24}) {
    const Image im = draw_nuclei(core);
    const NucleusSample s = measure_nuclei(im.rgb.data(), im.width, im.height);
    std::string sizes;
    for (double d : s.diameters_px) sizes += std::to_string(d) + " ";
    ASSERT_EQ(s.diameters_px.size(), 64u) << "core " << core << ": " << sizes;
    // A digital disc's area is pi r² within a pixel's rounding along its edge.
    EXPECT_NEAR(median(s.diameters_px), core, 0.1 * core) << "core " << core;
    EXPECT_NEAR(s.tissue_fraction, 1.0, 1e-9);
  }
}

TEST(MppEstimate, SkipsElongatedCores) {
  const Image im = draw_nuclei(12, 3.0);  // axis ratio 3: edge-on or touching nuclei
  EXPECT_TRUE(measure_nuclei(im.rgb.data(), im.width, im.height).diameters_px.empty());
}

TEST(MppEstimate, GlassHasNoNuclei) {
  std::vector<std::uint8_t> glass(64 * 64 * 3, 245);
  const NucleusSample s = measure_nuclei(glass.data(), 64, 64);
  EXPECT_TRUE(s.diameters_px.empty());
  EXPECT_EQ(s.tissue_fraction, 0);
}

TEST(MppEstimate, EstimateIsTheRulerOverTheDeblurredCore) {
  const double d = 10;  // px, measured
  const MppEstimate e = estimate_from_samples({sample_of(d, 100), sample_of(d, 100)}, 1.0);
  ASSERT_TRUE(e.mpp);
  const double expected = kNucleusCoreUm / std::sqrt(d * d - kCoreBlurPx * kCoreBlurPx);
  EXPECT_NEAR(*e.mpp, expected, 1e-9);
  EXPECT_FALSE(e.uncertain) << e.why;
  EXPECT_LT(*e.low, expected);
  EXPECT_GT(*e.high, expected);
  EXPECT_EQ(e.nuclei, 200);
  // Regions read at a downsample of 2 are level-0 cores twice as large.
  const MppEstimate half = estimate_from_samples({sample_of(d / 2, 200)}, 2.0);
  EXPECT_LT(*half.mpp, *e.mpp * 1.3);
}

TEST(MppEstimate, FewNucleiOrDisagreeingRegionsAreUncertain) {
  const MppEstimate few = estimate_from_samples({sample_of(10, 20)}, 1.0);
  EXPECT_TRUE(few.uncertain);
  EXPECT_NE(few.why.find("only 20 nuclei"), std::string::npos) << few.why;
  const MppEstimate apart =
      estimate_from_samples({sample_of(6, 100), sample_of(20, 100), sample_of(10, 100)}, 1.0);
  EXPECT_TRUE(apart.uncertain);
  EXPECT_NE(apart.why.find("disagree"), std::string::npos) << apart.why;
  // An uncertain estimate's interval is at least exp(±0.4) wide.
  EXPECT_GE(*apart.high / *apart.low, std::exp(0.8) - 1e-9);
  const MppEstimate tiny = estimate_from_samples({sample_of(2.4, 300)}, 1.0);
  EXPECT_TRUE(tiny.uncertain);
  EXPECT_NE(tiny.why.find("too few pixels"), std::string::npos) << tiny.why;
}

TEST(MppEstimate, NoNucleiNoEstimate) {
  const MppEstimate none = estimate_from_samples({NucleusSample{}}, 1.0);
  EXPECT_FALSE(none.mpp);
  EXPECT_EQ(none.why, "no nuclei found");
  EXPECT_EQ(estimate_from_samples({}, 1.0).why, "no tissue found");
}

TEST(MppEstimate, Verdict) {
  MppEstimate e;
  e.mpp = 0.5, e.low = 0.42, e.high = 0.6;
  EXPECT_EQ(mpp_verdict(MetadataMpp{0.5, "openslide.mpp-x/-y", ""}, e), "agrees");
  EXPECT_EQ(mpp_verdict(MetadataMpp{0.25, "openslide.mpp-x/-y", ""}, e), "disagrees");
  EXPECT_EQ(mpp_verdict(MetadataMpp{std::nullopt, "TIFF resolution", "placeholder 72 dpi"}, e),
            "no metadata");
  EXPECT_EQ(mpp_verdict(MetadataMpp{0.5, "openslide.mpp-x/-y", ""}, MppEstimate{}), "no estimate");
}
