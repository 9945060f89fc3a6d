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
using mltool::slide::kMinNuclei;
using mltool::slide::kNucleusCoreUm;
using mltool::slide::kNucleusUm;
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

// `count` cores of `core` px and as many whole nuclei of `nucleus` px.
NucleusSample sample_with(double core, double nucleus, int count) {
  NucleusSample s = sample_of(core, count);
  s.nucleus_diameters_px.assign(count, nucleus);
  s.nucleus_areas_px.assign(count, M_PI * nucleus * nucleus / 4);
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
    // Hematoxylin parts the whole nucleus (core and rim, twice the core across) from stroma.
    ASSERT_EQ(s.nucleus_diameters_px.size(), 64u) << "core " << core;
    EXPECT_NEAR(median(s.nucleus_diameters_px), 2 * core, 0.1 * core) << "core " << core;
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

TEST(MppEstimate, NoiseOnStromaIsNoWholeNucleus) {
  // Otsu splits any histogram; noise on uniform stroma is no visible step of hematoxylin.
  Image im{256, 256, std::vector<std::uint8_t>(256 * 256 * 3)};
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0, 4);
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x)
      for (int c = 0; c < 3; ++c)
        im.rgb[3 * (y * im.width + x) + c] =
            static_cast<std::uint8_t>(std::clamp(kPink[c] + noise(rng), 0.0, 255.0));
  const NucleusSample s = measure_nuclei(im.rgb.data(), im.width, im.height);
  EXPECT_TRUE(s.nucleus_diameters_px.empty()) << s.nucleus_diameters_px.size();
}

TEST(MppEstimate, EstimateIsTheRulerOverTheDeblurredCore) {
  const double d = 10;  // px, measured
  const MppEstimate e = estimate_from_samples({sample_of(d, 100), sample_of(d, 100)}, 1.0);
  ASSERT_TRUE(e.mpp);
  const double expected = kNucleusCoreUm / std::sqrt(d * d - kCoreBlurPx * kCoreBlurPx);
  EXPECT_NEAR(*e.mpp, expected, 1e-9);
  // No whole nuclei: the cores' ruler (fitted on one slide) stands alone, and says so.
  EXPECT_TRUE(e.uncertain);
  EXPECT_NE(e.why.find("too few whole nuclei (0, fewer than"), std::string::npos) << e.why;
  EXPECT_LT(*e.low, expected);
  EXPECT_GT(*e.high, expected);
  EXPECT_EQ(e.nuclei, 200);
  // Regions read at a downsample of 2 are level-0 cores twice as large.
  const MppEstimate half = estimate_from_samples({sample_of(d / 2, 200)}, 2.0);
  EXPECT_LT(*half.mpp, *e.mpp * 1.3);
}

