// Labels tables for `mltool pack`: a CSV, TSV or JSONL file with a key column (a tile
// key, or a slide id for slide-level labels), the outcome — a label column
// (classification), a target column (regression) or a time and an event column
// (survival) — and optionally a group column (a patient) and a bag column, read into
// typed records; and the label map, distinct label strings → dense ids 0..K-1. One key
// may carry many labels (captions per image): each row becomes its own record.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mltool/io/table.hpp"

namespace mltool::records {

/// What a record's outcome is (docs/pack.md#tasks): a label id (classification), one float
/// (regression: `target`), a time and an event (survival: `time` > 0, `event` 1 observed or
/// 0 censored), or several binary outcomes, any of them missing (multilabel).
enum class PackTask { classification, regression, survival, multilabel };

/// Whether records carry an id of the label map (dataset.json's labels.names, the label
/// histograms): classification.
bool has_label_map(PackTask task);
/// Whether a split's records have outcome statistics (dataset.json's outcome_stats, inspect's
/// outcome balance of shards): regression (the target), survival (the event).
bool has_outcome_stats(PackTask task);

/// Which columns hold what. An empty `group` means no group column: every key is its
/// own group. `label` is read for classification only, `target` for regression, `time` and
/// `event` for survival. A non-empty `bag` names the column whose values are bags
/// (`--bag-by`).
struct LabelColumns {
  std::string key = "key";
  std::string label = "label";
  std::string group;
  std::string target;
  std::string time;
  std::string event;
  std::string bag;
  std::vector<std::string> labels;  ///< multilabel: the columns of the outcomes, in order
};

/// One row of a labels table.
struct LabelRecord {
  std::string key;         ///< not empty, no line break (a keys.txt key or a slide id)
  std::string label;       ///< classification: not empty; otherwise empty
  std::string group;       ///< the group column's value, or the key without a group column
  std::uint64_t line = 0;  ///< 1-based line of the row in the file
  float target = 0;        ///< regression: finite
  float time = 0;          ///< survival: finite, > 0
  float event = 0;         ///< survival: 1 observed, 0 censored
  std::string bag;         ///< the bag column's value (not empty), or "" without one
  /// multilabel: per LabelColumns::labels column 1 or 0, NaN where the cell is empty (masked).
  std::vector<float> values;
};

/// The records of a labels table, in file order.
struct Labels {
  std::string path;
  std::vector<LabelRecord> records;
};

/// Picks the key, outcome, group and bag columns of `table` for `task`. Guarantees, each
/// otherwise an InputError naming the path and line:
/// - every key, label, group and bag is non-empty ("line N: column "label" is empty (or
///   missing)"), and no key holds '\r' or '\n';
/// - regression: every target is a finite number; survival: every time a finite number > 0
///   and every event 1/0, true/false, yes/no, dead/alive (any case) or 1.0/0.0
///   ("line 7: column "os" holds "-2": a time must be a number > 0 (column of
///   --time-column)");
/// - all rows of one key name the same group ("line 9: key "s1" is in group "p2", but
///   line 3 put it in group "p1""), so a split by group never separates a key's rows, and
///   the same bag;
/// - regression, survival, multilabel: all rows of one key and of one bag agree on the
///   outcome ("line 9: bag "P1" has time 12, event 1, but line 3 gave it time 10, event 1").
///   A group keeps its keys in one split but not one outcome: its records keep their own
///   (a slide's purity, a block's panel); survival, the patient's in practice, logs a warning
///   naming the first group whose records differ;
/// - there is at least one row.
/// A missing column is an InputError listing the columns present; the key and label
/// columns must differ (UsageError), and a task's outcome columns must be named
/// (UsageError naming the option).
Labels select_labels(const io::Table& table, const LabelColumns& columns,
                     PackTask task = PackTask::classification);
/// The same, moving the strings out of `table`.
Labels select_labels(io::Table&& table, const LabelColumns& columns,
                     PackTask task = PackTask::classification);

/// select_labels(read_table(path), columns, task).
Labels read_labels(const std::string& path, const LabelColumns& columns,
                   PackTask task = PackTask::classification);

/// A survival event as a table spells it: 1/0, 1.0/0.0, true/false, yes/no, dead/alive (any
/// case, surrounding blanks ignored) → 1 or 0; nullopt for anything else.
std::optional<float> parse_event(std::string_view text);

/// Distinct label strings → ids 0..K-1 in a fixed order, so ids depend only on the
/// set of labels, never on the order of the rows:
/// - if every label is a canonical decimal integer ("-?(0|[1-9][0-9]*)", any length),
///   labels sort numerically: "2" < "10" (ids are still dense: labels {1, 5, 10} get
///   ids 0, 1, 2);
/// - otherwise all labels sort bytewise (UTF-8 code point order): "10" < "2" < "a".
class LabelMap {
 public:
  LabelMap() = default;
  /// Builds the map from any number of labels, in any order, repeats allowed.
  explicit LabelMap(std::vector<std::string> labels);

  std::size_t size() const { return names_.size(); }
  /// True if the labels sorted numerically (all canonical integers).
  bool numeric() const { return numeric_; }
  /// The labels in id order: names()[id] is the label with that id.
  const std::vector<std::string>& names() const { return names_; }
  const std::string& name(std::uint32_t id) const { return names_.at(id); }
  /// The id of `label`, or nullopt if it is not in the map.
  std::optional<std::uint32_t> find(std::string_view label) const;
  /// The id of `label`; UsageError if it is not in the map.
  std::uint32_t id(std::string_view label) const;

 private:
  std::vector<std::string> names_;
  bool numeric_ = false;
};

/// The label map of every record's label.
LabelMap label_map(const Labels& labels);

}  // namespace mltool::records
