#include "mltool/records/labels.hpp"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::records {
namespace {

using io::json_quoted;
using io::Table;

// "0" or an optional '-' then a digit 1-9 then digits: one spelling per integer.
bool is_canonical_integer(std::string_view s) {
  std::size_t i = !s.empty() && s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  if (s[i] == '0') return s.size() == 1;
  return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i), s.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// a < b for canonical integers of any length: by sign, then digit count, then digits.
bool numeric_less(std::string_view a, std::string_view b) {
  const bool na = a[0] == '-';
  const bool nb = b[0] == '-';
  if (na != nb) return na;
  if (a.size() != b.size()) return na ? a.size() > b.size() : a.size() < b.size();
  return na ? b < a : a < b;
}

}  // namespace

Labels select_labels(const Table& table, const LabelColumns& columns) {
  return select_labels(Table(table), columns);
}

Labels select_labels(Table&& table, const LabelColumns& columns) {
  if (columns.key == columns.label) {
    throw UsageError("the key and label columns must differ, both are " + json_quoted(columns.key));
  }
  const std::size_t key_col = table.column(columns.key);
  const std::size_t label_col = table.column(columns.label);
  const bool grouped = !columns.group.empty();
  const std::size_t group_col = grouped ? table.column(columns.group) : key_col;
  if (table.rows.empty()) throw InputError(at_file(table.path, "no rows after the header"));

  Labels out;
  out.path = table.path;
  out.records.reserve(table.rows.size());
  // key → index of its first record, to check that every row of a key has one group.
  std::unordered_map<std::string_view, std::size_t> first_of_key;
  for (std::size_t i = 0; i < table.rows.size(); ++i) {
    std::vector<std::string>& row = table.rows[i];
    const std::uint64_t line = table.lines[i];
    for (const std::size_t c : {key_col, label_col, group_col}) {
      if (row[c].empty()) {
        throw InputError(at_file(table.path, "line " + std::to_string(line) + ": column " +
                                                 json_quoted(table.columns[c]) +
                                                 " is empty (or missing)"));
      }
    }
    if (row[key_col].find_first_of("\r\n") != std::string::npos) {
      throw InputError(at_file(table.path, "line " + std::to_string(line) + ": key " +
                                               json_quoted(row[key_col]) +
                                               " contains a line break"));
    }
    // The table's strings move into the records (the group is the key's copy without a
    // group column).
    std::string group = row[group_col];
    out.records.push_back(
        LabelRecord{std::move(row[key_col]), std::move(row[label_col]), std::move(group), line});
  }
  if (grouped) {
    for (std::size_t i = 0; i < out.records.size(); ++i) {
      const LabelRecord& r = out.records[i];
      const auto [it, added] = first_of_key.emplace(r.key, i);
      const LabelRecord& first = out.records[it->second];
      if (!added && first.group != r.group) {
        throw InputError(at_file(table.path, "line " + std::to_string(r.line) + ": key " +
                                                 json_quoted(r.key) + " is in group " +
                                                 json_quoted(r.group) + ", but line " +
                                                 std::to_string(first.line) + " put it in group " +
                                                 json_quoted(first.group)));
      }
    }
  }
  return out;
}

Labels read_labels(const std::string& path, const LabelColumns& columns) {
  return select_labels(io::read_table(path), columns);
}

LabelMap::LabelMap(std::vector<std::string> labels) : names_(std::move(labels)) {
  numeric_ = !names_.empty() && std::all_of(names_.begin(), names_.end(),
                                            [](const auto& s) { return is_canonical_integer(s); });
  if (numeric_) {
    std::sort(names_.begin(), names_.end(),
              [](const std::string& a, const std::string& b) { return numeric_less(a, b); });
  } else {
    std::sort(names_.begin(), names_.end());
  }
  names_.erase(std::unique(names_.begin(), names_.end()), names_.end());
}

std::optional<std::uint32_t> LabelMap::find(std::string_view label) const {
  if (numeric_ && !is_canonical_integer(label)) return std::nullopt;
  const auto less = [this](std::string_view a, std::string_view b) {
    return numeric_ ? numeric_less(a, b) : a < b;
  };
  const auto it = std::lower_bound(names_.begin(), names_.end(), label, less);
  if (it == names_.end() || *it != label) return std::nullopt;
  return static_cast<std::uint32_t>(it - names_.begin());
}

std::uint32_t LabelMap::id(std::string_view label) const {
  const std::optional<std::uint32_t> found = find(label);
  if (!found) throw UsageError("label " + json_quoted(label) + " is not in the label map");
  return *found;
}

LabelMap label_map(const Labels& labels) {
  // Distinct first: a table has millions of rows but few labels.
  std::unordered_set<std::string_view> distinct;
  for (const LabelRecord& r : labels.records) distinct.insert(r.label);
  return LabelMap(std::vector<std::string>(distinct.begin(), distinct.end()));
}

}  // namespace mltool::records
