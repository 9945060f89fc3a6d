// A built-in model family in one place: its name, the unit it trains on, its fields with their
// defaults, and its builder. Each family is one file of lib/train/models/ (mlp.cpp,
// abmil.cpp, rescnn.cpp, clam.cpp, dsmil.cpp) registered in families() (family.cpp); adding a
// family touches that file, the table, schemas/model.schema.json and docs/train.md. Internal
// to lib/train.
//
// A family with its own classifier and loss terms (clam, dsmil) sets the optional fields after
// `build`: `head` adds its last block in place of the generic Head (so --sections always keeps
// it, with the terms its objective reads, in the last section), `objective` combines the
// task's per-sample loss with those terms (BlockModel::objective, which every memory mode and
// data parallel use through step.hpp's output_loss), `tasks` the dataset tasks it trains.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/records/pack.hpp"
#include "mltool/train/models.hpp"
#include "mltool/train/step.hpp"

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
  /// Optional: adds the family's own last block for `classes` outputs on inputs of `width`
  /// (what build returned) instead of the generic head.
  void (*head)(BlockModel& model, const nlohmann::json& settings, std::int64_t width,
               std::int64_t classes) = nullptr;
  /// Optional: the family's objective (BlockModel::Objective) for `settings`.
  torch::Tensor (*objective)(const nlohmann::json& settings, const StepLoss& task,
                             const Activation& out, const torch::Tensor& y) = nullptr;
  /// The dataset tasks it trains; empty: every task.
  std::vector<records::PackTask> tasks = {};
  /// For a task it refuses: what to use instead.
  const char* instead = "";
};

const Family& mlp();
const Family& abmil();
const Family& rescnn();
const Family& clam_sb();
const Family& clam_mb();
const Family& dsmil();
const Family& transmil();

/// Every family, in the order the docs list them.
const std::vector<const Family*>& families();
/// The family named `name`; UsageError for an unknown one (the schema refuses those first).
const Family& family(const std::string& name);
/// Whether `f` trains datasets of `task`; refuses() the message when not ("" when it does).
std::string refuses(const Family& f, records::PackTask task);

}  // namespace mltool::train::models
