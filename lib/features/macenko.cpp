// torchstain's Macenko (torchstain/torch/normalizers/macenko.py) on one image's pixels; see
// mltool/features/macenko.hpp for what keeps its bits the same everywhere. Built with
// -ffp-contract=off (lib/CMakeLists.txt): a fused multiply-add where the CPU has one would change
// them.
#include "mltool/features/macenko.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

// The pixel loops are compiled twice, for AVX2 and for any x86-64, and run where the CPU has
// AVX2 unless ATEN_CPU_CAPABILITY=default (LibTorch's own switch to its baseline kernels): the
// same operations on wider registers, so the same bits, which the stain test checks by
// running both. Each NAME's body is NAME_body, always inlined into NAME and NAME_avx2.
#if defined(__GNUC__) && defined(__x86_64__)
#define MLTOOL_INLINE inline __attribute__((always_inline))
#define MLTOOL_DISPATCH(R, NAME, PARAMS, ARGS)                                      \
  __attribute__((target("avx2"))) R NAME##_avx2 PARAMS { return NAME##_body ARGS; } \
  R NAME PARAMS { return avx2() ? NAME##_avx2 ARGS : NAME##_body ARGS; }
#else
#define MLTOOL_INLINE inline
#define MLTOOL_DISPATCH(R, NAME, PARAMS, ARGS) \
  R NAME PARAMS { return NAME##_body ARGS; }
#endif

namespace mltool::features::macenko {
namespace {

#if defined(__GNUC__) && defined(__x86_64__)
bool avx2() {
  static const bool yes = [] {
    const char* capability = std::getenv("ATEN_CPU_CAPABILITY");
    return __builtin_cpu_supports("avx2") &&
           !(capability && std::strcmp(capability, "default") == 0);
  }();
  return yes;
}
#endif

using Vec3 = std::array<double, 3>;
using Mat3 = std::array<Vec3, 3>;
using Angles = std::array<double, 2>;  // radians
using Pair = std::array<float, 2>;

// Pixels are taken in blocks of this many: their densities are looked up one by one, the
// arithmetic on them runs in the CPU's vector registers.
constexpr std::int64_t kBlock = 512;

// The optical densities of the pixels [begin, begin + n) of `rgb`, channel by channel.
MLTOOL_INLINE void densities(const std::uint8_t* rgb, std::int64_t begin, std::int64_t n,
                             float (*od)[kBlock]) {
  const std::array<float, 256>& t = od_table();
  const std::uint8_t* px = rgb + 3 * begin;
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = 0; j < 3; ++j) od[j][i] = t[px[3 * i + j]];
}

MLTOOL_INLINE bool is_stained(const float (*od)[kBlock], std::int64_t i) {
  return (od[0][i] >= kBeta) & (od[1][i] >= kBeta) & (od[2][i] >= kBeta);
}

// One Jacobi rotation of symmetric `a` zeroing a[p][q], accumulated into the eigenvectors `v`
// (Numerical Recipes' jacobi): a ← Jᵀ a J, v ← v J.
void rotate(Mat3& a, Mat3& v, int p, int q) {
  if (a[p][q] == 0) return;
  const double theta = (a[q][q] - a[p][p]) / (2 * a[p][q]);
  const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
  const double c = 1 / std::sqrt(t * t + 1), s = t * c;
  for (int k = 0; k < 3; ++k) {
    const double kp = a[k][p], kq = a[k][q];
    a[k][p] = c * kp - s * kq;
    a[k][q] = s * kp + c * kq;
  }
  for (int k = 0; k < 3; ++k) {
    const double pk = a[p][k], qk = a[q][k];
    a[p][k] = c * pk - s * qk;
    a[q][k] = s * pk + c * qk;
  }
  for (int k = 0; k < 3; ++k) {
    const double kp = v[k][p], kq = v[k][q];
    v[k][p] = c * kp - s * kq;
    v[k][q] = s * kp + c * kq;
  }
}

// The eigenvectors of symmetric `a` of its second largest and largest eigenvalues.
std::array<Vec3, 2> top_eigenvectors(Mat3 a) {
  Mat3 v{{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};
  for (int sweep = 0; sweep < 32; ++sweep) {
    const double off = a[0][1] * a[0][1] + a[0][2] * a[0][2] + a[1][2] * a[1][2];
    const double diag = a[0][0] * a[0][0] + a[1][1] * a[1][1] + a[2][2] * a[2][2];
    if (off <= 1e-30 * diag) break;
    rotate(a, v, 0, 1);
    rotate(a, v, 0, 2);
    rotate(a, v, 1, 2);
  }
  std::array<int, 3> order{0, 1, 2};
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return a[x][x] < a[y][y]; });
  const auto column = [&](int j) { return Vec3{v[0][j], v[1][j], v[2][j]}; };
  return {column(order[1]), column(order[2])};
}

// Each of `e` pointing as signs(cov)'s vector does (a non-negative dot product), or with its
// largest component positive.
void orient(std::array<Vec3, 2>& e, const Mat3& cov, const EigenSigns& signs) {
  std::array<std::array<float, 3>, 2> want{};
  if (signs) {
    std::array<float, 9> c{};
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        c[static_cast<std::size_t>(3 * i + j)] = static_cast<float>(cov[i][j]);
    want = signs(c);
  }
  for (std::size_t k = 0; k < 2; ++k) {
    Vec3& v = e[k];
    double dot = 0;
    for (int i = 0; i < 3; ++i) dot += v[i] * want[k][static_cast<std::size_t>(i)];
    if (!signs) {
      const auto largest = std::max_element(
          v.begin(), v.end(), [](double a, double b) { return std::fabs(a) < std::fabs(b); });
      dot = *largest;
    }
    if (dot < 0)
      for (double& x : v) x = -x;
  }
}

// The covariance (n - 1 in the denominator) of the `count` stained pixels' densities.
MLTOOL_INLINE Mat3 stained_covariance_body(const std::uint8_t* rgb, std::int64_t p,
                                           std::int64_t count) {
  // Pixel i adds to lane i % kLanes; the lanes are summed in one fixed order at the end. The
  // lanes' additions are independent, so they run side by side in vector registers.
  constexpr int kLanes = 4;
  double sum[3][kLanes] = {}, prod[6][kLanes] = {};
  float od[3][kBlock];
  for (std::int64_t b = 0; b < p; b += kBlock) {
    const std::int64_t n = std::min(kBlock, p - b);
    densities(rgb, b, n, od);
    float w[kBlock];  // 1 for a stained pixel, 0 else: no branch, the same sums
    for (std::int64_t i = 0; i < n; ++i) w[i] = is_stained(od, i) ? 1.f : 0.f;
    for (std::int64_t i = n; i < kBlock && i % kLanes; ++i) {  // the last block's end
      w[i] = 0;
      od[0][i] = od[1][i] = od[2][i] = 0;
    }
    for (std::int64_t i = 0; i < n; i += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const double x[3] = {static_cast<double>(w[i + l]) * od[0][i + l],
                             static_cast<double>(w[i + l]) * od[1][i + l],
                             static_cast<double>(w[i + l]) * od[2][i + l]};
        for (int j = 0, k = 0; j < 3; ++j) {
          sum[j][l] += x[j];
          for (int m = j; m < 3; ++m, ++k) prod[k][l] += x[j] * od[m][i + l];
        }
      }
  }
  const auto lanes = [](const double* v) { return (v[0] + v[1]) + (v[2] + v[3]); };
  const auto n = static_cast<double>(count);
  Mat3 cov{};
  for (int j = 0, k = 0; j < 3; ++j)
    for (int m = j; m < 3; ++m, ++k)
      cov[j][m] = cov[m][j] = (lanes(prod[k]) - lanes(sum[j]) * lanes(sum[m]) / n) / (n - 1);
  return cov;
}
MLTOOL_DISPATCH(Mat3, stained_covariance,
                (const std::uint8_t* rgb, std::int64_t p, std::int64_t count), (rgb, p, count))

// A pseudo-angle of (x, y) in (-2, 2], increasing with atan2(y, x) over (-π, π], and the angle
// back from it: 1 - |u| and u are proportional to sin and cos.
MLTOOL_INLINE float pseudo_angle(float x, float y) {
  const float s = std::fabs(x) + std::fabs(y);
  const float u = s > 0 ? x / s : 1;
  return y >= 0 ? 1 - u : u - 1;
}
double angle(double key) {
  const double u = key >= 0 ? 1 - key : key + 1;
  const double phi = std::atan2(1 - std::fabs(u), u);
  return key >= 0 ? phi : -phi;
}

// torchstain's percentile: the nearest rank 1 + round(q / 100 · (m - 1)), Python's round.
std::int64_t rank(std::int64_t m, double q) {
  return 1 + static_cast<std::int64_t>(std::nearbyint(.01 * q * static_cast<double>(m - 1)));
}

// The angle percentiles alpha and 100 - alpha of the `count` stained pixels in the plane of `e`
// (That = ODhat · [e0 e1], phi = atan2(That1, That0)): exact selections on the pseudo-angle.
MLTOOL_INLINE Angles angle_percentiles_body(const std::uint8_t* rgb, std::int64_t p,
                                            std::int64_t count, const std::array<Vec3, 2>& e) {
  thread_local std::vector<float> keys;              // reused: a fresh one a tile costs page faults
  keys.resize(static_cast<std::size_t>(count) + 1);  // + 1: the unstained pixel after the last
  float od[3][kBlock], key[kBlock];
  const float e0[3] = {static_cast<float>(e[0][0]), static_cast<float>(e[0][1]),
                       static_cast<float>(e[0][2])};
  const float e1[3] = {static_cast<float>(e[1][0]), static_cast<float>(e[1][1]),
                       static_cast<float>(e[1][2])};
  std::size_t k = 0;
  const std::size_t last = static_cast<std::size_t>(count);
  for (std::int64_t b = 0; b < p; b += kBlock) {
    const std::int64_t n = std::min(kBlock, p - b);
    densities(rgb, b, n, od);
    for (std::int64_t i = 0; i < n; ++i)
      key[i] = pseudo_angle(od[0][i] * e0[0] + od[1][i] * e0[1] + od[2][i] * e0[2],
                            od[0][i] * e1[0] + od[1][i] * e1[1] + od[2][i] * e1[2]);
    for (std::int64_t i = 0; i < n; ++i) {  // the stained pixels' keys, without a branch
      keys[std::min(k, last)] = key[i];
      k += is_stained(od, i) ? 1 : 0;
    }
  }
  keys.resize(std::min(k, last));
  const auto m = static_cast<std::int64_t>(keys.size());
  const float lo = select_rank(keys, rank(m, kAlpha));
  const float hi = select_rank(keys, rank(m, 100 - kAlpha));
  return {angle(lo), angle(hi)};
}
MLTOOL_DISPATCH(Angles, angle_percentiles,
                (const std::uint8_t* rgb, std::int64_t p, std::int64_t count,
                 const std::array<Vec3, 2>& e),
                (rgb, p, count, e))

// The least-squares solution's matrix for stains `he` (3×2): (HeᵀHe)⁻¹Heᵀ, 2×3 row-major.
std::array<float, 6> pseudo_inverse(const std::array<float, 6>& he) {
  double g[2][2] = {};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) g[j][k] += static_cast<double>(he[2 * i + j]) * he[2 * i + k];
  const double det = g[0][0] * g[1][1] - g[0][1] * g[1][0];
  const double inv[2][2] = {{g[1][1] / det, -g[0][1] / det}, {-g[1][0] / det, g[0][0] / det}};
  std::array<float, 6> m{};
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 3; ++i)
      m[3 * j + i] = static_cast<float>(inv[j][0] * he[2 * i] + inv[j][1] * he[2 * i + 1]);
  return m;
}

