// torchstain's Reinhard (torchstain/torch/normalizers/reinhard.py, utils/rgb2lab.py,
// utils/lab2rgb.py) on one image's pixels; see mltool/features/reinhard.hpp for what keeps its
// bits the same everywhere. Built with -ffp-contract=off -fno-trapping-math (lib/CMakeLists.txt).
#include "mltool/features/reinhard.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mltool::features::reinhard {
namespace {

// Pixels are taken in blocks of this many (their table lookups one by one, the arithmetic on
// them in the CPU's vector registers).
constexpr std::int64_t kBlock = 512;

// torchstain's constants: sRGB → XYZ (D65) and the white point.
constexpr float kRgbToXyz[3][3] = {{0.412453f, 0.357580f, 0.180423f},
                                   {0.212671f, 0.715160f, 0.072169f},
                                   {0.019334f, 0.119193f, 0.950227f}};
constexpr float kWhite[3] = {0.95047f, 1.f, 1.08883f};

struct Constants {
  std::array<float, 256> linear{};  // the sRGB curve of v / 255, v = 0..255
  float xyz_to_rgb[3][3]{};         // kRgbToXyz's inverse
  float inv_white[3]{};
};

const Constants& constants() {
  static const Constants k = [] {
    Constants c;
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(v) / 255.f;
      c.linear[static_cast<std::size_t>(v)] =
          x > 0.04045f
              ? static_cast<float>(std::pow((static_cast<double>((x + 0.055f) / 1.055f)), 2.4))
              : x / 12.92f;
    }
    double m[3][3], det = 0;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) m[i][j] = kRgbToXyz[i][j];
    for (int j = 0; j < 3; ++j)
      det +=
          m[0][j] * (m[1][(j + 1) % 3] * m[2][(j + 2) % 3] - m[1][(j + 2) % 3] * m[2][(j + 1) % 3]);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)  // the adjugate's (i, j): the cofactor of (j, i)
        c.xyz_to_rgb[i][j] =
            static_cast<float>((m[(j + 1) % 3][(i + 1) % 3] * m[(j + 2) % 3][(i + 2) % 3] -
                                m[(j + 1) % 3][(i + 2) % 3] * m[(j + 2) % 3][(i + 1) % 3]) /
                               det);
    for (int i = 0; i < 3; ++i) c.inv_white[i] = 1.f / kWhite[i];
    return c;
  }();
  return k;
}

// x^(1/3) in double for x > 0 from a float's first guess (its exponent divided by 3) and
// Newton's steps: 3.5% off, then 1e-3, 1e-6, 1e-12.
double cube_root(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits = bits / 3 + 709921077u;
  float guess;
  std::memcpy(&guess, &bits, sizeof guess);
  double y = guess;
  const double xd = x;
  for (int i = 0; i < 4; ++i) y -= (y * y * y - xd) / (3 * y * y);
  return y;
}

// The LAB values (torchstain's lab_split of its rgb2lab) of the pixels [begin, begin + n).
void lab(const std::uint8_t* rgb, std::int64_t begin, std::int64_t n, float (*out)[kBlock]) {
  const Constants& k = constants();
  float lin[3][kBlock];
  const std::uint8_t* px = rgb + 3 * begin;
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = 0; j < 3; ++j) lin[j][i] = k.linear[px[3 * i + j]];
  float f[3][kBlock];
  for (int c = 0; c < 3; ++c)
    for (std::int64_t i = 0; i < n; ++i) {
      const float x = (lin[0][i] * kRgbToXyz[c][0] + lin[1][i] * kRgbToXyz[c][1] +
                       lin[2][i] * kRgbToXyz[c][2]) *
                      k.inv_white[c];
      f[c][i] = x > 0.008856f ? static_cast<float>(cube_root(x)) : 7.787f * x + 16.f / 116.f;
    }
  for (std::int64_t i = 0; i < n; ++i) {
    out[0][i] = ((116.f * f[1][i]) - 16.f) * 2.55f / 2.55f;
    out[1][i] = 500.f * (f[0][i] - f[1][i]) + 128.f - 128.f;
    out[2][i] = 200.f * (f[1][i] - f[2][i]) + 128.f - 128.f;
  }
}

// x^(1/2.4) = x^(5/12) for x > 0: the 12th root by a cube root and two square roots.
float power_5_12(float x) {
  const double r = std::sqrt(std::sqrt(cube_root(x)));
  return static_cast<float>(r * r * r * r * r);
}

