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
  std::size_t key, group, label = 0, target = 0, time = 0, event = 0, bag = 0;
  bool grouped, bagged;
  std::vector<std::size_t> outcomes;  // multilabel
  std::vector<std::size_t> filled;    // the outcome columns a row must fill
};

// A task's outcome column must be named; its option says how.
void require_column(const std::string& name, const char* option, PackTask task) {
  if (name.empty())
    throw UsageError(std::string("--task ") + to_string(task) + " needs " + option +
                     " (the column of the outcome)");
}

Columns find_columns(const Table& table, const LabelColumns& c, PackTask task) {
  Columns out{table.column(c.key), 0, 0, 0, 0, 0, 0, !c.group.empty(), !c.bag.empty(), {}, {}};
  out.group = out.grouped ? table.column(c.group) : out.key;
  if (out.bagged) out.bag = table.column(c.bag);
  switch (task) {
    case PackTask::classification:
      if (c.key == c.label)
        throw UsageError("the key and label columns must differ, both are " + json_quoted(c.key));
      out.label = table.column(c.label);
      out.filled = {out.label};
      break;
    case PackTask::regression:
      require_column(c.target, "--target-column", task);
      out.target = table.column(c.target);
      out.filled = {out.target};
      break;
    case PackTask::survival:
      require_column(c.time, "--time-column", task);
      require_column(c.event, "--event-column", task);
      out.time = table.column(c.time);
      out.event = table.column(c.event);
      out.filled = {out.time, out.event};
      break;
    case PackTask::multilabel:
      if (c.labels.empty()) require_column("", "--label-columns", task);
      for (const auto& name : c.labels) {
        if (name == c.key)
          throw UsageError("the key column " + json_quoted(c.key) + " is not an outcome");
        out.outcomes.push_back(table.column(name));
      }
      break;
  }
  return out;
}

// The columns a row must fill: its key, group, bag and the task's outcome columns.
std::vector<std::size_t> needed(const Columns& c) {
  std::vector<std::size_t> out = {c.key, c.group};
  if (c.bagged) out.push_back(c.bag);
  out.insert(out.end(), c.filled.begin(), c.filled.end());
  return out;
}

// `text` as a number (blanks around it ignored), or nullopt.
std::optional<double> parse_number(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return std::nullopt;
  const auto last = text.find_last_not_of(" \t");
  const std::string s(text.substr(first, last - first + 1));
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

// A row's outcome into `rec`, checked; the message names the column and the option choosing it.
void read_outcome(const Table& t, const std::vector<std::string>& row, std::uint64_t line,
                  const Columns& c, PackTask task, LabelRecord& rec) {
  const auto bad = [&](std::size_t col, const char* option, const std::string& must) {
    return InputError(at_line(t, line,
                              "column " + json_quoted(t.columns[col]) + " holds " +
                                  json_quoted(row[col]) + ": " + must + " (the column of " +
                                  option + ")"));
  };
  if (task == PackTask::regression) {
    const auto v = parse_number(row[c.target]);
    if (!v || !std::isfinite(static_cast<float>(*v)))
      throw bad(c.target, "--target-column", "a target must be a finite number");
    rec.target = static_cast<float>(*v);
  } else if (task == PackTask::multilabel) {
    rec.values.clear();
    for (const std::size_t col : c.outcomes) {
      if (row[col].find_first_not_of(" \t") == std::string::npos) {
        rec.values.push_back(NAN);  // missing: masks this outcome of the sample
        continue;
      }
      const auto e = parse_event(row[col]);
      if (!e)
        throw bad(col, "--label-columns",
                  "an outcome must be 1 or 0 (also 1.0/0.0, true/false, yes/no), or empty");
      rec.values.push_back(*e);
    }
  } else if (task == PackTask::survival) {
    const auto v = parse_number(row[c.time]);
    if (!v || !std::isfinite(static_cast<float>(*v)) || !(static_cast<float>(*v) > 0))
      throw bad(c.time, "--time-column", "a time must be a finite number > 0");
    rec.time = static_cast<float>(*v);
    const auto e = parse_event(row[c.event]);
    if (!e)
      throw bad(c.event, "--event-column",
                "an event must be 1 or 0 (also 1.0/0.0, true/false, yes/no, dead/alive)");
    rec.event = *e;
  }
}

std::string outcome_text(const LabelRecord& r, PackTask task) {
  return detail::spec_of(task).describe({r.target, r.time, r.event, r.values});
}

bool same_outcome(const LabelRecord& a, const LabelRecord& b) {
  const auto same = [](float x, float y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  return a.target == b.target && a.time == b.time && a.event == b.event &&
         std::equal(a.values.begin(), a.values.end(), b.values.begin(), b.values.end(), same);
}

// Every record with one value of `of` agrees by `same`; else InputError naming both lines.
template <class Of, class Same, class Describe>
void check_agree(const Labels& labels, const char* what, Of of, Same same, Describe describe) {
  std::unordered_map<std::string_view, std::size_t> first_of;
  for (std::size_t i = 0; i < labels.records.size(); ++i) {
    const LabelRecord& r = labels.records[i];
    const auto [it, added] = first_of.emplace(of(r), i);
    const LabelRecord& first = labels.records[it->second];
    if (!added && !same(first, r))
      throw InputError(at_file(labels.path, "line " + std::to_string(r.line) + ": " + what + " " +
                                                json_quoted(of(r)) + " " + describe(r) +
                                                ", but line " + std::to_string(first.line) + " " +
                                                describe(first, true)));
  }
}

// The consistency guarantees of select_labels.
void check_consistency(const Labels& out, const LabelColumns& columns, PackTask task) {
  const auto key = [](const LabelRecord& r) -> std::string_view { return r.key; };
  const auto group = [](const LabelRecord& r) -> std::string_view { return r.group; };
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
  if (!columns.group.empty()) check_agree(out, "group", group, same_outcome, has);
  if (!columns.bag.empty()) check_agree(out, "bag", bag, same_outcome, has);
}

}  // namespace

Labels select_labels(Table&& table, const LabelColumns& columns, PackTask task) {
  const Columns c = find_columns(table, columns, task);
  if (table.rows.empty()) throw InputError(at_file(table.path, "no rows after the header"));
  const std::vector<std::size_t> filled = needed(c);
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
    read_outcome(table, row, line, c, task, rec);
    // The table's strings move into the records (the group is the key's copy without a
    // group column).
    rec.group = row[c.group];
    if (c.bagged) rec.bag = std::move(row[c.bag]);
    if (has_label_map(task)) rec.label = std::move(row[c.label]);
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
  const auto v = parse_number(s);
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
