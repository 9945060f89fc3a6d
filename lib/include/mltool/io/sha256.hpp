// SHA-256 (FIPS 180-4), streaming: the checksum of features.npy that dataset.json pins (a
// dataset's records are row indices, so they are only meaningful against the exact matrix
// they were packed from), and of extract's --stain-reference image. Small and
// dependency-free. Blocks run on the x86 SHA extensions (SHA-NI,
// about 2 GB/s a core) where the processor has them, else on portable code.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mltool::io {

/// Incremental SHA-256: update() any number of times, then digest() or hex() once.
class Sha256 {
 public:
  /// Which block function runs: `automatic` picks SHA-NI when the processor has it.
  enum class Engine { automatic, portable };
  explicit Sha256(Engine engine = Engine::automatic);
  /// Whether this processor has the SHA extensions (what `automatic` uses).
  static bool hardware_available();
  /// Feeds `size` bytes; any split of the input gives the same digest.
  void update(const void* data, std::size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  /// Pads and returns the 32-byte digest. UsageError if called twice.
  std::array<std::uint8_t, 32> digest();
  /// digest() as 64 lowercase hex digits.
  std::string hex();

 private:
  void blocks(const std::uint8_t* p, std::size_t count);
  bool hardware_;
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t length_ = 0;  // bytes fed so far
  bool finished_ = false;
};

/// The SHA-256 of `data` as lowercase hex.
std::string sha256_hex(std::string_view data);

}  // namespace mltool::io