TEST(MppEstimate, WholeNucleiGiveTheEstimate) {
  // Cores of 10 px and whole nuclei of 16 px: the whole nuclei's ruler gives the estimate.
  NucleusSample a = sample_with(10, 16, 100), b = a;
  // Specks narrower than the deblurred core and merged blobs over 4 cores across are not
  // nuclei: they change neither the count nor the median.
  a.nucleus_diameters_px.insert(a.nucleus_diameters_px.end(), 300, 3.0);
  a.nucleus_areas_px.insert(a.nucleus_areas_px.end(), 300, 7.0);
  a.nucleus_diameters_px.push_back(60), a.nucleus_areas_px.push_back(2800);
  const MppEstimate e = estimate_from_samples({a, b}, 1.0);
  ASSERT_TRUE(e.mpp && e.from_cores && e.from_nuclei);
  EXPECT_NEAR(*e.mpp, kNucleusUm / 16, 1e-9);
  EXPECT_EQ(*e.from_nuclei, *e.mpp);
  EXPECT_NEAR(*e.from_cores, kNucleusCoreUm / std::sqrt(100 - kCoreBlurPx * kCoreBlurPx), 1e-9);
  EXPECT_EQ(e.whole_nuclei, 200);
  EXPECT_FALSE(e.uncertain) << e.why;
  // Regions that agree: the ruler's spread and what 200 nuclei can say of the slide's cells.
  const double mix = 2 * mltool::slide::kNucleusMixSpread / std::sqrt(200.0);
  EXPECT_NEAR(*e.high / *e.mpp, std::exp(std::hypot(mltool::slide::kNucleusSpread, mix)), 1e-9);
  // Read at a downsample of 2, the same pixels are a slide of half the µm/px.
  EXPECT_NEAR(*estimate_from_samples({a, b}, 2.0).mpp, kNucleusUm / 32, 1e-9);
  // Too few whole nuclei: the cores' estimate stands.
  const MppEstimate few = estimate_from_samples({sample_with(10, 16, kMinNuclei - 1)}, 1.0);
  EXPECT_FALSE(few.from_nuclei);
  EXPECT_NEAR(*few.mpp, kNucleusCoreUm / std::sqrt(100 - kCoreBlurPx * kCoreBlurPx), 1e-9);
  // Regions whose whole nuclei disagree: uncertain.
  const MppEstimate apart = estimate_from_samples(
      {sample_with(10, 12, 100), sample_with(10, 30, 100), sample_with(10, 18, 100)}, 1.0);
  EXPECT_TRUE(apart.uncertain);
  EXPECT_NE(apart.why.find("disagree"), std::string::npos) << apart.why;
}

// A small image is one neighbourhood of the tissue: however well its regions agree, its few
// nuclei need not be the slide's mix of cells (issue 51: a 512-px crop of the real slide read
// +52% with an interval of ±16%). The interval widens with fewer whole nuclei, and under
// kMinCertainNuclei the estimate is uncertain, saying so.
TEST(MppEstimate, FewWholeNucleiWidenTheIntervalOrAreUncertain) {
  using mltool::slide::kMinCertainNuclei;
  using mltool::slide::kNucleusMixSpread;
  using mltool::slide::kNucleusSpread;
  const auto half = [](const MppEstimate& e) { return std::log(*e.high / *e.mpp); };
  // Three regions of identical nuclei: no spread between them, yet 3 × 60 nuclei.
  const MppEstimate three = estimate_from_samples(
      {sample_with(10, 16, 60), sample_with(10, 16, 60), sample_with(10, 16, 60)}, 1.0);
  ASSERT_TRUE(three.from_nuclei);
  EXPECT_EQ(three.nucleus_regions, 3);
  EXPECT_NEAR(half(three), std::hypot(kNucleusSpread, 2 * kNucleusMixSpread / std::sqrt(180.0)),
              1e-9);
  EXPECT_GT(half(three), kNucleusSpread + 0.05);
  EXPECT_EQ(three.uncertain, 180 < kMinCertainNuclei) << three.why;
  // kMinCertainNuclei is where the whole nuclei's interval alone reaches an uncertain one's.
  EXPECT_NEAR(std::hypot(kNucleusSpread, 2 * kNucleusMixSpread / std::sqrt(kMinCertainNuclei)),
              mltool::slide::kUncertainHalfWidth, 0.005);
  // One region of 70 whole nuclei: uncertain, too few whole nuclei, and at least exp(±0.4).
  const MppEstimate one = estimate_from_samples({sample_with(10, 16, 70)}, 1.0);
  ASSERT_TRUE(one.from_nuclei);
  EXPECT_TRUE(one.uncertain);
  EXPECT_NE(one.why.find("too few whole nuclei (70, fewer than"), std::string::npos) << one.why;
  EXPECT_GE(half(one), mltool::slide::kUncertainHalfWidth - 1e-9);
  // Many nuclei in one region: certain, the interval narrower.
  const MppEstimate many = estimate_from_samples({sample_with(10, 16, 1000)}, 1.0);
  EXPECT_FALSE(many.uncertain) << many.why;
  EXPECT_LT(half(many), half(three));
  // Fewer than kMinNuclei whole nuclei: the cores stand alone, uncertain, saying why.
  NucleusSample few = sample_of(10, 100);  // 100 cores, 40 whole nuclei
  few.nucleus_diameters_px.assign(40, 16);
  few.nucleus_areas_px.assign(40, M_PI * 64);
  const MppEstimate cores = estimate_from_samples({few}, 1.0);
  EXPECT_FALSE(cores.from_nuclei);
  EXPECT_TRUE(cores.uncertain);
  EXPECT_NE(cores.why.find("too few whole nuclei (40"), std::string::npos) << cores.why;
  EXPECT_GE(half(cores),
            std::hypot(kNucleusSpread, 2 * kNucleusMixSpread / std::sqrt(40.0)) - 1e-9);
  // What `info` says it was made from: the whole nuclei used, not the cores.
  EXPECT_EQ(mltool::slide::estimate_basis(three),
            "180 whole nuclei in 3 regions (180 nuclear cores)");
  EXPECT_EQ(mltool::slide::estimate_basis(cores),
            "100 nuclear cores in 1 region (40 whole nuclei, fewer than 60)");
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
  // Too blurred to deblur: the measured core bounds the truth from below, up to 4 times that.
  EXPECT_NEAR(*tiny.low, kNucleusCoreUm / 2.4, 1e-9);
  EXPECT_NEAR(*tiny.high, 4 * kNucleusCoreUm / 2.4, 1e-9);
}