// The concentrations of the block's `n` pixels (densities `od`): (m · od) · scale.
MLTOOL_INLINE void concentrations(const float (*od)[kBlock], std::int64_t n,
                                  const std::array<float, 6>& m, std::array<float, 2> scale,
                                  float (*c)[kBlock]) {
  for (int s = 0; s < 2; ++s) {
    const float* r = &m[static_cast<std::size_t>(3 * s)];
    for (std::int64_t i = 0; i < n; ++i)
      c[s][i] = (r[0] * od[0][i] + r[1] * od[1][i] + r[2] * od[2][i]) *
                scale[static_cast<std::size_t>(s)];
  }
}

// The 99th percentiles of the concentrations c = m · od of all `p` pixels.
MLTOOL_INLINE Pair max_concentrations_body(const std::uint8_t* rgb, std::int64_t p,
                                           const std::array<float, 6>& m) {
  thread_local std::vector<float> all[2];  // reused: a fresh one a tile costs page faults
  for (auto& v : all) v.resize(static_cast<std::size_t>(p));
  float od[3][kBlock], c[2][kBlock];
  for (std::int64_t b = 0; b < p; b += kBlock) {
    const std::int64_t n = std::min(kBlock, p - b);
    densities(rgb, b, n, od);
    concentrations(od, n, m, {1.f, 1.f}, c);
    for (int s = 0; s < 2; ++s) std::copy(c[s], c[s] + n, all[s].begin() + b);
  }
  const std::int64_t r = rank(p, 99);
  return {select_rank(all[0], r), select_rank(all[1], r)};
}
MLTOOL_DISPATCH(Pair, max_concentrations,
                (const std::uint8_t* rgb, std::int64_t p, const std::array<float, 6>& m),
                (rgb, p, m))

