// The records of the TensorFlow interop fixtures, as a formula of the record number.
// scripts/fixtures/tf_interop.py implements the same formula independently in Python:
// TensorFlow writes records from it (tests/data/tf_written.tfrecord, read by
// tf_interop_test.cpp) and checks records mltool_testgen wrote from it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace mltool::testing {

struct InteropRecord {
  std::int64_t index;
  std::vector<std::int64_t> indices;
  std::int64_t label;
  std::vector<float> weights;
  std::string slide;
  std::string blob;
};

inline InteropRecord interop_record(std::int64_t i) {
  InteropRecord r;
  r.index = i;
  // Negative and > 32-bit values exercise the varint encoding.
  r.indices = {i, -i, (std::int64_t{1} << 40) + i};
  r.label = i % 3;
  r.weights = {static_cast<float>(i * 0.25), -1.5f,
               static_cast<float>(1e-3 * static_cast<double>(i))};
  char slide[32];
  std::snprintf(slide, sizeof slide, "slide-%03d", static_cast<int>(i / 5));
  r.slide = slide;
  for (std::int64_t k = 0; k < i % 5; ++k) r.blob.push_back(static_cast<char>((i * 7 + k) % 256));
  return r;
}

/// Number of records in each interop fixture file.
inline constexpr std::int64_t kInteropRecords = 25;

}  // namespace mltool::testing
