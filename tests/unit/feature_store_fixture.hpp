// Deterministic feature stores for tests and the fixture generator. Values follow
// a formula that tests/py/check_feature_store.py recomputes with numpy:
//   row i, column j = ((i * 31 + j * 7) % 1000) / 100.0 - 5.0
// computed in double, rounded to float32 (and then to float16 for f16 stores).
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "mltool/io/feature_store.hpp"
#include "support/temp_dir.hpp"

namespace mltool::testing {

/// The formula value of row i, column j, as float32.
inline float formula_value(std::uint64_t i, std::uint64_t j) {
  return static_cast<float>(static_cast<double>((i * 31 + j * 7) % 1000) / 100.0 - 5.0);
}

/// The tile key of row i: "slide-<i / 1000>/tile-<i>".
inline std::string formula_key(std::uint64_t i) {
  return "slide-" + std::to_string(i / 1000) + "/tile-" + std::to_string(i);
}

/// Writes a complete store of `rows` x `dims` formula values to `dir`.
inline void write_formula_store(const std::string& dir, std::uint64_t rows, std::uint64_t dims,
                                io::DType dtype) {
  io::FeatureStoreWriter writer(dir, dims, dtype, {{"name", "formula"}, {"dims", dims}},
                                {{"generator", "write_formula_store"}});
  std::vector<float> row(dims);
  for (std::uint64_t i = 0; i < rows; ++i) {
    for (std::uint64_t j = 0; j < dims; ++j) row[j] = formula_value(i, j);
    writer.append(formula_key(i), row.data());
  }
  writer.finish();
}

}  // namespace mltool::testing