template <std::size_t N>
bool finite(const std::array<float, N>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// exp_ieee's body, here so that normalize's loop inlines and vectorises it (a call to the
// exported function would not be: it could be interposed).
MLTOOL_INLINE float exp_fixed(float x) {
  x = x > 80.f ? 80.f : x;  // a NaN stays one
  x = x < -87.f ? -87.f : x;
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.f) - 12582912.f;  // the nearest integer (1.5 · 2^23)
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  const float z = r * r;
  const float y = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r +
                     4.1665795894e-2f) *
                        r +
                    1.6666665459e-1f) *
                       r +
                   5.0000001201e-1f);
  const float e = y * z + r + 1.f;
  const std::uint32_t bits =
      static_cast<std::uint32_t>(static_cast<std::int32_t>(n == n ? n : 0.f) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return e * two_n;
}

}  // namespace

const std::array<float, 256>& od_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> out{};
    for (int v = 0; v < 256; ++v) {
      const float q = (static_cast<float>(v) + 1.f) / static_cast<float>(kIo);
      out[static_cast<std::size_t>(v)] = static_cast<float>(-std::log(static_cast<double>(q)));
    }
    return out;
  }();
  return t;
}

// A percentile near either end is found among the values past a bound that a sample of every
// 16th value places beyond it (all of them where the sample misjudges).
float select_rank(std::vector<float>& v, std::int64_t r) {
  thread_local std::vector<float> scratch;
  if (std::any_of(v.begin(), v.end(), [](float x) { return x != x; }))
    return std::numeric_limits<float>::quiet_NaN();
  const auto m = static_cast<std::int64_t>(v.size());
  const bool top = r > m / 2;
  const std::int64_t keep = top ? m - r + 1 : r;  // the tail that holds the value
  if (m >= 4096 && keep <= m / 16) {
    scratch.clear();
    for (std::int64_t i = 0; i < m; i += 16) scratch.push_back(v[static_cast<std::size_t>(i)]);
    const auto s = static_cast<std::int64_t>(scratch.size());
    const std::int64_t tail = std::min(s, keep / 16 * 2 + 8);
    const std::int64_t at = top ? s - tail : tail - 1;
    std::nth_element(scratch.begin(), scratch.begin() + at, scratch.end());
    const float bound = scratch[static_cast<std::size_t>(at)];
    scratch.clear();
    for (const float x : v)
      if (top ? x >= bound : x <= bound) scratch.push_back(x);
    const auto c = static_cast<std::int64_t>(scratch.size());
    if (c >= keep) {
      const std::int64_t k = top ? c - keep : keep - 1;
      std::nth_element(scratch.begin(), scratch.begin() + k, scratch.end());
      return scratch[static_cast<std::size_t>(k)];
    }
  }
  std::nth_element(v.begin(), v.begin() + (r - 1), v.end());
  return v[static_cast<std::size_t>(r - 1)];
}

