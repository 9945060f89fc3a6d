// CRC-32C (Castagnoli), the checksum of the TFRecord framing. On x86-64 CPUs with
// SSE4.2 the crc32 instruction is used (picked at run time, so the binary still runs
// on CPUs without it); elsewhere a slicing-by-8 table implementation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mltool::io {

/// Extends `crc` (the CRC-32C of some bytes A; 0 for none) to the CRC-32C of A
/// followed by `data[0..n)`. `crc32c_extend(crc32c(a), b) == crc32c(a + b)`.
/// Uses the hardware path when the CPU has it.
std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n);

/// The CRC-32C of `data[0..n)`; crc32c("123456789", 9) == 0xE3069283.
inline std::uint32_t crc32c(const void* data, std::size_t n) { return crc32c_extend(0, data, n); }

/// Table (slicing-by-8) implementation with the semantics of crc32c_extend; runs anywhere.
/// Exposed for tests and benchmarks.
std::uint32_t crc32c_portable(std::uint32_t crc, const void* data, std::size_t n);

/// SSE4.2 implementation with the semantics of crc32c_extend (three interleaved streams
/// for long inputs). Precondition: crc32c_hardware_available(); on other CPUs it would
/// raise SIGILL, and on non-x86-64 builds it falls back to crc32c_portable.
std::uint32_t crc32c_hardware(std::uint32_t crc, const void* data, std::size_t n);

/// True if this CPU has the SSE4.2 crc32 instruction (and this is an x86-64 build).
bool crc32c_hardware_available();

/// The constant TFRecord (and LevelDB) add to a rotated CRC before storing it.
inline constexpr std::uint32_t kCrcMaskDelta = 0xa282ead8u;

/// The masked form TFRecord stores: CRCs of data that embeds CRCs are weak, so the
/// stored value is rotated right by 15 bits and offset by kCrcMaskDelta.
constexpr std::uint32_t mask_crc(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta;
}

/// Inverse of mask_crc.
constexpr std::uint32_t unmask_crc(std::uint32_t masked) {
  const std::uint32_t rotated = masked - kCrcMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace mltool::io
