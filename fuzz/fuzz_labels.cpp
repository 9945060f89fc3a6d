// libFuzzer target: arbitrary bytes as a labels table (lib/records/labels.cpp), parsed as
// CSV, TSV and JSONL in turn (parse_table), then, where that succeeds, the columns picked
// (select_labels, with and without a group column) and the label map built (label_map).
// The oracle: each step returns or throws mltool::Error (anything else, a crash or a
// sanitizer report is a finding), and what is returned keeps the documented shape:
//   - parse_table: at least a header; column names non-empty and distinct; every row as
//     wide as the header; one 1-based, non-decreasing line number per row;
//   - select_labels: one record per row, keys, labels and groups non-empty, keys without
//     line breaks, and (with a group column) one group per key;
//   - label_map: names distinct, and every record's label found at an id that names it;
//   - the outcome tasks (the first column the key, the next ones the outcomes, the last the
//     bag): regression targets finite, survival times finite and > 0 with events 1 or 0,
//     multilabel values 1, 0 or NaN, one per label column; bags non-empty; every row of a key
//     (and of a bag) with the same outcome.
//
// Seeds: fuzz/seeds/fuzz_labels (a quoted CSV with CRLF, a TSV, a JSONL with a BOM, tables of
// regression, survival and multilabel outcomes with a bag column).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "fuzz_check.hpp"
#include "mltool/records/labels.hpp"
#include "mltool/util/error.hpp"

const char* const kFuzzTarget = "fuzz_labels";

namespace {

using namespace mltool::io;
using namespace mltool::records;

void check_table(const Table& t) {
  if (t.columns.empty()) finding("table without a header");
  std::set<std::string> seen;
  for (const std::string& c : t.columns) {
    if (c.empty()) finding("empty column name");
    if (!seen.insert(c).second) finding("duplicate column name");
  }
  if (t.rows.size() != t.lines.size()) finding("rows and line numbers differ in count");
  std::uint64_t last = 0;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    if (t.rows[i].size() != t.columns.size()) finding("row not as wide as the header");
    if (t.lines[i] == 0 || t.lines[i] < last) finding("line numbers not 1-based non-decreasing");
    last = t.lines[i];
  }
}

void check_labels(const Table& table, const LabelColumns& columns) {
  const Labels labels = select_labels(table, columns);
  if (labels.records.size() != table.rows.size()) finding("not one record per row");
  std::unordered_map<std::string, std::string> group_of;
  for (const LabelRecord& r : labels.records) {
    if (r.key.empty() || r.label.empty() || r.group.empty()) finding("empty key/label/group");
    if (r.key.find_first_of("\r\n") != std::string::npos) finding("line break in a key");
    if (columns.group.empty() && r.group != r.key) finding("ungrouped record's group != key");
    const auto [it, added] = group_of.emplace(r.key, r.group);
    if (!added && it->second != r.group) finding("a key in two groups");
  }
  const LabelMap map = label_map(labels);
  const auto& names = map.names();
  if (std::set<std::string>(names.begin(), names.end()).size() != names.size())
    finding("label map names repeat");
  for (const LabelRecord& r : labels.records) {
    const auto id = map.find(r.label);
    if (!id || *id >= names.size() || names[*id] != r.label) finding("label not in its map");
  }
}

// Whether `a` and `b` have one outcome (NaN, a missing multilabel value, equals NaN).
bool same_outcome(const LabelRecord& a, const LabelRecord& b) {
  const auto same = [](float x, float y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  return same(a.target, b.target) && same(a.time, b.time) && same(a.event, b.event) &&
         a.values.size() == b.values.size() &&
         std::equal(a.values.begin(), a.values.end(), b.values.begin(), same);
}

void check_outcome(const LabelRecord& r, PackTask task, const LabelColumns& columns) {
  if (r.key.empty() || r.key.find_first_of("\r\n") != std::string::npos) finding("a bad key");
  if (!columns.bag.empty() && r.bag.empty()) finding("an empty bag");
  if (task == PackTask::regression && !std::isfinite(r.target)) finding("a target not finite");
  if (task == PackTask::survival &&
      (!std::isfinite(r.time) || !(r.time > 0) || (r.event != 0 && r.event != 1)))
    finding("a survival time not finite and > 0, or an event not 1 or 0");
  if (task != PackTask::multilabel) return;
  if (r.values.size() != columns.labels.size()) finding("not one value per label column");
  for (const float v : r.values)
    if (v != 0 && v != 1 && !std::isnan(v)) finding("a multilabel value not 1, 0 or NaN");
}

// Each outcome task on the table's columns: key, then outcomes, then a bag (where there are
// enough columns).
void check_outcomes(const Table& table, PackTask task) {
  const auto& c = table.columns;
  if (c.size() < 3) return;
  LabelColumns columns;
  columns.key = c[0];
  columns.target = columns.time = c[1];
  columns.event = c[2];
  columns.labels.assign(c.begin() + 1, c.end() - 1);
  columns.bag = c.back();
  if (task == PackTask::survival && c.size() < 4) columns.bag.clear();
  const Labels labels = select_labels(table, columns, task);
  if (labels.records.size() != table.rows.size()) finding("not one record per row");
  std::unordered_map<std::string, const LabelRecord*> of_key, of_bag;
  for (const LabelRecord& r : labels.records) {
    check_outcome(r, task, columns);
    if (!same_outcome(*of_key.emplace(r.key, &r).first->second, r))
      finding("a key with two outcomes");
    if (!r.bag.empty() && !same_outcome(*of_bag.emplace(r.bag, &r).first->second, r))
      finding("a bag with two outcomes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto& format :
       {std::pair{TableFormat::csv, "labels.csv"}, std::pair{TableFormat::tsv, "labels.tsv"},
        std::pair{TableFormat::jsonl, "labels.jsonl"}}) {
    Table table;
    bool parsed = false;
    expect_clean("parse_table", [&] {
      table = parse_table(text, format.first, format.second);
      parsed = true;
    });
    if (!parsed) continue;
    check_table(table);
    // Column choices the seeds and the fuzzer can both meet: the defaults, with a group
    // column, and the first two columns whatever they are called.
    expect_clean("select_labels", [&] { check_labels(table, LabelColumns{}); });
    expect_clean("select_labels", [&] {
      check_labels(table, LabelColumns{"key", "label", "group"});
    });
    if (table.columns.size() >= 2)
      expect_clean("select_labels", [&] {
        check_labels(table, LabelColumns{table.columns[0], table.columns[1], ""});
      });
    for (const PackTask task : {PackTask::regression, PackTask::survival, PackTask::multilabel})
      expect_clean("select_labels", [&] { check_outcomes(table, task); });
  }
  return 0;
}