MLTOOL_INLINE std::int64_t stained_body(const std::uint8_t* rgb, std::int64_t p) {
  const std::array<float, 256>& t = od_table();
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < p; ++i)
    n += (t[rgb[3 * i]] >= kBeta) & (t[rgb[3 * i + 1]] >= kBeta) & (t[rgb[3 * i + 2]] >= kBeta);
  return n;
}
MLTOOL_DISPATCH(std::int64_t, stained, (const std::uint8_t* rgb, std::int64_t p), (rgb, p))

std::optional<Stain> fit(const std::uint8_t* rgb, std::int64_t p, std::int64_t count,
                         const EigenSigns& signs) {
  if (count < 2) return std::nullopt;
  const Mat3 cov = stained_covariance(rgb, p, count);
  std::array<Vec3, 2> e = top_eigenvectors(cov);
  orient(e, cov, signs);
  const std::array<double, 2> phi = angle_percentiles(rgb, p, count, e);
  std::array<Vec3, 2> v{};  // eigvecs · (cos φ, sin φ) at the low and the high angle
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 3; ++i) v[s][i] = e[0][i] * std::cos(phi[s]) + e[1][i] * std::sin(phi[s]);
  const bool low_first = v[0][0] > v[1][0];  // haematoxylin's column first
  Stain out;
  for (int i = 0; i < 3; ++i) {
    out.he[static_cast<std::size_t>(2 * i)] = static_cast<float>(v[low_first ? 0 : 1][i]);
    out.he[static_cast<std::size_t>(2 * i + 1)] = static_cast<float>(v[low_first ? 1 : 0][i]);
  }
  out.max_c = max_concentrations(rgb, p, pseudo_inverse(out.he));
  if (!finite(out.he) || !finite(out.max_c)) return std::nullopt;
  return out;
}

