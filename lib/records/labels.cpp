#include "mltool/records/labels.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "mltool/records/pack.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/options.hpp"
#include "task_spec.hpp"

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

Labels select_labels(const Table& table, const LabelColumns& columns, PackTask task) {
  return select_labels(Table(table), columns, task);
}

namespace {

std::string at_line(const Table& t, std::uint64_t line, const std::string& message) {
  return at_file(t.path, "line " + std::to_string(line) + ": " + message);
}

// The columns a task reads, as indexes into the table.
struct Columns {
  std::size_t key, group, bag = 0;
  bool grouped, bagged;
  std::vector<std::size_t> outcome;  // the task's, in its order (PackTaskSpec::find_columns)
};

Columns find_columns(const Table& table, const LabelColumns& c, PackTask task) {
  Columns out{table.column(c.key), 0, 0, !c.group.empty(), !c.bag.empty(), {}};
  out.group = out.grouped ? table.column(c.group) : out.key;
  if (out.bagged) out.bag = table.column(c.bag);
  out.outcome = detail::spec_of(task).find_columns(table, c);
  return out;
}

// The columns a row must fill: its key, group, bag and the task's outcome columns (where an
// empty cell is no outcome; multilabel's masks it).
std::vector<std::size_t> needed(const Columns& c, PackTask task) {
  std::vector<std::size_t> out = {c.key, c.group};
  if (c.bagged) out.push_back(c.bag);
  if (detail::spec_of(task).cells_required)
    out.insert(out.end(), c.outcome.begin(), c.outcome.end());
  return out;
}

std::string outcome_text(const LabelRecord& r, PackTask task) {
  return detail::spec_of(task).describe({r.target, r.time, r.event, r.values});
}

bool same_outcome(const LabelRecord& a, const LabelRecord& b) {
  const auto same = [](float x, float y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  return a.target == b.target && a.time == b.time && a.event == b.event &&
         std::equal(a.values.begin(), a.values.end(), b.values.begin(), b.values.end(), same);
}

// The records with one value of `of` that disagree by `same` with that value's first record:
// how many values have such a record, and the first one's message naming both lines.
struct Disagreement {
  std::size_t values = 0;
  std::string first;
};

template <class Of, class Same, class Describe>
Disagreement disagreement(const Labels& labels, const char* what, Of of, Same same,
                          Describe describe) {
  std::unordered_map<std::string_view, std::size_t> first_of;
  std::unordered_set<std::string_view> differing;
  Disagreement out;
  for (std::size_t i = 0; i < labels.records.size(); ++i) {
    const LabelRecord& r = labels.records[i];
    const auto [it, added] = first_of.emplace(of(r), i);
    const LabelRecord& first = labels.records[it->second];
    if (added || same(first, r) || !differing.insert(of(r)).second) continue;
    if (++out.values == 1)
      out.first = "line " + std::to_string(r.line) + ": " + what + " " + json_quoted(of(r)) + " " +
                  describe(r) + ", but line " + std::to_string(first.line) + " " +
                  describe(first, true);
  }
  return out;
}

// Every record with one value of `of` agrees by `same`; else InputError naming both lines.
template <class Of, class Same, class Describe>
void check_agree(const Labels& labels, const char* what, Of of, Same same, Describe describe) {
  const Disagreement d = disagreement(labels, what, of, same, describe);
  if (d.values > 0) throw InputError(at_file(labels.path, d.first));
}

// A --group-by group keeps its records in one split; it does not own their outcome (a slide's
// purity, a block's panel). Where the task's outcome is the patient's in practice (survival),
// a group whose records differ is packed as the table says, with a warning: more often a slip
// in the table than per-lesion times.
void warn_group_outcomes(const Labels& out, const LabelColumns& columns, PackTask task) {
  if (!detail::spec_of(task).patient_outcome) return;
  const Disagreement d = disagreement(
      out, "group", [](const LabelRecord& r) -> std::string_view { return r.group; }, same_outcome,
      [task](const LabelRecord& r, bool then = false) {
        return (then ? "gave it " : "has ") + outcome_text(r, task);
      });
  if (d.values == 0) return;
  log::warn(at_file(out.path, std::to_string(d.values) + " --group-by " + columns.group +
                                  (d.values == 1 ? " group gives its" : " groups give their") +
                                  " records different outcomes (" + d.first +
                                  "): each record keeps its own; if the outcome is the " +
                                  columns.group + "'s, correct the table, or pack one record per " +
                                  columns.group + " with --unit bag --bag-by " + columns.group));
}

// The consistency guarantees of select_labels: a key lies in one group and one bag, and a
// key or a bag has one outcome. A group may hold records of different outcomes.
void check_consistency(const Labels& out, const LabelColumns& columns, PackTask task) {
  const auto key = [](const LabelRecord& r) -> std::string_view { return r.key; };
  const auto bag = [](const LabelRecord& r) -> std::string_view { return r.bag; };
  if (!columns.group.empty())
    check_agree(
        out, "key", key, [](const auto& a, const auto& b) { return a.group == b.group; },
        [](const LabelRecord& r, bool then = false) {
          return std::string(then ? "put it in group " : "is in group ") + json_quoted(r.group);
        });
  if (!columns.bag.empty())
    check_agree(
        out, "key", key, [](const auto& a, const auto& b) { return a.bag == b.bag; },
        [](const LabelRecord& r, bool then = false) {
          return std::string(then ? "put it in bag " : "is in bag ") + json_quoted(r.bag);
        });
  if (has_label_map(task)) return;
  const auto has = [task](const LabelRecord& r, bool then = false) {
    return (then ? "gave it " : "has ") + outcome_text(r, task);
  };
  check_agree(out, "key", key, same_outcome, has);
  if (!columns.bag.empty()) check_agree(out, "bag", bag, same_outcome, has);
  if (!columns.group.empty()) warn_group_outcomes(out, columns, task);
}

}  // namespace

Labels select_labels(Table&& table, const LabelColumns& columns, PackTask task) {
  const Columns c = find_columns(table, columns, task);
  if (table.rows.empty()) throw InputError(at_file(table.path, "no rows after the header"));
  const std::vector<std::size_t> filled = needed(c, task);
  const auto read_outcome = detail::spec_of(task).read_outcome;
  Labels out;
  out.path = table.path;
  out.records.reserve(table.rows.size());
  for (std::size_t i = 0; i < table.rows.size(); ++i) {
    std::vector<std::string>& row = table.rows[i];
    const std::uint64_t line = table.lines[i];
    for (const std::size_t col : filled)
      if (row[col].empty())
        throw InputError(at_line(
            table, line, "column " + json_quoted(table.columns[col]) + " is empty (or missing)"));
    if (row[c.key].find_first_of("\r\n") != std::string::npos)
      throw InputError(
          at_line(table, line, "key " + json_quoted(row[c.key]) + " contains a line break"));
    LabelRecord rec;
    rec.line = line;
    read_outcome({table, row, line, c.outcome}, rec);
    // The table's strings move into the records (the group is the key's copy without a
    // group column).
    rec.group = row[c.group];
    if (c.bagged) rec.bag = std::move(row[c.bag]);
    rec.key = std::move(row[c.key]);
    out.records.push_back(std::move(rec));
  }
  check_consistency(out, columns, task);
  return out;
}

Labels read_labels(const std::string& path, const LabelColumns& columns, PackTask task) {
  return select_labels(io::read_table(path), columns, task);
}

std::optional<float> parse_event(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return std::nullopt;
  std::string s(text.substr(first, text.find_last_not_of(" \t") - first + 1));
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s == "true" || s == "yes" || s == "dead") return 1.0f;
  if (s == "false" || s == "no" || s == "alive") return 0.0f;
  const auto v = detail::parse_number(s);
  if (v && (*v == 0 || *v == 1)) return static_cast<float>(*v);
  return std::nullopt;
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
