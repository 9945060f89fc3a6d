// Reinhard's stain normalisation of one image on the CPU (--stain-norm reinhard's path for CPU
// batches, the reference's fit and --stain-fit slide's; features/stain.hpp): torchstain's
// (torchstain/torch/normalizers/reinhard.py with its utils/rgb2lab.py and lab2rgb.py) in two
// passes over the pixels, with no tensors. Its bits depend on the pixels alone — not on the
// math library, the CPU's vector instructions or the threads — as macenko.hpp's do: float32
// per pixel as torchstain, sums in double in pixel order, the sRGB curve a table of its 256
// values, and the cube root and the 1/2.4 power from IEEE operations alone (Newton's method
// and square roots). Within the bounds of torchstain's pixels (tests/cli/stain_test.py).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace mltool::features::reinhard {

/// An image's stain: the mean and the (sample) standard deviation of each of its LAB channels
/// in torchstain's scaling (L in 0..100, a and b centred on 0).
struct Stain {
  std::array<float, 3> mean{};
  std::array<float, 3> std{};
};

/// The stain of `p` RGB pixels (interleaved uint8), p >= 2; nothing when it is not finite.
std::optional<Stain> fit(const std::uint8_t* rgb, std::int64_t p);

/// The `p` pixels of `rgb` with stain `source` given the stain `target`, into `out`:
/// torchstain's normalize() (each LAB channel standardised, given the target's mean and
/// standard deviation, back to RGB, clamped to 0..1, times 255, truncated). False, `out` then
/// undefined, where a value is not finite.
bool normalize(const std::uint8_t* rgb, std::int64_t p, const Stain& source, const Stain& target,
               std::uint8_t* out);

/// x^(1/3) for x >= 0 in float32, from IEEE operations alone: within 1 ulp.
float cbrt_ieee(float x);

}  // namespace mltool::features::reinhard