// Colour noise: every pixel's channels drawn at random (the 1-px detail is in chroma as much
// as in luminance).
Image colour_noise(int side) {
  Image im{side, side, std::vector<std::uint8_t>(static_cast<std::size_t>(side) * side * 3)};
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> value(90, 230);
  for (auto& v : im.rgb) v = static_cast<std::uint8_t>(value(rng));
  return im;
}

// `im` with its colour at half the resolution, as a 4:2:0 JPEG decodes: JPEG's YCbCr, Cb and
// Cr averaged over 2 × 2 blocks and interpolated back bilinearly (libjpeg's "fancy"
// upsampling), luminance kept.
Image subsample_chroma(const Image& im) {
  const int w = im.width / 2, h = im.height / 2;
  std::vector<double> cb(static_cast<std::size_t>(w) * h), cr(cb.size());
  const auto pixel = [&](int x, int y) {
    return &im.rgb[3 * (static_cast<std::size_t>(y) * im.width + x)];
  };
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < 4; ++k) {
        const std::uint8_t* p = pixel(2 * x + k % 2, 2 * y + k / 2);
        cb[y * w + x] += (-0.168736 * p[0] - 0.331264 * p[1] + 0.5 * p[2]) / 4;
        cr[y * w + x] += (0.5 * p[0] - 0.418688 * p[1] - 0.081312 * p[2]) / 4;
      }
  const auto bilinear = [&](const std::vector<double>& c, double fx, double fy) {
    fx = std::clamp(fx, 0.0, w - 1.0), fy = std::clamp(fy, 0.0, h - 1.0);
    const int x0 = std::min(static_cast<int>(fx), w - 2),
              y0 = std::min(static_cast<int>(fy), h - 2);
    const double ax = fx - x0, ay = fy - y0;
    return (1 - ay) * ((1 - ax) * c[y0 * w + x0] + ax * c[y0 * w + x0 + 1]) +
           ay * ((1 - ax) * c[(y0 + 1) * w + x0] + ax * c[(y0 + 1) * w + x0 + 1]);
  };
  Image out = im;
  for (int y = 0; y < 2 * h; ++y)
    for (int x = 0; x < 2 * w; ++x) {
      const std::uint8_t* p = pixel(x, y);
      const double luma = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
      const double b = bilinear(cb, (x + 0.5) / 2 - 0.5, (y + 0.5) / 2 - 0.5);
      const double r = bilinear(cr, (x + 0.5) / 2 - 0.5, (y + 0.5) / 2 - 0.5);
      const double rgb[3] = {luma + 1.402 * r, luma - 0.344136 * b - 0.714136 * r,
                             luma + 1.772 * b};
      for (int c = 0; c < 3; ++c)
        out.rgb[3 * (static_cast<std::size_t>(y) * im.width + x) + c] =
            static_cast<std::uint8_t>(std::clamp(std::lround(rgb[c]), 0L, 255L));
    }
  return out;
}

