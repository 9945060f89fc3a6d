// Seeded pseudo-randomness for splits and shards that is the same on every platform:
// std::shuffle and the std distributions are implementation-defined, so a dataset
// packed with one seed would differ between standard libraries. Internal to lib/records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace mltool::records::detail {

/// SplitMix64's output function: a bijective 64-bit mixer.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// A seeded hash of a string: FNV-1a of the bytes, mixed with the seed.
inline std::uint64_t seeded_hash(std::string_view s, std::uint64_t seed) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return mix64(h ^ mix64(seed));
}

/// SplitMix64: a small, fast generator, fully determined by its seed.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(mix64(seed)) {}
  std::uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return mix64(state_);
  }
  /// Uniform in [0, n) without modulo bias (rejection); n > 0.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const std::uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

 private:
  std::uint64_t state_;
};

/// Fisher–Yates shuffle with `rng`.
template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace mltool::records::detail
