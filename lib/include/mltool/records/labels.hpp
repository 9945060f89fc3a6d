// Labels tables for `mltool pack`: a CSV, TSV or JSONL file with a key column (a tile
// key, or a slide id for slide-level labels), a label column and optionally a group
// column (a patient), read into typed records; and the label map, distinct label
// strings → dense ids 0..K-1. One key may carry many labels (captions per image):
// each row becomes its own record.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mltool/io/table.hpp"

namespace mltool::records {

/// Which columns hold what. An empty `group` means no group column: every key is its
/// own group.
struct LabelColumns {
  std::string key = "key";
  std::string label = "label";
  std::string group;
};

/// One row of a labels table.
struct LabelRecord {
  std::string key;         ///< not empty, no line break (a keys.txt key or a slide id)
  std::string label;       ///< not empty
  std::string group;       ///< the group column's value, or the key without a group column
  std::uint64_t line = 0;  ///< 1-based line of the row in the file
};

/// The records of a labels table, in file order.
struct Labels {
  std::string path;
  std::vector<LabelRecord> records;
};

/// Picks the key, label and group columns of `table`. Guarantees, each otherwise an
/// error naming the path and line:
/// - every key, label and group is non-empty (InputError "line N: column "label" is
///   empty (or missing)"), and no key holds '\r' or '\n';
/// - all rows of one key name the same group ("line 9: key "s1" is in group "p2", but
///   line 3 put it in group "p1""), so a split by group never separates a key's rows;
/// - there is at least one row.
/// A missing column is an InputError listing the columns present; the key and label
/// columns must differ (UsageError).
Labels select_labels(const io::Table& table, const LabelColumns& columns);
/// The same, moving the strings out of `table`.
Labels select_labels(io::Table&& table, const LabelColumns& columns);

/// select_labels(read_table(path), columns).
Labels read_labels(const std::string& path, const LabelColumns& columns);

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