TEST(MppEstimate, FindsColourAtHalfResolution) {
  const Image sharp = colour_noise(128);
  const Image half = subsample_chroma(sharp);
  const double detail = measure_nuclei(sharp.rgb.data(), sharp.width, sharp.height).chroma_detail;
  const double halved = measure_nuclei(half.rgb.data(), half.width, half.height).chroma_detail;
  EXPECT_GT(detail, mltool::slide::kMaxSubsampledChromaDetail);
  EXPECT_LT(halved, mltool::slide::kMaxSubsampledChromaDetail);
  NucleusSample a = sample_of(10, 200), b = a;
  a.chroma_detail = detail, b.chroma_detail = halved;
  const MppEstimate plain = estimate_from_samples({a}, 1.0);
  const MppEstimate subsampled = estimate_from_samples({b}, 1.0);
  EXPECT_FALSE(plain.chroma_subsampled);
  EXPECT_TRUE(subsampled.chroma_subsampled);
  // The chroma's blur is taken out too: the same measured core is a coarser slide.
  EXPECT_GT(*subsampled.mpp, *plain.mpp);
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

// A column of tiles 100 px high, each with the given tissue fraction.
static std::vector<mltool::slide::RegionCandidate> column_of_tiles(
    const std::vector<double>& tissue) {
  std::vector<mltool::slide::RegionCandidate> tiles;
  for (std::size_t i = 0; i < tissue.size(); ++i)
    tiles.push_back({{0, static_cast<std::int64_t>(100 * i), 100, 100}, tissue[i]});
  return tiles;
}

TEST(MppEstimate, RegionsAreAllTheTissueWhenItFits) {
  using mltool::slide::pick_regions;
  // Tissue tiles at the top and the bottom of the slide, glass between: all of them are read,
  // whatever their order, the one with a tenth of tissue not.
  const auto tiles = column_of_tiles({0.9, 1.0, 0, 0, 0.1, 0, 0.5, 1.0});
  const auto picked = pick_regions(tiles, 8);
  std::vector<std::int64_t> ys;
  for (const auto& b : picked) ys.push_back(b[1]);
  std::sort(ys.begin(), ys.end());
  EXPECT_EQ(ys, (std::vector<std::int64_t>{0, 100, 600, 700}));
}

TEST(MppEstimate, RegionsSampleTheWholeTissueEvenly) {
  using mltool::slide::pick_regions;
  // 40 tiles of tissue, 8 to read: one in every 5, from the first fifth to the last, not the
  // first 8; the partly-tissue tiles are only read when the full ones run out.
  std::vector<double> tissue(40, 1.0);
  tissue[0] = 0.3;
  const auto picked = pick_regions(column_of_tiles(tissue), 8);
  ASSERT_EQ(picked.size(), 8u);
  for (std::size_t i = 0; i < picked.size(); ++i) {
    const std::int64_t row = picked[i][1] / 100;
    EXPECT_GE(row, 1 + static_cast<std::int64_t>(5 * i)) << i;
    EXPECT_LT(row, 1 + static_cast<std::int64_t>(5 * (i + 1))) << i;
  }
  const auto few = pick_regions(column_of_tiles({0.3, 1.0, 0.6, 0.2}), 3);
  ASSERT_EQ(few.size(), 3u);
  EXPECT_EQ(few[0][1], 100);  // the full tile, then the fullest others
  EXPECT_EQ(few[1][1], 200);
  EXPECT_EQ(few[2][1], 0);
}
