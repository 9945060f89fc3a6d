// libFuzzer target: arbitrary bytes as a labels table (lib/records/labels.cpp), parsed as
// CSV, TSV and JSONL in turn (parse_table), then, where that succeeds, the columns picked
// (select_labels, with and without a group column) and the label map built (label_map).
// The oracle: each step returns or throws mltool::Error (anything else, a crash or a
// sanitizer report is a finding), and what is returned keeps the documented shape:
//   - parse_table: at least a header; column names non-empty and distinct; every row as
//     wide as the header; one 1-based, non-decreasing line number per row;
//   - select_labels: one record per row, keys, labels and groups non-empty, keys without
//     line breaks, and (with a group column) one group per key;
//   - label_map: names distinct, and every record's label found at an id that names it.
//
// Seeds: fuzz/seeds/fuzz_labels (a quoted CSV with CRLF, a TSV, a JSONL with a BOM).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "mltool/records/labels.hpp"
#include "mltool/util/error.hpp"

namespace {

using namespace mltool::io;
using namespace mltool::records;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_labels finding: %s\n", what);
  std::abort();
}

template <typename F>
void expect_clean(const char* step, F&& f) {
  try {
    f();
  } catch (const mltool::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_labels finding: %s threw a non-mltool exception: %s\n", step,
                 e.what());
    std::abort();
  }
}

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
  }
  return 0;
}
