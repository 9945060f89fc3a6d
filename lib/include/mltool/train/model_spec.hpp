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

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mltool/records/pack.hpp"

namespace mltool::train {

struct ModelSpec {
  std::string
      family;  ///< mlp, abmil, rescnn, clam_sb, clam_mb, dsmil, transmil (lib/train/models/)
  std::string name;
  std::optional<std::int64_t> input_dims;
  std::optional<std::int64_t> classes;
  /// The blocks that start a section (sectioned training with explicit boundaries); empty:
  /// none (plain, or --sections K).
  std::vector<std::string> section_starts;
  /// The family's own fields with every default filled in (e.g. mlp: activation, dropout,
  /// hidden, batch_norm); what its builder reads.
  nlohmann::json settings;
  nlohmann::json document;  ///< the spec with every default filled in (what run.json records)

  /// The dataset unit the family trains on: tile (mlp), bag (abmil, clam_sb, clam_mb, dsmil,
  /// transmil), image (rescnn).
  records::PackUnit unit() const;
  /// Why the family does not train datasets of `task` (clam and dsmil: classification only),
  /// with what to use instead; "" when it does.
  std::string refuses(records::PackTask task) const;
};

/// Validates `doc` (the schema, then the fields of its family) and fills in defaults. Throws
/// FormatError "WHERE: POINTER: message", e.g. "spec.json: /channels: not a field of family
/// mlp (its fields: activation, batch_norm, dropout, hidden, ...)".
ModelSpec parse_model_spec(const nlohmann::json& doc, const std::string& where);

/// Reads and parses a spec file (InputError if unreadable; FormatError for invalid JSON with
/// its byte offset, or any of parse_model_spec's errors).
ModelSpec read_model_spec(const std::string& path);

}  // namespace mltool::train
