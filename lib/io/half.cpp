#include "mltool/io/half.hpp"

#include <cstring>

namespace mltool::io {
namespace {

std::uint32_t bits_of(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Shifts `value` right by `shift` (1..31) rounding to nearest, ties to even.
std::uint32_t shift_round_even(std::uint32_t value, unsigned shift) noexcept {
  const std::uint32_t kept = value >> shift;
  const std::uint32_t rest = value & ((1u << shift) - 1);
  const std::uint32_t halfway = 1u << (shift - 1);
  return kept + ((rest > halfway || (rest == halfway && (kept & 1u))) ? 1u : 0u);
}

}  // namespace

std::uint16_t float_to_half(float value) noexcept {
  const std::uint32_t x = bits_of(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;

  if (abs >= 0x7f800000u) {
    if (abs == 0x7f800000u) return sign | 0x7c00u;
    // NaN: keep the top payload bits like numpy; a payload that would vanish
    // becomes 1 so the result stays NaN instead of turning into infinity.
    auto nan = static_cast<std::uint16_t>(0x7c00u + ((abs & 0x007fffffu) >> 13));
    if (nan == 0x7c00u) ++nan;
    return sign | nan;
  }
  // 65520 is halfway between 65504 (largest half) and 65536; the tie goes to the
  // even neighbour, which is the overflow to infinity.
  if (abs >= 0x477ff000u) return sign | 0x7c00u;

  if (abs < 0x38800000u) {  // below 2^-14: a half subnormal or zero
    const std::uint32_t exponent = abs >> 23;
    if (exponent < 102) return sign;  // below 2^-25, rounds to zero
    const std::uint32_t mantissa = (abs & 0x007fffffu) | 0x00800000u;
    // value / 2^-24 == mantissa * 2^(exponent - 126); the shift is 14..24.
    return sign | static_cast<std::uint16_t>(shift_round_even(mantissa, 126 - exponent));
  }

  // Normal: rebias the exponent (127 -> 15) and round off 13 mantissa bits. A carry
  // out of the mantissa correctly bumps the exponent.
  return sign | static_cast<std::uint16_t>(shift_round_even(abs - 0x38000000u, 13));
}

float half_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;

  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return float_of(sign);
  // Subnormal half: every one is a normal float; shift until the implicit bit appears.
  std::uint32_t float_exponent = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  return float_of(sign | (float_exponent << 23) | ((mantissa & 0x3ffu) << 13));
}

void floats_to_halves(const float* in, std::uint16_t* out, std::size_t count) noexcept {
  for (std::size_t i = 0; i < count; ++i) out[i] = float_to_half(in[i]);
}

void halves_to_floats(const std::uint16_t* in, float* out, std::size_t count) noexcept {
  for (std::size_t i = 0; i < count; ++i) out[i] = half_to_float(in[i]);
}

}  // namespace mltool::io
