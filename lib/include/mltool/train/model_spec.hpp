// Model specs for `mltool train --model`: a built-in family and its settings, validated
// against schemas/model.schema.json and then per family. No LibTorch here: models.hpp turns a
// spec into modules.
//
//   {"family": "mlp",    "hidden": [256, 128], "activation": "gelu", "dropout": 0.1, "batch_norm":
//   true}
//   {"family": "abmil",  "hidden": [128], "attention": 64, "gated": true, "dropout": 0.25}
//   {"family": "rescnn", "channels": [32, 64, 128], "blocks_per_stage": 1}
//
// Optional everywhere: "format": "mltool.model", "format_version": 1, "name",
// "input_dims" / "classes", which, when given, must match the dataset, and "sections": the
// names of the blocks that start a section (sectioned training, docs/train.md#memory-modes).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace mltool::train {

struct ModelSpec {
  std::string family;  ///< mlp, abmil, rescnn
  std::string name;
  std::optional<std::int64_t> input_dims;
  std::optional<std::int64_t> classes;
  std::vector<std::int64_t> hidden;  ///< mlp: hidden widths; abmil: embedding widths
  std::string activation = "relu";
  double dropout = 0;
  bool batch_norm = false;                          ///< mlp
  std::int64_t attention = 128;                     ///< abmil
  bool gated = true;                                ///< abmil
  std::vector<std::int64_t> channels;               ///< rescnn
  std::int64_t blocks_per_stage = 1;                ///< rescnn
  std::int64_t stem_stride = 2;                     ///< rescnn
  std::array<double, 3> mean{0.485, 0.456, 0.406};  ///< rescnn
  std::array<double, 3> std{0.229, 0.224, 0.225};   ///< rescnn
  /// The blocks that start a section (sectioned training with explicit boundaries); empty:
  /// none (plain, or --sections K).
  std::vector<std::string> section_starts;
  nlohmann::json document;  ///< the spec with every default filled in (what run.json records)

  /// The dataset unit the family trains on: "tile" (mlp), "bag" (abmil), "image" (rescnn).
  std::string unit() const;
};

/// Validates `doc` (the schema, then the fields of its family) and fills in defaults. Throws
/// FormatError "WHERE: POINTER: message", e.g. "spec.json: /channels: not a field of family
/// mlp (its fields: activation, batch_norm, dropout, hidden, ...)".
ModelSpec parse_model_spec(const nlohmann::json& doc, const std::string& where);

/// Reads and parses a spec file (InputError if unreadable; FormatError for invalid JSON with
/// its byte offset, or any of parse_model_spec's errors).
ModelSpec read_model_spec(const std::string& path);

}  // namespace mltool::train
