// CRC-32C: published check values, the hardware path against the table path (every
// length and alignment around the block boundaries), and both against a bit-at-a-time
// reference that shares no code with them.
#include "mltool/io/crc32c.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mltool::io {
namespace {

// Straight from the definition: reflected polynomial, one bit at a time.
std::uint32_t reference_crc32c(std::uint32_t crc, const std::uint8_t* p, std::size_t n) {
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1u) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
  }
  return ~crc;
}

std::vector<std::uint8_t> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

using CrcFn = std::uint32_t (*)(std::uint32_t, const void*, std::size_t);

// Both implementations, plus the dispatcher, where this CPU can run them.
std::vector<std::pair<const char*, CrcFn>> implementations() {
  std::vector<std::pair<const char*, CrcFn>> fns = {{"portable", &crc32c_portable},
                                                    {"dispatch", &crc32c_extend}};
  if (crc32c_hardware_available()) fns.emplace_back("hardware", &crc32c_hardware);
  return fns;
}

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) appendix B.4 and the common "123456789" check value.
  std::vector<std::uint8_t> zeros(32, 0), ones(32, 0xff), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<std::uint8_t>(i);
    dec[i] = static_cast<std::uint8_t>(31 - i);
  }
  const std::string check = "123456789";
  for (const auto& [name, fn] : implementations()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(fn(0, check.data(), check.size()), 0xE3069283u);
    EXPECT_EQ(fn(0, zeros.data(), zeros.size()), 0x8A9136AAu);
    EXPECT_EQ(fn(0, ones.data(), ones.size()), 0x62A8AB43u);
    EXPECT_EQ(fn(0, inc.data(), inc.size()), 0x46DD794Eu);
    EXPECT_EQ(fn(0, dec.data(), dec.size()), 0x113FDB5Cu);
    EXPECT_EQ(fn(0, nullptr, 0), 0u);
    EXPECT_EQ(fn(0x12345678u, nullptr, 0), 0x12345678u);
  }
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
}

TEST(Crc32c, PortableMatchesBitwiseReference) {
  const auto data = random_bytes(4096, 1);
  for (std::size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4096}) {
    EXPECT_EQ(crc32c_portable(0, data.data(), n), reference_crc32c(0, data.data(), n)) << n;
    EXPECT_EQ(crc32c_portable(0xdeadbeefu, data.data(), n),
              reference_crc32c(0xdeadbeefu, data.data(), n))
        << n;
  }
}

TEST(Crc32c, HardwareMatchesPortableEveryLengthAndAlignment) {
  if (!crc32c_hardware_available()) GTEST_SKIP() << "no SSE4.2 on this CPU";
  const auto data = random_bytes(300 + 8, 2);
  for (std::size_t align = 0; align < 8; ++align) {
    for (std::size_t n = 0; n <= 300; ++n) {
      const std::uint8_t* p = data.data() + align;
      ASSERT_EQ(crc32c_hardware(0, p, n), crc32c_portable(0, p, n))
          << "length " << n << " alignment " << align;
      ASSERT_EQ(crc32c_hardware(0x9e3779b9u, p, n), crc32c_portable(0x9e3779b9u, p, n))
          << "length " << n << " alignment " << align;
    }
  }
}

TEST(Crc32c, HardwareMatchesPortableAroundBlockBoundaries) {
  if (!crc32c_hardware_available()) GTEST_SKIP() << "no SSE4.2 on this CPU";
  // 3 x 256 and 3 x 8192 are where the interleaved loops start; mixes of both follow.
  const std::size_t short3 = 3 * 256, long3 = 3 * 8192;
  std::vector<std::size_t> sizes = {short3 - 1, short3, short3 + 1,     2 * short3 + 8,
                                    long3 - 1,  long3,  long3 + 1,      long3 + short3 + 5,
                                    2 * long3,  100003, (1u << 20) + 13};
  const auto data = random_bytes((1u << 20) + 64, 3);
  for (std::size_t n : sizes) {
    for (std::size_t align : {0, 1, 3, 7}) {
      const std::uint8_t* p = data.data() + align;
      EXPECT_EQ(crc32c_hardware(0, p, n), crc32c_portable(0, p, n))
          << "length " << n << " alignment " << align;
    }
  }
  EXPECT_EQ(crc32c_hardware(0, data.data(), long3 + 17),
            reference_crc32c(0, data.data(), long3 + 17));
}

TEST(Crc32c, ExtendEqualsWhole) {
  const auto data = random_bytes(70000, 4);
  for (const auto& [name, fn] : implementations()) {
    SCOPED_TRACE(name);
    const std::uint32_t whole = fn(0, data.data(), data.size());
    for (std::size_t cut : {0, 1, 5, 8, 777, 24576, 24577, 69999, 70000}) {
      const std::uint32_t head = fn(0, data.data(), cut);
      EXPECT_EQ(fn(head, data.data() + cut, data.size() - cut), whole) << "cut " << cut;
    }
    // Many small pieces, as a streaming writer would produce.
    std::uint32_t c = 0;
    std::size_t pos = 0;
    for (std::size_t piece = 1; pos < data.size(); piece = piece * 3 % 1001 + 1) {
      const std::size_t n = std::min(piece, data.size() - pos);
      c = fn(c, data.data() + pos, n);
      pos += n;
    }
    EXPECT_EQ(c, whole);
  }
}

TEST(Crc32c, MaskRoundTrip) {
  EXPECT_EQ(mask_crc(0), kCrcMaskDelta);
  std::mt19937 rng(5);
  for (int i = 0; i < 1000; ++i) {
    const std::uint32_t c = static_cast<std::uint32_t>(rng());
    EXPECT_EQ(unmask_crc(mask_crc(c)), c);
  }
  // Rotation by 15: the low 15 bits move to the top.
  EXPECT_EQ(mask_crc(0x00007fffu) - kCrcMaskDelta, 0xfffe0000u);
}

}  // namespace
}  // namespace mltool::io
