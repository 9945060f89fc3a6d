// Macenko's stain normalisation of one image on the CPU (--stain-norm macenko's path for CPU
// batches, the reference's fit and --stain-fit slide's; features/stain.hpp): torchstain's algorithm
// (torchstain/torch/normalizers/macenko.py) in a few passes over the pixels, with no tensors.
// Its bits depend on the image's pixels alone — not on the math library, the CPU's vector
// instructions or the threads — since it is made of IEEE operations in a fixed order:
// - sums over the pixels in double, in pixel order;
// - the 3×3 eigenvectors by Jacobi rotations, in double; their signs, which change the stain
//   matrix only where the stain angles straddle ±π, may be taken from LAPACK's (EigenSigns);
// - the angle percentiles select on a pseudo-angle that orders pixels as atan2 does, and only
//   the two selected ones go through atan2, cos and sin; percentiles are exact selections
//   (torchstain's nearest rank);
// - the least-squares concentrations through the 2×3 pseudo-inverse, which is unique;
// - e^x from its own polynomial (exp_ieee), the same bits wherever it runs;
// - its pixel loops compiled for AVX2 and for any x86-64 (ATEN_CPU_CAPABILITY=default takes
//   the latter, as it does LibTorch's kernels): the same operations, so the same bits.
// Not bit-equal to torchstain's float32 tensors, but within the bounds (mean absolute
// difference <= 1 level, tests/cli/stain_test.py).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace mltool::features::macenko {

/// torchstain's constants: transmitted light, the angle percentile, the optical density below
/// which a pixel counts as transparent (in any channel).
inline constexpr int kIo = 240;
inline constexpr double kAlpha = 1;
inline constexpr float kBeta = 0.15f;

/// -log((v + 1) / Io) for v = 0..255, float32: the optical density of a channel value.
const std::array<float, 256>& od_table();

/// An image's stain: the stain matrix (3×2, row-major, haematoxylin's column first) and the
/// 99th percentiles of the two concentrations.
struct Stain {
  std::array<float, 6> he{};
  std::array<float, 2> max_c{};
};

/// How many of `p` RGB pixels (interleaved uint8) are stained: optical density >= kBeta in
/// every channel.
std::int64_t stained(const std::uint8_t* rgb, std::int64_t p);

/// Given the covariance of the stained pixels' densities (3×3 row-major, float32 as torchstain
/// computes it), the eigenvectors of its second largest and largest eigenvalues as another
/// library computes them, whose signs fit() takes. The signs matter where a tile's stain
/// angles straddle ±π (too little stain, or stain too uniform, for the method): the
/// percentiles, and so torchstain's result, then depend on them, and torchstain takes
/// LAPACK's. Its values are not used: the vectors are fit()'s own.
using EigenSigns = std::function<std::array<std::array<float, 3>, 2>(const std::array<float, 9>&)>;

/// The stain of `p` RGB pixels, `count` (stained()) of them stained, at least 2; nothing when
/// an estimate is not finite. The eigenvectors' signs are `signs`' (when given), or such that
/// each one's largest component is positive.
std::optional<Stain> fit(const std::uint8_t* rgb, std::int64_t p, std::int64_t count,
                         const EigenSigns& signs = {});

/// The `p` pixels of `rgb` with stain `source` given the stain `target`, into `out` (p RGB
/// pixels): torchstain's normalize(). False, `out` then undefined, where a value is not finite.
bool normalize(const std::uint8_t* rgb, std::int64_t p, const Stain& source, const Stain& target,
               std::uint8_t* out);

/// The value of rank r (1-based, 1..v.size()) of `v`, exactly, reordering `v`; NaN where one
/// value is. A rank near either end is selected among the values past a bound set by a
/// sample, not by a selection over all of them.
float select_rank(std::vector<float>& v, std::int64_t r);

/// e^x in float32 from IEEE additions and multiplications alone (Cody–Waite reduction, a
/// degree-5 polynomial), within 2 ulp; saturates above 80 and is 0 below -87.
float exp_ieee(float x);

}  // namespace mltool::features::macenko