MLTOOL_INLINE bool normalize_body(const std::uint8_t* rgb, std::int64_t p, const Stain& source,
                                  const Stain& target, std::uint8_t* out) {
  const std::array<float, 6> m = pseudo_inverse(source.he);
  const std::array<float, 2> scale = {target.max_c[0] / source.max_c[0],
                                      target.max_c[1] / source.max_c[1]};
  const std::array<float, 6>& h = target.he;
  float od[3][kBlock], c[2][kBlock];
  std::int32_t v[3][kBlock];
  int nan = 0;
  for (std::int64_t b = 0; b < p; b += kBlock) {
    const std::int64_t n = std::min(kBlock, p - b);
    densities(rgb, b, n, od);
    concentrations(od, n, m, scale, c);
    for (int j = 0; j < 3; ++j) {
      const float h0 = h[static_cast<std::size_t>(2 * j)],
                  h1 = h[static_cast<std::size_t>(2 * j + 1)];
      for (std::int64_t i = 0; i < n; ++i) {
        const float x = static_cast<float>(kIo) * exp_fixed(-(h0 * c[0][i] + h1 * c[1][i]));
        nan |= x != x;
        v[j][i] = static_cast<std::int32_t>(x < 255.f ? x : 255.f);  // a NaN: 255, refused below
      }
    }
    std::uint8_t* dst = out + 3 * b;
    for (std::int64_t i = 0; i < n; ++i)
      for (int j = 0; j < 3; ++j) dst[3 * i + j] = static_cast<std::uint8_t>(v[j][i]);
  }
  return nan == 0;
}
MLTOOL_DISPATCH(bool, normalize,
                (const std::uint8_t* rgb, std::int64_t p, const Stain& source, const Stain& target,
                 std::uint8_t* out),
                (rgb, p, source, target, out))

float exp_ieee(float x) { return exp_fixed(x); }

}  // namespace mltool::features::macenko
