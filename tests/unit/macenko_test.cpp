// Macenko on the CPU (lib/features/macenko.cpp), the pieces the agreement with torchstain
// (tests/cli/stain_test.py) rests on: e^x within 2 ulp of the correctly rounded value, rank
// selection equal to a full sort whatever the input's order, the stain vectors of a synthetic
// H&E image recovered, and an image normalised to its own stain given back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "mltool/features/macenko.hpp"

namespace mltool::features::macenko {
namespace {

constexpr float kHaematoxylin[3] = {0.65f, 0.70f, 0.29f};
constexpr float kEosin[3] = {0.07f, 0.99f, 0.11f};

// p RGB pixels: random haematoxylin and eosin concentrations (uniform in 0..1.2 and 0..0.8)
// mixed by Beer–Lambert with Io 240.
std::vector<std::uint8_t> he_image(std::int64_t p, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(3 * p));
  for (std::int64_t i = 0; i < p; ++i) {
    const double h = 1.2 * u(rng), e = 0.8 * u(rng);
    for (int j = 0; j < 3; ++j) {
      const double v = 240 * std::exp(-(h * kHaematoxylin[j] + e * kEosin[j]));
      out[static_cast<std::size_t>(3 * i + j)] = static_cast<std::uint8_t>(std::min(v, 255.0));
    }
  }
  return out;
}

// The cosine of the angle between column `col` of `he` and `v`.
double cosine(const Stain& s, int col, const float* v) {
  double dot = 0, a = 0, b = 0;
  for (int i = 0; i < 3; ++i) {
    const double x = s.he[static_cast<std::size_t>(2 * i + col)];
    dot += x * v[i];
    a += x * x;
    b += static_cast<double>(v[i]) * v[i];
  }
  return dot / std::sqrt(a * b);
}

TEST(Macenko, ExpWithinTwoUlp) {
  for (float x = -87.f; x <= 80.f; x += 0.0007f) {
    const double want = std::exp(static_cast<double>(x));
    const float got = exp_ieee(x);
    const double ulp =
        std::nextafter(static_cast<float>(want), INFINITY) - static_cast<float>(want);
    ASSERT_LE(std::fabs(got - want), 2 * ulp) << x;
  }
  EXPECT_TRUE(std::isnan(exp_ieee(NAN)));
  EXPECT_EQ(exp_ieee(1000.f), exp_ieee(80.f));
  EXPECT_EQ(exp_ieee(-1000.f), exp_ieee(-87.f));
  EXPECT_EQ(exp_ieee(0.f), 1.f);
}

TEST(Macenko, SelectRankIsExact) {
  std::mt19937 rng(7);
  for (const std::int64_t m : {1, 2, 100, 4095, 4096, 5000, 65536}) {
    for (int order = 0; order < 4; ++order) {
      std::vector<float> v(static_cast<std::size_t>(m));
      std::uniform_int_distribution<int> few(0, 40);  // many ties
      std::normal_distribution<float> normal(0, 1);
      for (auto& x : v) x = order == 3 ? static_cast<float>(few(rng)) : normal(rng);
      if (order == 1) std::sort(v.begin(), v.end());
      if (order == 2) std::sort(v.rbegin(), v.rend());
      std::vector<float> sorted = v;
      std::sort(sorted.begin(), sorted.end());
      for (const std::int64_t r : {std::int64_t{1}, 1 + m / 100, (m + 1) / 2, m - m / 100, m}) {
        std::vector<float> w = v;
        EXPECT_EQ(select_rank(w, r), sorted[static_cast<std::size_t>(r - 1)])
            << "m " << m << " order " << order << " rank " << r;
      }
    }
  }
  std::vector<float> with_nan = {1.f, NAN, 3.f};
  EXPECT_TRUE(std::isnan(select_rank(with_nan, 1)));
}

TEST(Macenko, FitRecoversTheStains) {
  const std::int64_t p = 128 * 128;
  const std::vector<std::uint8_t> image = he_image(p, 1);
  const std::int64_t count = stained(image.data(), p);
  ASSERT_GT(count, p / 2);
  const auto s = fit(image.data(), p, count);
  ASSERT_TRUE(s.has_value());
  // Near, not equal: the 1st and 99th angle percentiles are mixtures close to the pure stains,
  // and the pixels are integers.
  EXPECT_GT(cosine(*s, 0, kHaematoxylin), 0.97);
  EXPECT_GT(cosine(*s, 1, kEosin), 0.97);
  EXPECT_GT(s->max_c[0], 0.f);
  EXPECT_GT(s->max_c[1], 0.f);
  // Normalised to its own stain, the image comes back (up to truncation and the 255 clip).
  std::vector<std::uint8_t> out(image.size());
  ASSERT_TRUE(normalize(image.data(), p, *s, *s, out.data()));
  double diff = 0;
  for (std::size_t i = 0; i < out.size(); ++i) diff += std::abs(out[i] - image[i]);
  EXPECT_LE(diff / static_cast<double>(out.size()), 1.0);
  const auto again = fit(image.data(), p, count);
  EXPECT_EQ(again->he, s->he);
  EXPECT_EQ(again->max_c, s->max_c);
  const std::vector<std::uint8_t> white(static_cast<std::size_t>(3 * p), 250);
  EXPECT_EQ(stained(white.data(), p), 0);
  EXPECT_FALSE(fit(white.data(), p, 0).has_value());
}

}  // namespace
}  // namespace mltool::features::macenko
