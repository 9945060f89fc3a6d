#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mltool/records/labels.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

namespace {

using mltool::FormatError;
using mltool::InputError;
using mltool::UsageError;
using mltool::io::parse_table;
using mltool::io::Table;
using mltool::io::table_format_for;
using mltool::io::TableFormat;
using mltool::records::LabelColumns;
using mltool::records::LabelMap;
using mltool::records::Labels;
using mltool::records::PackTask;
using mltool::records::parse_event;
using mltool::records::read_labels;
using mltool::records::select_labels;
using mltool::testing::error_of;
using Rows = std::vector<std::vector<std::string>>;

Table csv(std::string_view text) { return parse_table(text, TableFormat::csv, "labels.csv"); }
Table tsv(std::string_view text) { return parse_table(text, TableFormat::tsv, "labels.tsv"); }
Table jsonl(std::string_view text) { return parse_table(text, TableFormat::jsonl, "labels.jsonl"); }

std::string csv_error(std::string_view text) {
  return error_of<FormatError>([&] { csv(text); });
}

// Key, label and group columns (the others unset).
LabelColumns columns(std::string key, std::string label, std::string group) {
  LabelColumns c;
  c.key = std::move(key);
  c.label = std::move(label);
  c.group = std::move(group);
  return c;
}

std::string select_error(const Table& t, const LabelColumns& c = {}) {
  return error_of<InputError>([&] { select_labels(t, c); });
}

TEST(LabelsFormat, ChosenByExtension) {
  EXPECT_EQ(table_format_for("a/labels.csv"), TableFormat::csv);
  EXPECT_EQ(table_format_for("labels.TSV"), TableFormat::tsv);
  EXPECT_EQ(table_format_for("x.jsonl"), TableFormat::jsonl);
  EXPECT_EQ(error_of<InputError>([] { table_format_for("labels.json"); }),
            "labels.json: unknown labels table format: expected a .csv, .tsv or .jsonl file");
}

TEST(LabelsCsv, PlainRowsWithLineNumbers) {
  const Table t = csv("key,label\ns1/0_0,tumor\ns1/0_1,normal\n");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"key", "label"}));
  EXPECT_EQ(t.rows, (Rows{{"s1/0_0", "tumor"}, {"s1/0_1", "normal"}}));
  EXPECT_EQ(t.lines, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(t.column("label"), 1u);
}

TEST(LabelsCsv, QuotedFieldsDoubledQuotesAndLineBreaks) {
  const Table t =
      csv("key,caption\n\"a,b\",\"say \"\"hi\"\"\"\nk2,\"two\nlines\"\n\"\",x\nk4,\"\"\n");
  EXPECT_EQ(t.rows, (Rows{{"a,b", "say \"hi\""}, {"k2", "two\nlines"}, {"", "x"}, {"k4", ""}}));
  // The row after a quoted line break starts on the physical line after it.
  EXPECT_EQ(t.lines, (std::vector<std::uint64_t>{2, 3, 5, 6}));
}

