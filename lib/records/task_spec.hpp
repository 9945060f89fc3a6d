// Internal to lib/records: what sets each pack task apart (docs/pack.md#tasks). A task is one
// file in lib/records/tasks/ defining its PackTaskSpec, and one line in task_spec.cpp's table.
// Pack, its plan, the labels table, the record codec and inspect ask the row of the job's task
// instead of comparing PackTask values (issue 38).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mltool/io/example.hpp"
#include "mltool/io/table.hpp"
#include "mltool/records/labels.hpp"
#include "mltool/records/record.hpp"
#include "mltool/util/error.hpp"
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

/// One row of a labels table as a task reads its outcome from it: `columns` are the ones the
/// task's find_columns chose, in its order.
struct OutcomeRow {
  const io::Table& table;
  std::vector<std::string>& row;
  std::uint64_t line;
  const std::vector<std::size_t>& columns;

  std::string& cell(std::size_t i) const { return row[columns[i]]; }
  /// InputError naming the file, the line and the column: it holds `cell(i)`, which `must`
  /// ("a target must be a finite number"); the column is chosen by `option`.
  InputError bad(std::size_t i, const char* option, const std::string& must) const;
};

/// The features of a record holding its outcome, and how they are written and read back.
struct OutcomeCodec {
  /// Feature name → dataset.json's kind ("int64", "float", "float_list", "int64_list"), in the
  /// order encode() writes them.
  std::vector<std::pair<const char*, const char*>> features;
  void (*encode)(const Record&, io::ExampleBuilder&);
  /// The outcome of `example` into the record, checked (RecordCodec::decode).
  void (*decode)(const io::Example&, const RecordLimits&, Record&);
  /// The float outcome training serves (RecordCodec::append_targets).
  void (*append_targets)(const Record&, std::vector<float>&);
  /// Tasks whose outcome is one float per feature (regression, survival): why `values` (one per
  /// feature) is no valid outcome, or nullopt. The codec and inspect both check with it.
  std::optional<std::string> (*invalid)(const std::vector<float>& values);
};

/// One pack task: its options, its labels columns, its record features, its strata and
/// statistics, and how inspect reports it. A task's file fills it field by name from
/// `PackTaskSpec{}` (the project is C++17, without designated initializers), so a field it
/// leaves unset is null, false or empty.
struct PackTaskSpec {
  PackTask task;
  bool label_map;                     ///< its records carry a label mapped to an id
  const char* figure;                 ///< inspect's shard figure ("target mean"); or nullptr
  const char* figure_key;             ///< the same in inspect's JSON ("target_mean")
  OutcomeFigure figure_kind;          ///< how inspect compares shards by the figure
  std::size_t figure_value;           ///< which of the outcome's floats the figure is made of
  const char* stratify;               ///< dataset.json's "stratify" (see stratify_name)
  std::array<TaskOption, 2> options;  ///< the options only this task takes, in order
  /// The table's columns of the outcome, in the order read_outcome takes them; UsageError when
  /// an option naming them is missing, InputError (table.column) when a column is.
  std::vector<std::size_t> (*find_columns)(const io::Table&, const LabelColumns&);
  bool cells_required;  ///< every outcome cell must be filled (multilabel: an empty one masks)
  /// The outcome is the patient's in practice (survival): a --group-by group whose records
  /// differ is warned about; they still keep their own (docs/pack.md#tasks).
  bool patient_outcome;
  /// The row's outcome into the record, checked; classification moves its label out.
  void (*read_outcome)(const OutcomeRow&, LabelRecord&);
  nlohmann::json (*outcome_columns)(const LabelColumns&);  ///< dataset.json's "outcome"
  /// How messages name an outcome ("target 2.5"); classification names its label instead.
  std::string (*describe)(const Outcome&);
  bool names_columns;  ///< dataset.json's labels "names" are its --label-columns, not labels
  /// Each record's stratum for splits and folds (see outcome.hpp's strata); nullptr: the
  /// label is the stratum (classification).
  std::vector<std::uint32_t> (*strata)(const std::vector<Outcome>&);
  std::vector<std::uint32_t> stratum_classes;  ///< see outcome.hpp's stratum_classes
  /// dataset.json's outcome_stats of a split; nullptr: the task has none.
  nlohmann::json (*outcome_stats)(const std::vector<Outcome>&);
  OutcomeCodec codec;
  /// dataset.json's label_counts of a split (per --label-columns column, in order: label,
  /// positives, negatives, missing); nullptr: the task has none (multilabel has).
  nlohmann::json (*label_counts)(const std::vector<Outcome>&, const LabelColumns&);
};

// The tasks, each in its file of lib/records/tasks/.
extern const PackTaskSpec kClassificationPack;
extern const PackTaskSpec kRegressionPack;
extern const PackTaskSpec kSurvivalPack;
extern const PackTaskSpec kMultilabelPack;

inline constexpr std::size_t kPackTaskCount = 4;

/// Every task's row, in PackTask's order.
extern const std::array<const PackTaskSpec*, kPackTaskCount> kPackTaskSpecs;

/// The row of `task`.
const PackTaskSpec& spec_of(PackTask task);

// Helpers the tasks' files share.

/// A stored (32-bit) outcome value as messages show it: the shortest text that reads back as
/// that float ("0.2", not the double 0.20000000298023224; "10", not "1e+01").
std::string float_text(float v);
/// `text` as a number (blanks around it ignored), or nullopt.
std::optional<double> parse_number(std::string_view text);
/// The single value of float feature `name`; FormatError naming the record otherwise.
float one_float(const io::Example& example, const char* name);
/// A float-valued outcome (OutcomeCodec::invalid set): each feature's one float, checked;
/// FormatError naming the record.
std::vector<float> decode_floats(const OutcomeCodec& codec, const io::Example& example);
/// Labels columns: UsageError when `name` is empty ("--task survival needs --time-column").
void require_column(const std::string& name, const char* option, PackTask task);

}  // namespace mltool::records::detail
