// ExampleScanner against parse_example (protobuf): the same records accepted and refused, the
// same values read, on hand-made edge cases of protobuf's merge rules and on many thousands of
// randomly damaged records.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <set>

#include "mltool/io/example_scan.hpp"
#include "mltool/util/error.hpp"
#include "support/wire.hpp"

namespace mltool::io {
namespace {

using namespace testing::wire;  // NOLINT: the encoder's short names read as the format

std::string entry(const std::string& key, const std::string& feature) {
  return len_field(1, len_field(1, key) + len_field(2, feature));
}
std::string example(const std::string& entries) { return len_field(1, entries); }
std::string int64_feature(std::initializer_list<std::uint64_t> values) {
  std::string packed;
  for (auto v : values) packed += varint(v);
  return len_field(3, len_field(1, packed));
}
std::string bytes_feature(const std::string& v) { return len_field(1, len_field(1, v)); }

// What parse_example makes of `bytes`: nullopt if refused, else name -> (kind, values as text).
using Seen = std::map<std::string, std::pair<FeatureKind, std::vector<std::string>>>;

std::optional<Seen> by_protobuf(std::string_view bytes) {
  try {
    const Example e = parse_example(bytes, "");
    Seen out;
    for (const auto& name : e.names()) {
      auto& [kind, values] = out[name];
      kind = e.kind(name);
      if (kind == FeatureKind::int64_list)
        for (auto v : e.int64s(name)) values.push_back(std::to_string(v));
      if (kind == FeatureKind::bytes_list)
        for (const auto& v : e.bytes(name)) values.push_back(v);
      if (kind == FeatureKind::float_list)
        for (float v : e.floats(name)) {
          std::uint32_t bits;
          std::memcpy(&bits, &v, 4);
          values.push_back(std::to_string(bits));
        }
    }
    return out;
  } catch (const FormatError&) {
    return std::nullopt;
  }
}

// The scanner's view of the same names (plus any `extra` it is asked for).
std::optional<Seen> by_scanner(std::string_view bytes, const std::vector<std::string>& names,
                               std::string* error = nullptr) {
  ExampleScanner scanner(names);
  if (!scanner.scan(bytes)) {
    if (error) *error = scanner.error();
    return std::nullopt;
  }
  Seen out;
  for (std::size_t i = 0; i < scanner.size(); ++i) {
    if (!scanner.has(i)) continue;
    auto& [kind, values] = out[scanner.name(i)];
    kind = scanner.kind(i);
    for (auto v : scanner.int64s(i)) values.push_back(std::to_string(v));
    for (auto v : scanner.bytes(i)) values.emplace_back(v);
    for (float v : scanner.floats(i)) {
      std::uint32_t bits;
      std::memcpy(&bits, &v, 4);
      values.push_back(std::to_string(bits));
    }
  }
  return out;
}

// Both readers agree on `bytes`; `names` are asked of the scanner besides what protobuf found.
void expect_same(std::string_view bytes, std::vector<std::string> names = {}) {
  const auto truth = by_protobuf(bytes);
  if (truth) {
    for (const auto& [name, v] : *truth) names.push_back(name);
  }
  std::string error;
  const auto mine = by_scanner(bytes, names, &error);
  ASSERT_EQ(truth.has_value(), mine.has_value())
      << (truth ? "scanner refused what protobuf accepts: " + error
                : std::string("scanner accepted what protobuf refuses"));
  if (truth) {
    EXPECT_EQ(*truth, *mine);
  }
}

TEST(ExampleScan, ReadsBuilderOutput) {
  ExampleBuilder b;
  b.add_int64("index", 123456789).add_int64("label", -3).add_bytes("slide", "S1");
  b.add_int64s("indices", {1, 2, 3}).add_floats("f", {1.5f, -2.0f}).add_bytes_list("k", {"", "x"});
  const std::string bytes = b.serialize();
  ExampleScanner s({"label", "slide", "indices", "f", "k", "absent"});
  ASSERT_TRUE(s.scan(bytes)) << s.error();
  EXPECT_EQ(s.kind(0), FeatureKind::int64_list);
  ASSERT_EQ(s.int64s(0).size(), 1u);
  EXPECT_EQ(s.int64s(0)[0], -3);
  ASSERT_EQ(s.bytes(1).size(), 1u);
  EXPECT_EQ(s.bytes(1)[0], "S1");
  EXPECT_EQ(std::vector<std::int64_t>(s.int64s(2).begin(), s.int64s(2).end()),
            (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(std::vector<float>(s.floats(3).begin(), s.floats(3).end()),
            (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(s.bytes(4).size(), 2u);
  EXPECT_FALSE(s.has(5));
  EXPECT_EQ(s.other_features(), 1u);  // index
  EXPECT_EQ(s.first_other(), "index");
  expect_same(bytes);
  EXPECT_TRUE(s.scan(""));  // an empty Example
  EXPECT_FALSE(s.has(0));
}

TEST(ExampleScan, ProtobufMergeRules) {
  const std::string a = entry("a", int64_feature({1}));
  // a later entry of the same name replaces the earlier one
  expect_same(example(a + entry("a", int64_feature({2, 3}))));
  // ... also across two Features fields of the Example
  expect_same(example(a) + example(entry("a", bytes_feature("z"))));
  // value before key, key missing (the name is ""), value missing (no kind)
  expect_same(example(len_field(1, len_field(2, int64_feature({7})) + len_field(1, "v"))));
  expect_same(example(len_field(1, len_field(2, int64_feature({7})))), {""});
  expect_same(example(len_field(1, len_field(1, "n"))), {"n"});
  // two values in one entry merge; a kind switch drops the first list
  expect_same(example(len_field(
      1, len_field(1, "m") + len_field(2, int64_feature({1})) + len_field(2, int64_feature({2})))));
  expect_same(example(len_field(
      1, len_field(1, "m") + len_field(2, int64_feature({1})) + len_field(2, bytes_feature("b")))));
  // unpacked and packed int64 mixed; floats unpacked (fixed32) and packed; non-canonical varints
  expect_same(example(entry("i", len_field(3, tag(1, 0) + varint(5) + len_field(1, varint(6))))));
  expect_same(example(entry("f", len_field(2, tag(1, 5) + std::string("\0\0\x80?", 4) +
                                                  len_field(1, std::string(8, '\x01'))))));
  expect_same(example(entry("i", len_field(3, std::string("\x88\x00", 2) + varint(9)))));
  // an unknown field inside an entry that a later entry of that name replaces is forgotten
  const std::string bad = entry("a", int64_feature({1}) + tag(9, 0) + varint(1));
  expect_same(bad);               // refused
  expect_same(example(bad + a));  // accepted
  expect_same(example(a + bad));  // refused
  expect_same(example(entry("a", len_field(1, len_field(1, "x") + tag(4, 0) + varint(1)) +
                                     int64_feature({1}))));  // accepted: the list is dropped
  // well-formed and malformed groups inside a Feature (unknown either way)
  const std::string group = tag(5, 3) + tag(1, 0) + varint(1) + tag(5, 4);
  expect_same(example(entry("g", int64_feature({1}) + group) + a));
  expect_same(example(entry("g", int64_feature({1}) + tag(5, 3) + tag(6, 4)) + entry("g", "")));
  // 10-byte varints: the last byte's high bits are dropped; 11 bytes fail
  expect_same(example(entry("v", len_field(3, len_field(1, std::string(9, '\xff') + "\x7f")))));
  expect_same(example(entry("v", len_field(3, len_field(1, std::string(10, '\xff') + "\x01")))));
  // bad UTF-8 name, field 0, tag 0, wrong wire types, extra entry fields
  expect_same(example(entry("\xff", int64_feature({1}))));
  expect_same(example(len_field(1, tag(0, 2) + varint(0))));
  expect_same(example(len_field(1, std::string(1, '\0'))));
  expect_same(example(entry("b", len_field(1, tag(1, 0) + varint(3)))));
  expect_same(example(len_field(1, len_field(1, "k") + len_field(3, ""))));
  expect_same(tag(2, 0) + varint(1));
  expect_same(example(tag(2, 0) + varint(1)));
}

// Found by fuzz_example (UBSan): an empty float list, packed or in the canonical layout, made
// the scanner memcpy zero bytes to an empty vector's data(), a null pointer. It reads as an
// empty float list, as protobuf reads it.
TEST(ExampleScan, EmptyFloatLists) {
  const std::string empty_packed = len_field(2, len_field(1, ""));
  expect_same(example(entry("f", empty_packed)));
  expect_same(example(entry("f", empty_packed + empty_packed)));
  expect_same(example(len_field(1, len_field(2, empty_packed) + len_field(1, "f"))));
  expect_same(example(
      entry("f", len_field(2, len_field(1, std::string("\0\0\x80?", 4)) + len_field(1, "")))));
  ExampleScanner s({"f"});
  ASSERT_TRUE(s.scan(example(entry("f", empty_packed)))) << s.error();
  EXPECT_EQ(s.kind(0), FeatureKind::float_list);
  EXPECT_TRUE(s.floats(0).empty());
}

TEST(ExampleScan, ErrorsAreWordedAsParseExample) {
  std::string error;
  EXPECT_FALSE(by_scanner("\x0a\x05", {}, &error));
  EXPECT_EQ(error, "not a tf.train.Example: protobuf parse failed (2 bytes)");
  EXPECT_FALSE(by_scanner(tag(3, 0) + varint(1), {}, &error));
  EXPECT_EQ(error,
            "not a tf.train.Example: the Example message has field number 3, which "
            "tf.train.Example does not define");
  EXPECT_FALSE(
      by_scanner(example(entry("x", int64_feature({1}) + tag(7, 0) + varint(0))), {}, &error));
  EXPECT_EQ(error,
            "not a tf.train.Example: feature 'x' has field number 7, which tf.train.Example does "
            "not define");
  EXPECT_FALSE(
      by_scanner(example(len_field(1, len_field(1, "k") + tag(3, 0) + varint(1))), {}, &error));
  EXPECT_EQ(error,
            "not a tf.train.Example: a feature map entry has field number 3 (wire type 0), "
            "expected only key (1) and value (2)");
}

// Records like mltool pack's, damaged at random: flips, overwrites, insertions, deletions,
// truncations. Both readers must agree on every one.
TEST(ExampleScan, AgreesWithProtobufOnDamagedRecords) {
  std::mt19937_64 rng(20261122);
  std::vector<std::string> originals;
  for (int i = 0; i < 40; ++i) {
    ExampleBuilder b;
    b.add_int64("index", static_cast<std::int64_t>(rng() % 1000000));
    b.add_int64("label", static_cast<std::int64_t>(rng() % 5) - 1);
    b.add_bytes("slide", "slide-" + std::to_string(rng() % 100));
    if (i % 3 == 0) b.add_int64s("indices", {1, 2, static_cast<std::int64_t>(rng())});
    if (i % 4 == 0) b.add_floats("f", {0.5f, static_cast<float>(rng() % 7)});
    if (i % 5 == 0) b.add_int64("x", 1 << 20).add_int64("y", 3);
    originals.push_back(b.serialize());
  }
  int accepted = 0, refused = 0;
  for (int trial = 0; trial < 60000; ++trial) {
    std::string r = originals[rng() % originals.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !r.empty(); ++e) {
      const std::size_t at = rng() % r.size();
      switch (rng() % 6) {
        case 0: r[at] = static_cast<char>(r[at] ^ (1 << (rng() % 8))); break;
        case 1: r[at] = static_cast<char>(rng()); break;
        case 2: r.insert(at, 1, static_cast<char>(rng())); break;
        case 3: r.erase(at, 1); break;
        case 4: r.resize(at); break;
        case 5: r[at] = static_cast<char>(std::array<int, 6>{0, 8, 10, 18, 26, 0x80}[rng() % 6]);
      }
    }
    const auto truth = by_protobuf(r);
    (truth ? accepted : refused)++;
    std::vector<std::string> names = {"index", "label", "slide", "indices", "f", "x", "y"};
    if (truth)
      for (const auto& [name, v] : *truth) names.push_back(name);
    std::string error;
    const auto mine = by_scanner(r, names, &error);
    ASSERT_EQ(truth.has_value(), mine.has_value())
        << "trial " << trial << ": " << (truth ? "scanner refused: " + error : "scanner accepted");
    if (truth) {
      ASSERT_EQ(*truth, *mine) << "trial " << trial;
    }
  }
  // Both outcomes must have been exercised for the agreement to mean something.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace mltool::io
