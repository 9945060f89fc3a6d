// Internal to lib/records: what sets each pack task apart (docs/pack.md#tasks), one row per task
// in task_spec.cpp's table. Pack, its plan, the labels table and inspect ask the row of the job's
// task instead of comparing PackTask values (issue 38); a new task adds a row there.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/records/labels.hpp"
#include "outcome.hpp"

namespace mltool::records::detail {

/// A pack option that belongs to one task, and whether a job's columns give it.
struct TaskOption {
  const char* name;  ///< e.g. "--target-column"; nullptr: no option
  bool (*given)(const LabelColumns&);
};

/// What inspect compares a task's shards by: nothing, a mean (regression's target: its sd, a
/// shift of the mean) or a rate (survival's events: a hypergeometric draw).
enum class OutcomeFigure { none, mean, rate };

/// One pack task: its options, its outcome and how inspect reports it.
struct PackTaskSpec {
  PackTask task;
  bool label_map;                     ///< its records carry a label mapped to an id
  bool outcome_stats;                 ///< dataset.json and inspect summarize its outcomes
  const char* figure;                 ///< inspect's shard figure ("target mean"); or nullptr
  const char* figure_key;             ///< the same in inspect's JSON ("target_mean")
  OutcomeFigure figure_kind;          ///< how inspect compares shards by the figure
  const char* stratify;               ///< dataset.json's "stratify" (see stratify_name)
  std::array<TaskOption, 2> options;  ///< the options only this task takes, in order
  nlohmann::json (*outcome_columns)(const LabelColumns&);  ///< dataset.json's "outcome"
  /// How messages name an outcome ("target 2.5"); classification names its label instead.
  std::string (*describe)(const Outcome&);
  bool names_columns;  ///< dataset.json's labels "names" are its --label-columns, not labels
  std::vector<std::uint32_t> stratum_classes;  ///< see outcome.hpp's stratum_classes
};

inline constexpr std::size_t kPackTaskCount = 4;

/// Every task's row, in PackTask's order.
extern const std::array<PackTaskSpec, kPackTaskCount> kPackTaskSpecs;

/// The row of `task`.
const PackTaskSpec& spec_of(PackTask task);

}  // namespace mltool::records::detail