TEST(LabelsCsv, CrlfBomEmptyFieldsAndNoFinalNewline) {
  const Table t = csv("\xEF\xBB\xBFkey,label,group\r\na,1,\r\n,,\r\nx,\"y\",z");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"key", "label", "group"}));
  EXPECT_EQ(t.rows, (Rows{{"a", "1", ""}, {"", "", ""}, {"x", "y", "z"}}));
  EXPECT_EQ(t.lines, (std::vector<std::uint64_t>{2, 3, 4}));
  EXPECT_EQ(csv_error("key,label\r\na,1\r\n\"q\"\r\n"),
            "labels.csv: line 3: 1 field, the header has 2");
  const Table u = csv("key,label\r\na,\"1\"\r\nb,2");
  EXPECT_EQ(u.rows, (Rows{{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(u.lines, (std::vector<std::uint64_t>{2, 3}));
}

TEST(LabelsCsv, BlankLinesAreSkippedAnywhere) {
  const Table t = csv("\nkey,label\n\na,1\r\n\r\nb,2\n\n\n");
  EXPECT_EQ(t.rows, (Rows{{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(t.lines, (std::vector<std::uint64_t>{4, 6}));
}

TEST(LabelsCsv, ErrorsNameTheLine) {
  EXPECT_EQ(csv_error("k,l,g,p\na,b,c,d\n" + std::string(14, '\n') + "x,y,z\n"),
            "labels.csv: line 17: 3 fields, the header has 4");
  EXPECT_EQ(csv_error("key,label\na,1,\n"), "labels.csv: line 2: 3 fields, the header has 2");
  EXPECT_EQ(csv_error("key,label\na,\"1\nb,2\n"),
            "labels.csv: line 2: field 2: quoted field is never closed");
  EXPECT_EQ(csv_error("key,label\na,\"1\"x\n"),
            "labels.csv: line 2: field 2: text after the closing quote (a quote inside a quoted "
            "field is written \"\")");
  EXPECT_EQ(csv_error("key,label\na,5\"\n"),
            "labels.csv: line 2: field 2: quote inside an unquoted field (quote the whole field "
            "and write the quote as \"\")");
  EXPECT_EQ(csv_error("key,label\na,1\rb,2\n"),
            "labels.csv: line 2: carriage return not followed by a line feed");
  EXPECT_EQ(csv_error("key,\na,1\n"), "labels.csv: line 1: column 2 of the header has no name");
  EXPECT_EQ(csv_error("key,label,key\n"),
            "labels.csv: line 1: duplicate column \"key\" (columns 1 and 3)");
  EXPECT_EQ(csv_error(""), "labels.csv: empty file, expected a header line");
  EXPECT_EQ(csv_error("\xEF\xBB\xBF\r\n\n"), "labels.csv: empty file, expected a header line");
}

TEST(LabelsTsv, TabsOnlyQuotesAreText) {
  const Table t = tsv("\xEF\xBB\xBFkey\tlabel\r\n\"a\"\tb,c\r\n\r\nk\t\n");
  EXPECT_EQ(t.rows, (Rows{{"\"a\"", "b,c"}, {"k", ""}}));
  EXPECT_EQ(t.lines, (std::vector<std::uint64_t>{2, 4}));
  EXPECT_EQ(error_of<FormatError>([] { tsv("key\tlabel\na\tb\tc\n"); }),
            "labels.tsv: line 2: 3 fields, the header has 2");
  EXPECT_EQ(error_of<FormatError>([] { tsv("key\tlabel\na\rb\tc\n"); }),
            "labels.tsv: line 2: carriage return inside a line");
}

TEST(LabelsJsonl, ObjectsStringsAndIntegers) {
  const Table t = jsonl(
      "{\"key\": \"s1\", \"label\": 3, \"patient\": \"p1\"}\r\n"
      "\n"
      "  \n"
      "{\"label\": -7, \"key\": \"s2\", \"extra\": null}\n"
      "{\"key\": \"s3\", \"label\": \"x\", \"patient\": 18446744073709551615}");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"key", "label", "patient", "extra"}));
  EXPECT_EQ(
      t.rows,
      (Rows{{"s1", "3", "p1", ""}, {"s2", "-7", "", ""}, {"s3", "x", "18446744073709551615", ""}}));
  EXPECT_EQ(t.lines, (std::vector<std::uint64_t>{1, 4, 5}));
}

TEST(LabelsJsonl, ErrorsNameTheLine) {
  const auto err = [](std::string_view text) {
    return error_of<FormatError>([&] { jsonl(text); });
  };
  EXPECT_EQ(
      err("{\"key\": \"a\"}\n{\"key\": \"b\",}\n").rfind("labels.jsonl: line 2: invalid JSON: ", 0),
      0u);
  EXPECT_NE(err("{\"key\": \"a\"}\n{\"key\": x}\n").find("at column 9"), std::string::npos);
  EXPECT_EQ(err("[1, 2]\n"), "labels.jsonl: line 1: expected a JSON object, got an array");
  EXPECT_EQ(err("\n\n{\"key\": \"a\", \"label\": [1.5]}\n"),
            "labels.jsonl: line 3: \"label\": expected a string, a number or a boolean, got an "
            "array");
  EXPECT_EQ(err("{\"key\": {\"a\": 1}}\n"),
            "labels.jsonl: line 1: \"key\": expected a string, a number or a boolean, got an "
            "object");
  EXPECT_EQ(err("\n \n"), "labels.jsonl: empty file, expected one JSON object per line");
}

// Found by fuzz_labels: a number beyond a double's range made nlohmann throw out_of_range,
// which escaped as a non-mltool exception.
TEST(LabelsJsonl, NumberOverflowIsAFormatError) {
  EXPECT_EQ(error_of<FormatError>([] { jsonl("{\"key\": \"a\"}\n{\"label\": 999E9999}\n"); }),
            "labels.jsonl: line 2: invalid JSON: number overflow parsing '999E9999'");
}

TEST(LabelsSelect, DefaultsAndGroups) {
  const Table t = csv("patient,label,key\np1,tumor,s1\np1,stroma,s1\np2,tumor,s2\n");
  const Labels by_key = select_labels(t, {});
  ASSERT_EQ(by_key.records.size(), 3u);
  EXPECT_EQ(by_key.records[1].key, "s1");
  EXPECT_EQ(by_key.records[1].label, "stroma");
  EXPECT_EQ(by_key.records[1].group, "s1");  // no group column: the key is the group
  EXPECT_EQ(by_key.records[1].line, 3u);
  const Labels by_patient = select_labels(t, columns("key", "label", "patient"));
  EXPECT_EQ(by_patient.records[2].group, "p2");
  EXPECT_EQ(by_patient.path, "labels.csv");
}

TEST(LabelsSelect, MissingColumnListsTheColumns) {
  const Table t = csv("slide,diagnosis,patient\ns1,a,p1\n");
  EXPECT_EQ(select_error(t),
            "labels.csv: no column \"key\" (the columns are: slide, diagnosis, patient)");
  EXPECT_EQ(select_error(t, columns("slide", "diagnosis", "case")),
            "labels.csv: no column \"case\" (the columns are: slide, diagnosis, patient)");
  EXPECT_EQ(error_of<UsageError>([&] { select_labels(t, columns("slide", "slide", "")); }),
            "the key and label columns must differ, both are \"slide\"");
}

TEST(LabelsSelect, EmptyValuesAndBadKeys) {
  EXPECT_EQ(select_error(csv("key,label\na,1\n,2\n")),
            "labels.csv: line 3: column \"key\" is empty (or missing)");
  EXPECT_EQ(select_error(csv("key,label\na,\n")),
            "labels.csv: line 2: column \"label\" is empty (or missing)");
  EXPECT_EQ(select_error(csv("key,label,p\na,1,\n"), columns("key", "label", "p")),
            "labels.csv: line 2: column \"p\" is empty (or missing)");
  EXPECT_EQ(select_error(jsonl("{\"key\": \"a\", \"label\": 1}\n{\"key\": \"b\"}\n")),
            "labels.jsonl: line 2: column \"label\" is empty (or missing)");
  EXPECT_EQ(select_error(csv("key,label\n\"a\nb\",1\n")),
            "labels.csv: line 2: key \"a\\nb\" contains a line break");
  EXPECT_EQ(select_error(csv("key,label\n")), "labels.csv: no rows after the header");
}

TEST(LabelsSelect, OneKeyOneGroup) {
  const Table t = csv("key,label,p\ns1,a,p1\ns2,a,p1\ns1,b,p1\n\ns1,c,p2\n");
  EXPECT_EQ(select_error(t, columns("key", "label", "p")),
            "labels.csv: line 6: key \"s1\" is in group \"p2\", but line 2 put it in group \"p1\"");
}

TEST(LabelsSelect, ReadsFilesByExtension) {
  mltool::testing::TempDir dir;
  mltool::util::write_file_atomic(dir / "l.tsv", "key\tlabel\na\t1\n");
  mltool::util::write_file_atomic(dir / "l.jsonl", "{\"key\": \"a\", \"label\": 1}\n");
  mltool::util::write_file_atomic(dir / "l.csv", "key,label\na,1\n");
  for (const char* name : {"l.tsv", "l.jsonl", "l.csv"}) {
    const Labels l = read_labels(dir / name, {});
    ASSERT_EQ(l.records.size(), 1u) << name;
    EXPECT_EQ(l.records[0].key, "a");
    EXPECT_EQ(l.records[0].label, "1");
    EXPECT_EQ(l.path, dir / name);
  }
  EXPECT_THROW(read_labels(dir / "missing.csv", {}), InputError);
}

TEST(LabelsMap, NumericLabelsSortNumerically) {
  const LabelMap m({"10", "2", "-3", "2", "0", "123456789012345678901234567890", "-40"});
  EXPECT_TRUE(m.numeric());
  EXPECT_EQ(m.names(), (std::vector<std::string>{"-40", "-3", "0", "2", "10",
                                                 "123456789012345678901234567890"}));
  EXPECT_EQ(m.id("10"), 4u);
  EXPECT_EQ(m.find("010"), std::nullopt);
  EXPECT_EQ(m.find("7"), std::nullopt);
}

TEST(LabelsMap, OtherwiseBytewise) {
  // "02" and "-0" are not canonical integers, so everything sorts as text.
  for (const char* odd : {"02", "-0", "a", "1.5"}) {
    const LabelMap m({"10", "2", odd});
    EXPECT_FALSE(m.numeric()) << odd;
    EXPECT_EQ(m.names().front(), std::min<std::string>("10", odd)) << odd;
  }
  const LabelMap m({"tumor", "Stroma", "normal", "tumor", "\xC3\xA9", "z"});
  EXPECT_EQ(m.names(), (std::vector<std::string>{"Stroma", "normal", "tumor", "z", "\xC3\xA9"}));
  EXPECT_EQ(m.id("tumor"), 2u);
  EXPECT_EQ(m.name(0), "Stroma");
  EXPECT_EQ(m.find("Tumor"), std::nullopt);
  EXPECT_EQ(error_of<UsageError>([&] { m.id("x"); }), "label \"x\" is not in the label map");
  EXPECT_EQ(LabelMap(std::vector<std::string>{}).size(), 0u);
}

TEST(LabelsMap, IdsDoNotDependOnRowOrder) {
  const Labels a = select_labels(csv("key,label\na,3\nb,1\nc,20\nd,1\n"), {});
  const Labels b = select_labels(csv("key,label\nd,1\nc,20\nb,1\na,3\n"), {});
  EXPECT_EQ(mltool::records::label_map(a).names(), (std::vector<std::string>{"1", "3", "20"}));
  EXPECT_EQ(mltool::records::label_map(a).names(), mltool::records::label_map(b).names());
}

// ---------------------------------------------------------------- outcomes (issue 27)

LabelColumns regression_columns() {
  LabelColumns c;
  c.target = "tmb";
  return c;
}

LabelColumns survival_columns(std::string group = "") {
  LabelColumns c;
  c.time = "os";
  c.event = "status";
  c.group = std::move(group);
  return c;
}

TEST(LabelsOutcome, MultilabelMissingCellsMaskOneOutcome) {
  LabelColumns c;
  c.labels = {"KRAS", "BRAF"};
  const Labels l =
      select_labels(csv("key,KRAS,BRAF\ns1,1,\ns2,0,yes\ns3,,0\n"), c, PackTask::multilabel);
  ASSERT_EQ(l.records.size(), 3u);  // an empty cell keeps the row
  EXPECT_EQ(l.records[0].values[0], 1.0f);
  EXPECT_TRUE(std::isnan(l.records[0].values[1]));
  EXPECT_EQ(l.records[1].values[1], 1.0f);
  EXPECT_TRUE(std::isnan(l.records[2].values[0]));
  EXPECT_EQ(error_of<InputError>(
                [&] { select_labels(csv("key,KRAS,BRAF\ns1,1,2\n"), c, PackTask::multilabel); }),
            "labels.csv: line 2: column \"BRAF\" holds \"2\": an outcome must be 1 or 0 (also "
            "1.0/0.0, true/false, yes/no), or empty (the column of --label-columns)");
  EXPECT_EQ(
      error_of<InputError>(
          [&] { select_labels(csv("key,KRAS,BRAF\ns1,1,\ns1,1,0\n"), c, PackTask::multilabel); }),
      "labels.csv: line 3: key \"s1\" has outcomes 1,0, but line 2 gave it outcomes 1,missing");
  EXPECT_EQ(
      select_labels(csv("key,KRAS,BRAF\ns1,1,\ns1,1,\n"), c, PackTask::multilabel).records.size(),
      2u);  // the same outcomes, a missing one included: a repeat
  EXPECT_NE(error_of<UsageError>([] {
              select_labels(csv("key,KRAS\ns1,1\n"), LabelColumns{}, PackTask::multilabel);
            }).find("--task multilabel needs --label-columns"),
            std::string::npos);
}

TEST(LabelsOutcome, RegressionTargetsAreFiniteNumbers) {
  const Labels l = select_labels(csv("key,tmb\ns1,3.5\ns2, -1e-3 \ns3,7\n"), regression_columns(),
                                 PackTask::regression);
  ASSERT_EQ(l.records.size(), 3u);
  EXPECT_EQ(l.records[0].target, 3.5f);
  EXPECT_EQ(l.records[1].target, -1e-3f);
  EXPECT_EQ(l.records[2].target, 7.0f);
  EXPECT_TRUE(l.records[0].label.empty());  // the label column is not read: it need not exist
  const auto err = [](std::string_view text) {
    return error_of<InputError>(
        [&] { select_labels(csv(text), regression_columns(), PackTask::regression); });
  };
  for (const char* bad : {"nan", "inf", "-inf", "abc", "1.5x", "1e999"})
    EXPECT_EQ(err(std::string("key,tmb\ns1,1\ns2,") + bad + "\n"),
              std::string("labels.csv: line 3: column \"tmb\" holds \"") + bad +
                  "\": a target must be a finite number (the column of --target-column)")
        << bad;
  EXPECT_EQ(err("key,tmb\ns1,\n"), "labels.csv: line 2: column \"tmb\" is empty (or missing)");
  EXPECT_EQ(err("key,tmb\ns1,1\ns1,2\n"),
            "labels.csv: line 3: key \"s1\" has target 2, but line 2 gave it target 1");
  EXPECT_EQ(
      select_labels(csv("key,tmb\ns1,1\ns1,1.0\n"), regression_columns(), PackTask::regression)
          .records.size(),
      2u);  // the same outcome twice: a repeat, not a conflict
  EXPECT_NE(error_of<UsageError>([] {
              select_labels(csv("key,tmb\ns1,1\n"), LabelColumns{}, PackTask::regression);
            }).find("--task regression needs --target-column"),
            std::string::npos);
}

TEST(LabelsOutcome, SurvivalTimesAndEvents) {
  const Labels l =
      select_labels(csv("key,os,status\na,12.5,1\nb,3,0\nc,1e-3,Dead\nd,4,ALIVE\ne,5,yes\nf,6,No\n"
                        "g,7,true\nh,8,False\ni,9,1.0\nj,10,0.0\n"),
                    survival_columns(), PackTask::survival);
  std::vector<float> events, times;
  for (const auto& r : l.records) {
    events.push_back(r.event);
    times.push_back(r.time);
  }
  EXPECT_EQ(events, (std::vector<float>{1, 0, 1, 0, 1, 0, 1, 0, 1, 0}));
  EXPECT_EQ(times[0], 12.5f);
  EXPECT_EQ(times[2], 1e-3f);
  const auto err = [](std::string_view text, LabelColumns c = survival_columns()) {
    return error_of<InputError>([&] { select_labels(csv(text), c, PackTask::survival); });
  };
  for (const char* bad : {"0", "-2", "nan", "inf", "x"})
    EXPECT_EQ(err(std::string("key,os,status\na,") + bad + ",1\n"),
              std::string("labels.csv: line 2: column \"os\" holds \"") + bad +
                  "\": a time must be a finite number > 0 (the column of --time-column)")
        << bad;
  for (const char* bad : {"2", "0.5", "maybe", "-1", "censored"})
    EXPECT_EQ(err(std::string("key,os,status\na,3,") + bad + "\n"),
              std::string("labels.csv: line 2: column \"status\" holds \"") + bad +
                  "\": an event must be 1 or 0 (also 1.0/0.0, true/false, yes/no, dead/alive) "
                  "(the column of --event-column)")
        << bad;
  EXPECT_EQ(err("key,os,status\na,3,\n"),
            "labels.csv: line 2: column \"status\" is empty (or missing)");
  EXPECT_EQ(select_labels(csv("key,os,status,patient\na,3,1,P1\nb,3,dead,P1\n"),
                          survival_columns("patient"), PackTask::survival)
                .records.size(),
            2u);
}

// A group (--group-by) keeps its keys in one split; each record keeps its own outcome (issue 51).
TEST(LabelsOutcome, GroupDoesNotOwnTheOutcome) {
  LabelColumns reg = regression_columns();
  reg.group = "patient";
  const Labels purity = select_labels(csv("key,tmb,patient\ns1,0.3,P1\ns2,0.7,P1\ns3,0.5,P2\n"),
                                      reg, PackTask::regression);
  ASSERT_EQ(purity.records.size(), 3u);
  EXPECT_EQ(purity.records[0].target, 0.3f);
  EXPECT_EQ(purity.records[1].target, 0.7f);
  EXPECT_EQ(purity.records[1].group, "P1");
  LabelColumns panel;
  panel.labels = {"KRAS", "BRAF"};
  panel.group = "patient";
  const Labels blocks = select_labels(csv("key,KRAS,BRAF,patient\ns1,1,0,P1\ns2,0,,P1\n"), panel,
                                      PackTask::multilabel);
  ASSERT_EQ(blocks.records.size(), 2u);
  EXPECT_EQ(blocks.records[0].values[0], 1.0f);
  EXPECT_EQ(blocks.records[1].values[0], 0.0f);
  EXPECT_TRUE(std::isnan(blocks.records[1].values[1]));
  // Survival is the patient's in practice: accepted as the table says, with a warning.
  ::testing::internal::CaptureStderr();
  const Labels times = select_labels(csv("key,os,status,patient\na,3,1,P1\nb,4,1,P1\nc,5,0,P1\n"
                                         "d,6,0,P2\ne,7,1,P2\nf,8,0,P3\n"),
                                     survival_columns("patient"), PackTask::survival);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(times.records[1].time, 4.0f);
  EXPECT_NE(warned.find("labels.csv: 2 --group-by patient groups give their records different "
                        "outcomes (line 3: group \"P1\" has time 4, event 1, but line 2 gave it "
                        "time 3, event 1): each record keeps its own; if the outcome is the "
                        "patient's, correct the table, or pack one record per patient with "
                        "--unit bag --bag-by patient"),
            std::string::npos)
      << warned;
  // True conflicts stay refused: one key, or one bag, with two outcomes.
  const auto err = [](std::string_view text, const LabelColumns& c, PackTask task) {
    return error_of<InputError>([&] { select_labels(csv(text), c, task); });
  };
  EXPECT_EQ(err("key,tmb,patient\ns1,0.3,P1\ns2,0.7,P1\ns1,0.4,P1\n", reg, PackTask::regression),
            "labels.csv: line 4: key \"s1\" has target 0.4, but line 2 gave it target 0.3");
  EXPECT_EQ(
      err("key,KRAS,BRAF,patient\ns1,1,0,P1\ns2,0,1,P1\ns2,0,0,P1\n", panel, PackTask::multilabel),
      "labels.csv: line 4: key \"s2\" has outcomes 0,0, but line 3 gave it outcomes 0,1");
  LabelColumns bagged = reg;
  bagged.bag = "patient";
  EXPECT_EQ(err("key,tmb,patient\ns1,0.3,P1\ns2,0.7,P1\n", bagged, PackTask::regression),
            "labels.csv: line 3: bag \"P1\" has target 0.7, but line 2 gave it target 0.3");
}

TEST(LabelsOutcome, BagColumnOneBagAndOutcomePerKeyAndBag) {
  LabelColumns c = survival_columns();
  c.bag = "patient";
  const Labels l = select_labels(csv("key,os,status,patient\ns1,3,1,P1\ns2,3,1,P1\ns3,5,0,P2\n"), c,
                                 PackTask::survival);
  EXPECT_EQ(l.records[1].bag, "P1");
  EXPECT_EQ(l.records[2].group, "s3");  // without --group-by the key; pack makes the bag the group
  const auto err = [&](std::string_view text) {
    return error_of<InputError>([&] { select_labels(csv(text), c, PackTask::survival); });
  };
  EXPECT_EQ(err("key,os,status,patient\ns1,3,1,P1\ns1,3,1,P2\n"),
            "labels.csv: line 3: key \"s1\" is in bag \"P2\", but line 2 put it in bag \"P1\"");
  EXPECT_EQ(err("key,os,status,patient\ns1,3,1,P1\ns2,4,1,P1\n"),
            "labels.csv: line 3: bag \"P1\" has time 4, event 1, but line 2 gave it time 3, "
            "event 1");
  EXPECT_EQ(err("key,os,status,patient\ns1,3,1,\n"),
            "labels.csv: line 2: column \"patient\" is empty (or missing)");
}

TEST(LabelsOutcome, ParseEvent) {
  for (const char* one : {"1", "1.0", "1e0", " true", "TRUE", "Yes", "dead", "DEAD "})
    EXPECT_EQ(parse_event(one), 1.0f) << one;
  for (const char* zero : {"0", "0.0", "-0", "false", "no", "Alive"})
    EXPECT_EQ(parse_event(zero), 0.0f) << zero;
  for (const char* bad : {"", "2", "0.5", "y", "n", "t", "deceased", "nan"})
    EXPECT_FALSE(parse_event(bad).has_value()) << bad;
}

TEST(LabelsOutcome, JsonlNumbersAndBooleansAsText) {
  const Table t = jsonl(
      "{\"key\": \"a\", \"os\": 12.5, \"status\": true}\n"
      "{\"key\": \"b\", \"os\": 1e-07, \"status\": false}\n");
  EXPECT_EQ(t.rows, (Rows{{"a", "12.5", "true"}, {"b", "1e-07", "false"}}));
  const Labels l = select_labels(t, survival_columns(), PackTask::survival);
  EXPECT_EQ(l.records[0].event, 1.0f);
  EXPECT_EQ(l.records[1].time, 1e-07f);
}

}  // namespace
