// A minimal protobuf wire encoder for tests, so they can spell out the bytes TensorFlow would
// write (and damaged variants of them) without going through the code under test.
#pragma once

#include <cstdint>
#include <string>

namespace mltool::testing::wire {

inline std::string varint(std::uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}
inline std::string tag(int number, int wire_type) {
  return varint(static_cast<std::uint64_t>(number) << 3 | wire_type);
}
inline std::string len_field(int number, const std::string& payload) {
  return tag(number, 2) + varint(payload.size()) + payload;
}
inline std::string varint_field(int number, std::uint64_t v) { return tag(number, 0) + varint(v); }

}  // namespace mltool::testing::wire
