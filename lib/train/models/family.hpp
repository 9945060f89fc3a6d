// A built-in model family in one place: its name, the unit it trains on, its fields with their
// defaults, and its builder. Each family is one file of lib/train/models/ (mlp.cpp,
// abmil.cpp, rescnn.cpp) registered in families() (family.cpp); adding a family touches that
// file, the table, schemas/model.schema.json and docs/train.md. Internal to lib/train.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/records/pack.hpp"
#include "mltool/train/models.hpp"

namespace mltool::train::models {

struct Family {
  const char* name;
  records::PackUnit unit;           ///< the dataset unit it trains on
  std::vector<std::string> fields;  ///< its spec fields besides the common ones, sorted
  /// The family's fields of a schema-valid spec `doc`, every default filled in (what run.json
  /// records); FormatError "WHERE: /FIELD: ..." for what the schema cannot say.
  nlohmann::json (*settings)(const nlohmann::json& doc, const std::string& where);
  /// Adds the family's blocks, before the head, for `settings` as settings() returned them
  /// and inputs of `input_dims`; returns the width the head takes.
  std::int64_t (*build)(BlockModel& model, const nlohmann::json& settings, std::int64_t input_dims);
};

const Family& mlp();
const Family& abmil();
const Family& rescnn();
const Family& transmil();

/// Every family, in the order the docs list them.
const std::vector<const Family*>& families();
/// The family named `name`; UsageError for an unknown one (the schema refuses those first).
const Family& family(const std::string& name);

}  // namespace mltool::train::models
