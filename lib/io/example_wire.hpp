// Internal to lib/io: the protobuf wire-format primitives of ExampleScanner, with protobuf
// 3.21's limits (see example_scan.cpp), and the UTF-8 check of feature names that
// parse_example (example.cpp) shares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

// The hot helpers are forced inline, so that ExampleScanner::scan() compiles into one function
// whose cursors live in registers: the record walk then costs a few nanoseconds per field.
#define MLTOOL_HOT inline __attribute__((always_inline))

namespace mltool::io::wire {

// Protobuf's recursion limit (100) less the messages that enclose a Feature: Features, the
// map entry and the Feature itself (the Example is the top level). A list is one deeper.
constexpr int kFeatureDepth = 97;
constexpr int kListDepth = 96;

// Strict UTF-8 as parse_example checks feature names (no overlong forms, surrogates or code
// points past U+10FFFF).
inline bool valid_utf8_slow(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t n;
    std::uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1fu;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0fu;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07u;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = cp << 6 | (cc & 0x3fu);
    }
    static constexpr std::uint32_t kMinimum[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMinimum[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// The usual names are ASCII: one branch-free pass over the bytes settles those.
inline __attribute__((always_inline)) bool valid_utf8(std::string_view s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return valid_utf8_slow(s);
  return true;
}

/// A read position inside one message: [p, end).
struct Cursor {
  const std::uint8_t* p;
  const std::uint8_t* end;

  bool done() const { return p == end; }
  std::size_t left() const { return static_cast<std::size_t>(end - p); }

  // A tag: at most 5 bytes, modulo 2^32. False if truncated or longer.
  MLTOOL_HOT bool raw_tag(std::uint32_t& t) {
    if (p != end && *p < 0x80) {
      t = *p++;
      return true;
    }
    std::uint32_t v = 0;
    for (int i = 0; i < 5 && p != end; ++i) {
      const std::uint32_t b = *p++;
      v |= (b & 0x7fu) << (7 * i);
      if (b < 0x80) {
        t = v;
        return true;
      }
    }
    return false;
  }
  // A tag some field can have: also false for 0 and for field number 0, which fail the parse.
  MLTOOL_HOT bool tag(std::uint32_t& t) { return raw_tag(t) && (t >> 3) != 0; }

  MLTOOL_HOT bool varint(std::uint64_t& v) {
    if (p != end && *p < 0x80) {
      v = *p++;
      return true;
    }
    std::uint64_t r = 0;
    for (int i = 0; i < 10 && p != end; ++i) {
      const std::uint64_t b = *p++;
      r |= (b & 0x7fu) << (7 * i);
      if (b < 0x80) {
        v = r;
        return true;
      }
    }
    return false;
  }

  // A length: at most 5 bytes, and no more than what is left of this message.
  MLTOOL_HOT bool length(std::size_t& n) {
    std::uint64_t v;
    if (p != end && *p < 0x80) {
      v = *p++;
    } else {
      v = UINT64_MAX;
      std::uint64_t r = 0;
      for (int i = 0; i < 5 && p != end; ++i) {
        const std::uint64_t b = *p++;
        r |= (b & 0x7fu) << (7 * i);
        if (b < 0x80) {
          v = r;
          break;
        }
      }
    }
    if (v > left()) return false;
    n = static_cast<std::size_t>(v);
    return true;
  }

  bool skip(std::size_t n) {
    if (n > left()) return false;
    p += n;
    return true;
  }

  // Skips the value of an unknown field whose tag was just read; false where protobuf's
  // parse fails. `depth`: groups that may still nest.
  bool skip_field(std::uint32_t start, int depth) {
    std::uint64_t v;
    std::size_t n;
    switch (start & 7u) {
      case 0: return varint(v);
      case 1: return skip(8);
      case 2: return length(n) && skip(n);
      case 5: return skip(4);
      case 3: {
        if (--depth < 0) return false;
        for (std::uint32_t t; tag(t);) {
          if ((t & 7u) == 4) return (t >> 3) == (start >> 3);
          if (!skip_field(t, depth)) return false;
        }
        return false;  // the message ended inside the group, or a bad tag
      }
      default: return false;  // an end group without its start, wire types 6 and 7
    }
  }
};

}  // namespace mltool::io::wire
