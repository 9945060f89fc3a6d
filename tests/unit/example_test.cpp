// tf.train.Example: round trips, byte-exact wire compatibility with TensorFlow's
// encoding, strict rejection of payloads that are not Examples, and accessor errors.
#include "mltool/io/example.hpp"

#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/timestamp.pb.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>

#include "mltool/util/error.hpp"
#include "support/wire.hpp"

namespace mltool::io {
namespace {

using namespace testing::wire;  // NOLINT: the encoder's short names read as the format

// Example{features{feature{key: value}}} from an encoded Feature.
std::string example_with(const std::string& key, const std::string& feature,
                         const std::string& extra_entry_fields = "") {
  const std::string entry = len_field(1, key) + len_field(2, feature) + extra_entry_fields;
  return len_field(1, len_field(1, entry));
}

void expect_format_error(std::string_view bytes, const std::string& part) {
  try {
    parse_example(bytes, "x.tfrecord: record 3 (byte 99)");
    ADD_FAILURE() << "accepted as a tf.train.Example";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("x.tfrecord: record 3 (byte 99): ", 0), 0u) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg << " lacks " << part;
  }
}

TEST(Example, RoundTripAllKinds) {
  const std::vector<std::int64_t> ints = {0, -1, 1, std::numeric_limits<std::int64_t>::min(),
                                          std::numeric_limits<std::int64_t>::max()};
  const std::vector<float> floats = {0.0f, -2.5f, 1e-30f, std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN()};
  const std::string binary("a\0b\xff", 4);
  ExampleBuilder builder;
  builder.add_int64("row", 42)
      .add_int64s("ints", ints)
      .add_float("weight", 0.5f)
      .add_floats("floats", floats)
      .add_bytes("key", binary)
      .add_bytes_list("tags", {"x", "", "yz"})
      .add_int64s("empty_ints", {})
      .add_floats("empty_floats", {})
      .add_bytes_list("empty_bytes", {});

  const Example ex = parse_example(builder.serialize(), "here");
  EXPECT_EQ(ex.size(), 9u);
  EXPECT_EQ(ex.names(),
            (std::vector<std::string>{"empty_bytes", "empty_floats", "empty_ints", "floats", "ints",
                                      "key", "row", "tags", "weight"}));
  EXPECT_EQ(ex.int64("row"), 42);
  EXPECT_EQ(ex.int64s("ints"), ints);
  EXPECT_EQ(ex.floats("weight"), std::vector<float>{0.5f});
  ASSERT_EQ(ex.floats("floats").size(), floats.size());
  for (std::size_t i = 0; i < floats.size(); ++i)  // bitwise, so NaN compares too
    EXPECT_EQ(std::memcmp(&ex.floats("floats")[i], &floats[i], sizeof(float)), 0) << i;
  EXPECT_EQ(ex.bytes("key"), std::vector<std::string>{binary});
  EXPECT_EQ(ex.bytes("tags"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(ex.kind("empty_ints"), FeatureKind::int64_list);
  EXPECT_EQ(ex.kind("empty_floats"), FeatureKind::float_list);
  EXPECT_EQ(ex.kind("empty_bytes"), FeatureKind::bytes_list);
  EXPECT_TRUE(ex.int64s("empty_ints").empty());
  EXPECT_TRUE(ex.has("row"));
  EXPECT_FALSE(ex.has("Row"));
  EXPECT_EQ(ex.where(), "here");
}

TEST(Example, AddingAppendsAndKindsCannotMix) {
  ExampleBuilder builder;
  builder.add_int64("a", 1).add_int64s("a", {2, 3}).add_int64("a", 4);
  builder.add_bytes("b", "x").add_bytes_list("b", {"y"});
  EXPECT_THROW(builder.add_float("a", 1.0f), UsageError);
  EXPECT_THROW(builder.add_int64("b", 1), UsageError);
  const Example ex = parse_example(builder.serialize(), "");
  EXPECT_EQ(ex.int64s("a"), (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(ex.bytes("b"), (std::vector<std::string>{"x", "y"}));

  builder.clear();
  EXPECT_EQ(builder.serialize(), "");
  EXPECT_EQ(parse_example("", "").size(), 0u);  // the empty Example is valid
}

TEST(Example, SerializationIsDeterministic) {
  ExampleBuilder one, two;
  for (int i = 0; i < 50; ++i) one.add_int64("f" + std::to_string(i), i);
  for (int i = 50; i-- > 0;) two.add_int64("f" + std::to_string(i), i);
  EXPECT_EQ(one.serialize(), two.serialize());
}

TEST(Example, ReusedBuilderRoundTripsRandomRecords) {
  // One builder reused across records (clear() keeps buffers): every record parses back
  // (with protobuf) to exactly what was added, whatever was in the buffers before.
  std::mt19937_64 rng(3);
  ExampleBuilder builder;
  std::string bytes;
  for (int record = 0; record < 300; ++record) {
    builder.clear();
    std::map<std::string, std::vector<std::int64_t>> ints;
    std::map<std::string, std::vector<std::string>> strings;
    const int features = static_cast<int>(rng() % 5);
    for (int f = 0; f < features; ++f) {
      const std::string name =
          std::string(1, static_cast<char>('a' + rng() % 6)) + std::to_string(f);
      if (rng() % 2) {
        auto& v = ints[name];
        for (int k = static_cast<int>(rng() % 4); k-- > 0;) {
          v.push_back(static_cast<std::int64_t>(rng()) >> (rng() % 64));
        }
        builder.add_int64s(name, v);
      } else {
        auto& v = strings[name];
        for (int k = static_cast<int>(rng() % 3); k-- > 0;)
          v.push_back(std::string(rng() % 200, 'x'));
        builder.add_bytes_list(name, v);
      }
    }
    builder.serialize(bytes);
    EXPECT_EQ(bytes, builder.serialize());
    const Example ex = parse_example(bytes, "random");
    ASSERT_EQ(ex.size(), ints.size() + strings.size()) << record;
    for (const auto& [name, v] : ints) EXPECT_EQ(ex.int64s(name), v) << record << name;
    for (const auto& [name, v] : strings) EXPECT_EQ(ex.bytes(name), v) << record << name;
  }
}

TEST(Example, WireBytesMatchTensorFlow) {
  // tf.train.Example(features=tf.train.Features(feature={
  //     "a": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))})).SerializeToString()
  ExampleBuilder ints;
  ints.add_int64("a", 1);
  EXPECT_EQ(ints.serialize(),
            std::string("\x0a\x0c\x0a\x0a\x0a\x01\x61\x12\x05\x1a\x03\x0a\x01\x01", 14));
  // float_list is field 2, packed: value=[1.0] -> 0a 04 00 00 80 3f.
  ExampleBuilder floats;
  floats.add_float("a", 1.0f);
  EXPECT_EQ(floats.serialize(),
            example_with("a", len_field(2, len_field(1, std::string("\0\0\x80\x3f", 4)))));
  // bytes_list is field 1.
  ExampleBuilder bytes;
  bytes.add_bytes("a", "hi");
  EXPECT_EQ(bytes.serialize(), example_with("a", len_field(1, len_field(1, "hi"))));
}

TEST(Example, AcceptsUnpackedAndKindlessEncodings) {
  // Older writers emit repeated scalars unpacked; protobuf readers must accept both.
  const std::string unpacked = len_field(3, varint_field(1, 7) + varint_field(1, 8));
  EXPECT_EQ(parse_example(example_with("a", unpacked), "").int64s("a"),
            (std::vector<std::int64_t>{7, 8}));
  // A Feature with no kind (tf.train.Feature()) reads as empty of any type.
  const Example ex = parse_example(example_with("none", ""), "");
  EXPECT_EQ(ex.kind("none"), FeatureKind::none);
  EXPECT_TRUE(ex.int64s("none").empty());
  EXPECT_TRUE(ex.floats("none").empty());
  EXPECT_TRUE(ex.bytes("none").empty());
}

TEST(Example, RejectsRandomBytes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    std::string bytes(1 + trial % 97, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    EXPECT_THROW(parse_example(bytes, "r"), FormatError) << "trial " << trial;
  }
  expect_format_error("\xff\xff\xff", "not a tf.train.Example");
}

TEST(Example, RejectsOtherProtobufMessages) {
  google::protobuf::Timestamp timestamp;
  timestamp.set_seconds(1700000000);
  timestamp.set_nanos(5);
  expect_format_error(timestamp.SerializeAsString(), "not a tf.train.Example");

  google::protobuf::FileDescriptorProto file;
  file.set_name("a.proto");
  file.set_package("pkg");
  file.add_message_type()->set_name("M");
  expect_format_error(file.SerializeAsString(), "not a tf.train.Example");
}

TEST(Example, RejectsUnknownFieldsAtEveryLevel) {
  const std::string ints = len_field(3, len_field(1, varint(5)));
  // Sanity: the undamaged form parses.
  EXPECT_EQ(parse_example(example_with("a", ints), "").int64("a"), 5);

  expect_format_error(example_with("a", ints) + varint_field(2, 1),
                      "Example message has field number 2");
  expect_format_error(
      len_field(1, len_field(1, len_field(1, "a") + len_field(2, ints)) + varint_field(9, 1)),
      "Features message has field number 9");
  expect_format_error(example_with("a", ints + varint_field(4, 1)),
                      "feature 'a' has field number 4");
  expect_format_error(example_with("a", len_field(3, len_field(1, varint(5)) + varint_field(2, 1))),
                      "feature 'a' (int64_list) has field number 2");
  expect_format_error(example_with("a", ints, varint_field(3, 1)),
                      "feature map entry has field number 3");
  // Feature names are proto3 strings, so they must be UTF-8 (protobuf itself refuses
  // them too, but noisily).
  expect_format_error(example_with("\xff", ints), "feature name is not valid UTF-8");
  expect_format_error(example_with("\xc0\x80", ints), "feature name is not valid UTF-8");
  expect_format_error(example_with("\xed\xa0\x80", ints), "feature name is not valid UTF-8");
  EXPECT_EQ(parse_example(example_with("\xc3\xa9t\xf0\x9f\x94\xac", ints), "")
                .int64("\xc3\xa9t\xf0\x9f\x94\xac"),
            5);
  // A known field number with the wrong wire type is unknown too (here: fixed32 values).
  expect_format_error(example_with("a", len_field(3, tag(1, 5) + std::string(4, '\1'))),
                      "feature 'a' (int64_list) has field number 1");
}

TEST(Example, AccessorErrorsNameFeatureAndRecord) {
  ExampleBuilder builder;
  builder.add_int64("label", 3).add_floats("w", {1, 2}).add_int64s("pair", {1, 2});
  const Example ex = parse_example(builder.serialize(), "shard.tfrecord: record 17 (byte 1234)");
  const auto expect_error = [](const std::function<void()>& fn, const std::string& expected) {
    try {
      fn();
      ADD_FAILURE() << "no error";
    } catch (const FormatError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  };
  expect_error([&] { ex.int64s("row"); },
               "shard.tfrecord: record 17 (byte 1234): missing feature 'row' "
               "(the record has 'label', 'pair', 'w')");
  expect_error([&] { ex.kind("row"); },
               "shard.tfrecord: record 17 (byte 1234): missing feature 'row' "
               "(the record has 'label', 'pair', 'w')");
  expect_error([&] { ex.floats("label"); },
               "shard.tfrecord: record 17 (byte 1234): feature 'label' is of kind int64_list, "
               "expected float_list");
  expect_error([&] { ex.bytes("w"); },
               "shard.tfrecord: record 17 (byte 1234): feature 'w' is of kind float_list, "
               "expected bytes_list");
  expect_error([&] { ex.int64("pair"); },
               "shard.tfrecord: record 17 (byte 1234): feature 'pair' has 2 values, "
               "expected exactly 1");
  EXPECT_EQ(ex.kind("w"), FeatureKind::float_list);
  EXPECT_STREQ(to_string(FeatureKind::int64_list), "int64_list");
}

}  // namespace
}  // namespace mltool::io
