// libFuzzer target for the record reading path: TFRecord framing (TFRecordReader over a
// buffer) and tf.train.Example parsing of every record that comes out.
//
// The first input byte picks a mode, so one corpus covers both layers:
//   bit 0 set   the rest is one Example payload (reaches the protobuf parser directly,
//               which random frames rarely would: their CRCs must match first)
//   bit 1 set   frames are read without the data CRC check
// Only mltool::Error is an expected outcome; any other exception, a crash, a sanitizer
// report or a broken invariant (__builtin_trap) is a finding.
//
// Build (clang):
//   protoc --cpp_out=GEN -I schemas schemas/example.proto
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
//     -Ilib/include -IGEN fuzz/fuzz_tfrecord.cpp lib/io/crc32c.cpp lib/io/tfrecord_*.cpp \
//     lib/io/example.cpp GEN/example.pb.cc lib/util/error.cpp lib/util/file.cpp \
//     -lprotobuf -o fuzz_tfrecord
//   ./fuzz_tfrecord -max_total_time=60 CORPUS_DIR
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "mltool/io/example.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/util/error.hpp"

namespace {

using mltool::io::Example;
using mltool::io::ExampleBuilder;
using mltool::io::FeatureKind;

void check(bool condition) {
  if (!condition) __builtin_trap();
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Parses `record`; if it is an Example, rebuilds it with ExampleBuilder and checks the
// rebuilt bytes parse back to the same values (features without a kind cannot be built
// and are skipped).
void exercise_example(std::string_view record, const std::string& where) {
  Example example;
  try {
    example = mltool::io::parse_example(record, where);
  } catch (const mltool::Error&) {
    return;
  }
  ExampleBuilder builder;
  for (const std::string& name : example.names()) {
    switch (example.kind(name)) {
      case FeatureKind::int64_list: builder.add_int64s(name, example.int64s(name)); break;
      case FeatureKind::float_list: builder.add_floats(name, example.floats(name)); break;
      case FeatureKind::bytes_list: builder.add_bytes_list(name, example.bytes(name)); break;
      case FeatureKind::none:
        check(example.int64s(name).empty() && example.bytes(name).empty());
        break;
    }
  }
  const std::string rebuilt_bytes = builder.serialize();
  const Example rebuilt = mltool::io::parse_example(rebuilt_bytes, "rebuilt");  // must not throw
  for (const std::string& name : example.names()) {
    switch (example.kind(name)) {
      case FeatureKind::int64_list: check(rebuilt.int64s(name) == example.int64s(name)); break;
      case FeatureKind::float_list:
        check(same_floats(rebuilt.floats(name), example.floats(name)));
        break;
      case FeatureKind::bytes_list: check(rebuilt.bytes(name) == example.bytes(name)); break;
      case FeatureKind::none: check(!rebuilt.has(name)); break;
    }
  }
  // Serialization is deterministic, so a second rebuild is byte-identical.
  check(builder.serialize() == rebuilt_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  ++data;
  --size;

  if (mode & 1u) {
    exercise_example({reinterpret_cast<const char*>(data), size}, "input");
    return 0;
  }

  mltool::io::TFRecordReadOptions options;
  options.verify_data_crc = (mode & 2u) == 0;
  auto reader = mltool::io::TFRecordReader::from_buffer("input", data, size, options);
  try {
    std::string_view record;
    std::uint64_t expected_offset = 0;
    while (reader.next(record)) {
      check(reader.offset() == expected_offset);
      check(reader.frame_size() == record.size() + mltool::io::kTFRecordOverhead);
      check(reader.position() <= reader.size());
      expected_offset = reader.position();
      exercise_example(record, reader.where());
      // Random access to a frame the sequential pass accepted must give the same view.
      const std::uint64_t offset = reader.offset();
      check(reader.read_at(offset) == record);
    }
    check(reader.position() == size);
  } catch (const mltool::Error&) {
  }
  return 0;
}
