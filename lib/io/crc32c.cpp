// CRC-32C: slicing-by-8 tables everywhere, the SSE4.2 crc32 instruction where the CPU
// has it. The instruction has a latency of 3 cycles but a throughput of 1 per cycle, so
// long inputs are cut into three blocks whose CRCs run interleaved and are combined
// afterwards (the technique of Intel's white paper and Mark Adler's crc32c.c).
#include "mltool/io/crc32c.hpp"

#include <cstring>

#include "mltool/util/endian.hpp"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace mltool::io {
namespace {

// The Castagnoli polynomial, bit-reflected (CRC-32C processes the LSB first).
constexpr std::uint32_t kPoly = 0x82f63b78u;

struct SliceTables {
  std::uint32_t t[8][256];
};

// t[0] is the classic byte table; t[k][b] is the effect of byte b followed by k zero
// bytes, which lets the portable loop consume 8 bytes with 8 independent lookups.
constexpr SliceTables make_slice_tables() {
  SliceTables tables{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
    tables.t[0][i] = c;
  }
  for (int s = 1; s < 8; ++s) {
    for (int i = 0; i < 256; ++i) {
      const std::uint32_t prev = tables.t[s - 1][i];
      tables.t[s][i] = (prev >> 8) ^ tables.t[0][prev & 0xffu];
    }
  }
  return tables;
}

constexpr SliceTables kSlice = make_slice_tables();

using util::load_le32;

#if defined(__x86_64__)

// Block lengths of the interleaved hardware loop. The long blocks amortise the cost of
// combining; the short ones keep inputs of a few KiB on the fast path. Both must be
// multiples of 8 (one crc32q per stream per step).
constexpr std::size_t kLongBlock = 8192;
constexpr std::size_t kShortBlock = 256;

// The raw CRC register update (without the pre/post inversion) is linear over GF(2), so
// "append n zero bytes" is a 32x32 bit matrix. Tabulated per byte of the register, it
// costs four lookups; it shifts a block's CRC past the blocks that follow it.
struct ShiftTable {
  std::uint32_t t[4][256];
};

ShiftTable make_shift_table(std::size_t zero_bytes) {
  std::uint32_t basis[32];
  for (int bit = 0; bit < 32; ++bit) {
    std::uint32_t c = 1u << bit;
    for (std::size_t i = 0; i < zero_bytes; ++i) c = (c >> 8) ^ kSlice.t[0][c & 0xffu];
    basis[bit] = c;
  }
  ShiftTable table{};
  for (int byte = 0; byte < 4; ++byte) {
    for (std::uint32_t v = 0; v < 256; ++v) {
      std::uint32_t r = 0;
      for (int b = 0; b < 8; ++b)
        if ((v >> b) & 1u) r ^= basis[byte * 8 + b];
      table.t[byte][v] = r;
    }
  }
  return table;
}

struct ShiftTables {
  ShiftTable long_block = make_shift_table(kLongBlock);
  ShiftTable short_block = make_shift_table(kShortBlock);
};

const ShiftTables& shift_tables() {
  static const ShiftTables tables;  // built once, on first long input (~0.3 ms)
  return tables;
}

inline std::uint32_t shift(const ShiftTable& table, std::uint32_t crc) {
  return table.t[0][crc & 0xffu] ^ table.t[1][(crc >> 8) & 0xffu] ^
         table.t[2][(crc >> 16) & 0xffu] ^ table.t[3][crc >> 24];
}

inline std::uint64_t load64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Consumes 3 * block bytes: the first block continues `crc`, the other two start from
// zero in parallel, and linearity gives raw(s, A|B) = shift(raw(s, A), |B|) ^ raw(0, B).
template <std::size_t block>
__attribute__((target("sse4.2"))) inline std::uint64_t three_streams(std::uint64_t crc,
                                                                     const std::uint8_t* p,
                                                                     const ShiftTable& table) {
  std::uint64_t c0 = crc, c1 = 0, c2 = 0;
  const std::uint8_t* const end = p + block;
  do {
    c0 = _mm_crc32_u64(c0, load64(p));
    c1 = _mm_crc32_u64(c1, load64(p + block));
    c2 = _mm_crc32_u64(c2, load64(p + 2 * block));
    p += 8;
  } while (p < end);
  std::uint32_t combined =
      shift(table, static_cast<std::uint32_t>(c0)) ^ static_cast<std::uint32_t>(c1);
  combined = shift(table, combined) ^ static_cast<std::uint32_t>(c2);
  return combined;
}

#endif  // __x86_64__

bool detect_hardware() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

}  // namespace

std::uint32_t crc32c_portable(std::uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  const auto& t = kSlice.t;
  std::uint32_t c = ~crc;
  while (n >= 8) {
    const std::uint32_t lo = load_le32(p) ^ c;
    const std::uint32_t hi = load_le32(p + 4);
    c = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xffu] ^ t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xffu];
  return ~c;
}

#if defined(__x86_64__)

__attribute__((target("sse4.2"))) std::uint32_t crc32c_hardware(std::uint32_t crc, const void* data,
                                                                std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint64_t c = ~crc;
  // Aligned 8-byte loads never straddle a cache line.
  while (n > 0 && (reinterpret_cast<std::uintptr_t>(p) & 7u) != 0) {
    c = _mm_crc32_u8(static_cast<std::uint32_t>(c), *p++);
    --n;
  }
  if (n >= 3 * kShortBlock) {
    const ShiftTables& tables = shift_tables();
    while (n >= 3 * kLongBlock) {
      c = three_streams<kLongBlock>(c, p, tables.long_block);
      p += 3 * kLongBlock;
      n -= 3 * kLongBlock;
    }
    while (n >= 3 * kShortBlock) {
      c = three_streams<kShortBlock>(c, p, tables.short_block);
      p += 3 * kShortBlock;
      n -= 3 * kShortBlock;
    }
  }
  while (n >= 8) {
    c = _mm_crc32_u64(c, load64(p));
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = _mm_crc32_u8(static_cast<std::uint32_t>(c), *p++);
    --n;
  }
  return ~static_cast<std::uint32_t>(c);
}

#else

std::uint32_t crc32c_hardware(std::uint32_t crc, const void* data, std::size_t n) {
  return crc32c_portable(crc, data, n);
}

#endif

bool crc32c_hardware_available() {
  static const bool available = detect_hardware();
  return available;
}

std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n) {
  return crc32c_hardware_available() ? crc32c_hardware(crc, data, n)
                                     : crc32c_portable(crc, data, n);
}

}  // namespace mltool::io
