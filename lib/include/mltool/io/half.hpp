// IEEE 754 binary16 ("half", numpy float16) conversions. Feature stores may keep
// their matrix in float16 to halve disk and GPU memory; these are the only places
// that round, so they follow numpy exactly: round to nearest, ties to even, with
// infinities, NaNs and subnormals preserved.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mltool::io {

/// Rounds a float to the nearest binary16 (ties to even). Values of magnitude
/// >= 65520 become infinity; NaNs stay NaN, keeping the top payload bits as numpy does.
std::uint16_t float_to_half(float value) noexcept;

/// Widens a binary16 to float; exact for every input (NaN payloads included).
float half_to_float(std::uint16_t bits) noexcept;

/// float_to_half over `count` values; `in` and `out` must not overlap.
void floats_to_halves(const float* in, std::uint16_t* out, std::size_t count) noexcept;

/// half_to_float over `count` values; `in` and `out` must not overlap.
void halves_to_floats(const std::uint16_t* in, float* out, std::size_t count) noexcept;

}  // namespace mltool::io
