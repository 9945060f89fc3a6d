#include "mltool/io/half.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

using mltool::io::float_to_half;
using mltool::io::half_to_float;

float float_of(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The value of a half by its definition, in double (exact for every half).
double half_value(std::uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

// Reference rounding, written independently of half.cpp: find the two positive
// finite halves around |f| by binary search over their values and take the
// nearer, the one with the even bit pattern on a tie. Beyond the largest half
// the next step would be 65536, which rounds to infinity.
std::uint16_t reference_to_half(float f) {
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (std::uint32_t h = 0; h <= 0x7bff; ++h)
      v.push_back(half_value(static_cast<std::uint16_t>(h)));
    v.push_back(65536.0);  // stands for infinity (0x7c00)
    return v;
  }();
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isinf(f)) return sign | 0x7c00;
  const double a = std::fabs(static_cast<double>(f));
  const auto hi = std::upper_bound(values.begin(), values.end(), a);
  if (hi == values.end()) return sign | 0x7c00;
  const auto hi_bits = static_cast<std::uint16_t>(hi - values.begin());
  const auto lo_bits = static_cast<std::uint16_t>(hi_bits - 1);  // values[0] == 0 <= a
  const double down = a - values[lo_bits];
  const double up = values[hi_bits] - a;
  if (down < up) return sign | lo_bits;
  if (up < down) return sign | hi_bits;
  return sign | ((lo_bits & 1) ? hi_bits : lo_bits);
}

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = half_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ((h & 0x7c00), 0x7c00u);
      EXPECT_NE((h & 0x3ff), 0u);
    } else if ((h & 0x7fff) == 0x7c00) {
      EXPECT_TRUE(std::isinf(f));
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0);
    } else {
      EXPECT_EQ(static_cast<double>(f), half_value(static_cast<std::uint16_t>(h))) << std::hex << h;
    }
    // NaNs too: the payload survives, as numpy's conversion keeps it.
    ASSERT_EQ(float_to_half(f), h) << std::hex << h;
  }
}

TEST(Half, SpecialValues) {
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65519.99f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // tie rounds to even: infinity
  EXPECT_EQ(float_to_half(1e9f), 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie to even 2
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
  const std::uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // A NaN whose payload lives only in the low bits must not become infinity.
  EXPECT_EQ(float_to_half(float_of(0x7f800001u)), 0x7c01);
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
}

TEST(Half, MidpointsAndTheirNeighboursMatchReference) {
  // Every tie between adjacent halves (exact in float), and one float either side.
  for (std::uint32_t h = 0; h < 0x7bff; ++h) {
    const double mid = (half_value(static_cast<std::uint16_t>(h)) +
                        half_value(static_cast<std::uint16_t>(h + 1))) /
                       2;
    const float m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(m), mid);
    for (float f : {m, std::nextafter(m, 0.0f), std::nextafter(m, 1e30f), -m}) {
      ASSERT_EQ(float_to_half(f), reference_to_half(f)) << f;
    }
  }
}

TEST(Half, RandomFloatsMatchReference) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::uniform_real_distribution<float> in_range(-70000.0f, 70000.0f);
  std::uniform_real_distribution<float> exponent(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    float f;
    switch (i % 3) {
      case 0: f = float_of(any_bits(rng)); break;
      case 1: f = in_range(rng); break;
      default: f = std::exp2(exponent(rng)) * (i % 2 ? 1.0f : -1.0f); break;
    }
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), reference_to_half(f)) << std::hexfloat << f;
  }
}

TEST(Half, BulkConversionsMatchScalar) {
  std::vector<float> in;
  for (int i = -2000; i < 2000; ++i) in.push_back(static_cast<float>(i) * 0.37f);
  std::vector<std::uint16_t> halves(in.size());
  std::vector<float> back(in.size());
  mltool::io::floats_to_halves(in.data(), halves.data(), in.size());
  mltool::io::halves_to_floats(halves.data(), back.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(halves[i], float_to_half(in[i]));
    EXPECT_EQ(back[i], half_to_float(halves[i]));
  }
}

}  // namespace