// torchstain's lab2rgb of LAB values `c` (lab_merge, then its own split), 0..1 before clamping.
void to_rgb(const float (*c)[kBlock], std::int64_t n, float (*out)[kBlock]) {
  const Constants& k = constants();
  float xyz[3][kBlock];
  for (std::int64_t i = 0; i < n; ++i) {
    const float l = c[0][i] * 2.55f / 2.55f, a = c[1][i] + 128.f - 128.f,
                b = c[2][i] + 128.f - 128.f;
    const float y = (l + 16.f) / 116.f;
    const float v[3] = {(a / 500.f) + y, y, y - (b / 200.f)};
    for (int j = 0; j < 3; ++j)
      xyz[j][i] =
          (v[j] > 0.2068966f ? v[j] * v[j] * v[j] : (v[j] - 16.f / 116.f) / 7.787f) * kWhite[j];
  }
  for (int j = 0; j < 3; ++j)
    for (std::int64_t i = 0; i < n; ++i) {
      const float x = xyz[0][i] * k.xyz_to_rgb[j][0] + xyz[1][i] * k.xyz_to_rgb[j][1] +
                      xyz[2][i] * k.xyz_to_rgb[j][2];
      const float root = power_5_12(x > 0.f ? x : 1.f);  // the other lanes take x * 12.92
      out[j][i] = x > 0.0031308f ? 1.055f * root - 0.055f : x * 12.92f;
    }
}

}  // namespace

float cbrt_ieee(float x) { return static_cast<float>(cube_root(x)); }

std::optional<Stain> fit(const std::uint8_t* rgb, std::int64_t p) {
  if (p < 2) return std::nullopt;
  double sum[3] = {};
  float v[3][kBlock];
  for (std::int64_t b = 0; b < p; b += kBlock) {
    const std::int64_t n = std::min(kBlock, p - b);
    lab(rgb, b, n, v);
    for (std::int64_t i = 0; i < n; ++i)
      for (int j = 0; j < 3; ++j) sum[j] += v[j][i];
  }
  Stain out;
  for (int j = 0; j < 3; ++j) out.mean[j] = static_cast<float>(sum[j] / static_cast<double>(p));
  double squares[3] = {};
  for (std::int64_t b = 0; b < p; b += kBlock) {
    const std::int64_t n = std::min(kBlock, p - b);
    lab(rgb, b, n, v);
    for (std::int64_t i = 0; i < n; ++i)
      for (int j = 0; j < 3; ++j) {
        const double d = v[j][i] - out.mean[j];
        squares[j] += d * d;
      }
  }
  for (int j = 0; j < 3; ++j)
    out.std[j] = static_cast<float>(std::sqrt(squares[j] / static_cast<double>(p - 1)));
  for (int j = 0; j < 3; ++j)
    if (!std::isfinite(out.mean[j]) || !std::isfinite(out.std[j])) return std::nullopt;
  return out;
}

bool normalize(const std::uint8_t* rgb, std::int64_t p, const Stain& source, const Stain& target,
               std::uint8_t* out) {
  float v[3][kBlock], c[3][kBlock];
  std::int32_t u[3][kBlock];
  int nan = 0;
  for (std::int64_t b = 0; b < p; b += kBlock) {
    const std::int64_t n = std::min(kBlock, p - b);
    lab(rgb, b, n, v);
    for (int j = 0; j < 3; ++j)
      for (std::int64_t i = 0; i < n; ++i)
        c[j][i] = (v[j][i] - source.mean[j]) / source.std[j] * target.std[j] + target.mean[j];
    to_rgb(c, n, v);
    for (int j = 0; j < 3; ++j)
      for (std::int64_t i = 0; i < n; ++i) {
        const float x = v[j][i];
        nan |= x != x || x - x != 0.f;  // NaN or infinite
        const float clamped = x > 0.f ? (x < 1.f ? x : 1.f) : 0.f;
        u[j][i] = static_cast<std::int32_t>(clamped * 255.f);
      }
    std::uint8_t* dst = out + 3 * b;
    for (std::int64_t i = 0; i < n; ++i)
      for (int j = 0; j < 3; ++j) dst[3 * i + j] = static_cast<std::uint8_t>(u[j][i]);
  }
  return nan == 0;
}

}  // namespace mltool::features::reinhard
