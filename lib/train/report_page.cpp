// report.html of a run and of a cross-validation (report_page.hpp): HTML written by hand, its
// text escaped with io::xml_text, the charts' SVG files inlined without their XML declaration.
#include "report_page.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "intervals.hpp"
#include "mltool/io/chart.hpp"
#include "mltool/io/table.hpp"
#include "mltool/util/file.hpp"
#include "task.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

const char* kStyle = R"(<style>
body { font-family: "DejaVu Sans", sans-serif; color: #282828; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.7em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #666; font-size: 0.9em; }
</style>
)";

std::string esc(const std::string& s) { return io::xml_text(s); }

// The last component of `dir` ("run" of "/x/run/").
std::string base_name(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const auto slash = dir.find_last_of('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

// A JSON value as a table cell's text: numbers with 4 significant digits, null as "–".
std::string text_of(const json& v) {
  if (v.is_null()) return "–";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char t[32];
    std::snprintf(t, sizeof t, "%.4g", v.get<double>());
    return t;
  }
  return v.dump();
}

std::string fixed3(const json& v) {
  if (!v.is_number()) return "–";
  char t[32];
  std::snprintf(t, sizeof t, "%.3f", v.get<double>());
  return t;
}

std::string row(const std::vector<std::string>& cells, bool header = false) {
  std::string out = "<tr>";
  for (const auto& c : cells) out += header ? "<th>" + c + "</th>" : "<td>" + c + "</td>";
  return out + "</tr>\n";
}

std::string key_values(const json& object) {
  std::string out = "<table>\n";
  for (const auto& [k, v] : object.items()) out += row({esc(k), esc(text_of(v))});
  return out + "</table>\n";
}

std::string link(const std::string& dir, const std::string& file, const std::string& what) {
  if (!util::exists(util::join_path(dir, file))) return "";
  return "<li><a href=\"" + esc(file) + "\">" + esc(file) + "</a>: " + esc(what) + "</li>\n";
}

// The metrics: estimate, and the 95% interval where `intervals` has one.
std::string metrics_table(const json& metrics, const json& intervals) {
  const json by_name = intervals.is_object() ? intervals.value("metrics", json::object()) : json();
  std::string out = "<table class=\"metrics\">\n" + row({"metric", "value", "95% interval"}, true);
  for (const auto& [name, value] : metrics.items()) {
    std::string interval = "";
    if (by_name.is_object() && by_name.contains(name)) {
      const json& m = by_name[name];
      interval = m["low"].is_number() ? fixed3(m["low"]) + " – " + fixed3(m["high"]) : "–";
    }
    out += "<tr><td>" + esc(name) + "</td><td class=\"n\">" + esc(text_of(value)) +
           "</td><td class=\"n\">" + interval + "</td></tr>\n";
  }
  out += "</table>\n";
  if (intervals.is_object())
    out += "<p>Intervals: " + std::to_string(intervals.value("resamples", 0)) +
           " bootstrap resamples of " + std::to_string(intervals.value("groups", 0)) + " " +
           esc(intervals.value("unit", "group")) +
           "s (percentiles 2.5 and 97.5), seeded: a rerun gives the same.</p>\n";
  return out;
}

// Each chart `pictures` names, its SVG inlined.
std::string charts(const std::string& dir, const json& pictures) {
  std::string out;
  for (const auto& [name, picture] : pictures.items()) {
    if (!picture.is_object() || !picture.contains("svg")) continue;
    const std::string svg_file = picture["svg"].get<std::string>();
    const std::string path = util::join_path(dir, svg_file);
    if (!util::exists(path)) continue;
    std::string svg = util::read_file(path);
    const auto start = svg.find("<svg");
    if (start == std::string::npos) continue;
    out += "<figure class=\"chart\" id=\"chart-" + esc(name) + "\">\n" + svg.substr(start) +
           "<figcaption>" + esc(name) + ": <a href=\"" + esc(svg_file) + "\">SVG</a>, <a href=\"" +
           esc(picture.value("file", "")) + "\">PNG</a></figcaption>\n</figure>\n";
  }
  return out;
}

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
         esc(title) + "</title>\n" + kStyle + "</head>\n<body>\n<h1>" + esc(title) + "</h1>\n" +
         body + "</body>\n</html>\n";
}

std::string task_text(const json& task) {
  std::string out = esc(task.value("kind", "classification"));
  if (task.contains("loss")) out += ", loss " + esc(task["loss"].get<std::string>());
  if (task.contains("labels") && task["labels"].is_array()) {
    std::string labels;
    for (const auto& l : task["labels"])
      labels += (labels.empty() ? "" : ", ") + l.get<std::string>();
    out += "; labels " + esc(labels);
  }
  return out;
}

// Per slide of predictions.csv: its samples, and the majority call with its share
// (classification: a non-numeric prediction column) or the mean of the score column
// (prediction, risk, else the first after slide: multilabel's first probability).
std::string slide_rows(const std::string& dir, const io::Table& t) {
  const std::size_t slide = t.column("slide");
  auto it = std::find(t.columns.begin(), t.columns.end(), "prediction");
  if (it == t.columns.end()) it = std::find(t.columns.begin(), t.columns.end(), "risk");
  const std::size_t score =
      it != t.columns.end() ? static_cast<std::size_t>(it - t.columns.begin()) : slide + 1;
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, std::int64_t>> calls;
  std::map<std::string, std::pair<double, std::int64_t>> sums;
  bool numeric = true;
  for (const auto& r : t.rows) {
    if (!calls.count(r[slide])) order.push_back(r[slide]);
    ++calls[r[slide]][r[score]];
    char* end = nullptr;
    const double v = std::strtod(r[score].c_str(), &end);
    numeric = numeric && !r[score].empty() && *end == '\0';
    sums[r[slide]].first += v, ++sums[r[slide]].second;
  }
  std::string out =
      "<table class=\"slides\">\n" +
      row({"slide", "samples",
           numeric ? "mean " + esc(t.columns[score]) : "call (share of its samples)", "heatmap"},
          true);
  for (const auto& id : order) {
    const auto& [sum, n] = sums[id];
    std::string call;
    if (numeric) {
      call = text_of(json(sum / static_cast<double>(n)));
    } else {
      const auto best =
          std::max_element(calls[id].begin(), calls[id].end(),
                           [](const auto& a, const auto& b) { return a.second < b.second; });
      char share[32];
      std::snprintf(share, sizeof share, " (%.0f%%)",
                    100.0 * static_cast<double>(best->second) / static_cast<double>(n));
      call = esc(best->first) + share;
    }
    const std::string png = "heatmaps/" + id + ".png";
    const std::string img = util::exists(util::join_path(dir, png))
                                ? "<a href=\"" + esc(png) + "\"><img src=\"" + esc(png) +
                                      "\" width=\"240\" alt=\"heatmap of " + esc(id) + "\"></a>"
                                : "–";
    out += row({esc(id), std::to_string(n), call, img});
  }
  return out + "</table>\n";
}

// The labels table of the run's dataset (dataset.json's labels), key -> label; empty when the
// dataset, its table or a label column is gone.
std::map<std::string, std::string> known_labels(const json& run) {
  std::map<std::string, std::string> out;
  try {
    const std::string path =
        util::join_path(run.at("dataset").at("path").get<std::string>(), "dataset.json");
    const json labels = json::parse(util::read_file(path)).at("labels");
    if (!labels.value("label_column", json()).is_string()) return out;
    const auto table = io::read_table(labels.at("path").get<std::string>());
    const std::size_t key = table.column(labels.at("key_column").get<std::string>());
    const std::size_t label = table.column(labels.at("label_column").get<std::string>());
    for (const auto& r : table.rows) out.emplace(r[key], r[label]);
  } catch (const std::exception&) {
    out.clear();  // no labels known: the page says so
  }
  return out;
}

// Classification: the metrics with 95% intervals (1000 resamples of the slides) where the
// run's labels table names every sample's label (by its key, else its slide); "" otherwise.
std::string known_label_metrics(const io::Table& t, const json& run) {
  const auto task = run_task(run);
  if (!task->scores_known_labels() || t.rows.empty()) return "";
  const auto labels = known_labels(run);
  if (labels.empty()) return "";
  OutOfFold table{{"label"}, {}};
  std::vector<std::size_t> copy;
  for (std::size_t c = 0; c < t.columns.size(); ++c)
    if (t.columns[c] == "prediction" || t.columns[c].rfind("logit_", 0) == 0)
      table.columns.push_back(t.columns[c]), copy.push_back(c);
  SampleGroups groups{"slide", {}};
  const std::size_t sample = t.column("sample"), slide = t.column("slide");
  for (const auto& r : t.rows) {
    auto it = labels.find(r[sample]);
    if (it == labels.end()) it = labels.find(r[slide]);
    if (it == labels.end()) return "";
    std::vector<std::string> row{it->second};
    for (const auto c : copy) row.push_back(r[c]);
    table.rows.push_back(std::move(row));
    groups.of.push_back(r[slide]);
  }
  const std::uint64_t seed = run.value("options", json::object()).value("seed", std::uint64_t{0});
  json intervals;
  try {
    intervals = metric_intervals(task->statistics(table), table, groups, 1000, seed);
  } catch (const std::exception&) {
    return "";  // a label the run does not know: no metrics
  }
  json estimates = json::object();
  for (const auto& [name, m] : intervals["metrics"].items()) estimates[name] = m["estimate"];
  return "<h2>Metrics</h2>\n<p>Every sample's label is in the run's labels table: the metrics "
         "of these predictions. Slides the run trained on make them optimistic.</p>\n" +
         metrics_table(estimates, intervals);
}

}  // namespace

// The page names the run, not the output directory: a prediction resumed into another
// directory publishes the same bytes as one uninterrupted run (predict_test's resume check).
void write_predict_report(const std::string& dir, const std::string& run_dir, const json& run) {
  const auto table = io::read_table(util::join_path(dir, "predictions.csv"));
  std::string body = "<p>The run <a href=\"" +
                     esc(util::join_path(util::absolute_path(run_dir), "report.html")) + "\">" +
                     esc(util::absolute_path(run_dir)) + "</a> applied to " +
                     std::to_string(table.rows.size()) + " samples.</p>\n";
  body += "<h2>Task</h2>\n<p>" + task_text(run.value("task", json::object())) + ".</p>\n";
  body += "<h2>Per slide</h2>\n" + slide_rows(dir, table);
  const std::string metrics = known_label_metrics(table, run);
  body += !metrics.empty() ? metrics
                           : "<p>No metrics: the run's labels table does not name every sample's "
                             "label (or the task is not classification); the run's page has its "
                             "validation metrics.</p>\n";
  body += "<h2>Files</h2>\n<ul>\n" + link(dir, "predictions.csv", "one row per sample") +
          link(dir, "attention.csv", "each tile's attention in its bag") +
          link(dir, "heatmaps", "a PNG and a QuPath GeoJSON per slide") + "</ul>\n";
  util::write_file_atomic(util::join_path(dir, "report.html"),
                          page("mltool prediction with run " + base_name(run_dir), body));
}

void write_run_report(const std::string& dir, const json& run) {
  const json& result = run.value("result", json::object());
  const json& dataset = run.at("dataset");
  std::string body = "<p>Status <b>" + esc(run.value("status", "?")) + "</b>; " +
                     esc(run.value("created_by", "")) + ".</p>\n";
  body +=
      "<h2>Task and data</h2>\n<p>Task: " + task_text(run.value("task", json::object())) +
      ".</p>\n<table>\n" + row({"dataset", esc(dataset.value("path", ""))}) +
      row({"unit", esc(dataset.value("unit", ""))}) +
      row({"training split", esc(dataset.value("train_split", "")) + " (" +
                                 text_of(dataset.value("train_samples", json())) + " samples)"}) +
      row({"validation split", esc(dataset.value("val_split", "")) + " (" +
                                   text_of(dataset.value("val_samples", json())) + " samples)"}) +
      "</table>\n";
  body += "<h2>Model</h2>\n" + key_values(run.value("spec", json::object()));
  body += "<h2>Options</h2>\n" + key_values(run.value("options", json::object()));
  body += "<h2>Validation metrics</h2>\n";
  const json validation = result.is_object() ? result.value("validation", json()) : json();
  body += validation.is_object() ? metrics_table(validation, result.value("intervals", json()))
                                 : "<p>None: the run did not finish.</p>\n";
  if (result.is_object() && result.contains("charts"))
    body += "<h2>Charts</h2>\n" + charts(dir, result["charts"]);
  body += "<h2>Files</h2>\n<ul>\n" + link(dir, "predictions.csv", "the validation predictions") +
          link(dir, "metrics.jsonl", "the metrics of every step and epoch") +
          link(dir, "model.safetensors", "the final weights") +
          link(dir, "run.json", "everything above, as JSON") + "</ul>\n";
  util::write_file_atomic(util::join_path(dir, "report.html"),
                          page("mltool run " + base_name(dir), body));
}

void write_cv_report(const std::string& dir, const json& cv) {
  std::string body = "<p>" + std::to_string(cv.value("folds", 0)) + "-fold cross-validation; " +
                     esc(cv.value("created_by", "")) + ".</p>\n";
  body += "<h2>Task and data</h2>\n<p>Task: " + task_text(cv.value("task", json::object())) +
          ".</p>\n<p>Dataset: " + esc(cv.value("dataset", "")) + "</p>\n";
  body += "<h2>Out-of-fold metrics</h2>\n";
  const json intervals = cv.value("intervals", json());
  if (intervals.is_object()) {
    json estimates = json::object();
    for (const auto& [name, m] : intervals["metrics"].items()) estimates[name] = m["estimate"];
    body += metrics_table(estimates, intervals);
  } else {
    body += "<p>No intervals (--bootstrap 0).</p>\n";
  }
  // Per fold: each metric, then the mean and sd over the folds.
  const json& mean = cv.at("mean");
  std::vector<std::string> names;
  for (const auto& [name, v] : mean.items()) names.push_back(name);
  std::vector<std::string> head = {"fold", "best epoch"};
  head.insert(head.end(), names.begin(), names.end());
  body += "<h2>Per fold</h2>\n<table class=\"folds\">\n" + row(head, true);
  for (const auto& f : cv.at("per_fold")) {
    const std::string run = f.value("run", "");
    std::vector<std::string> cells = {
        "<a href=\"" + esc(run) + "/report.html\">" + esc(run) + "</a>",
        text_of(f.value("best_epoch", json()))};
    for (const auto& n : names) cells.push_back(esc(text_of(f["validation"].value(n, json()))));
    body += row(cells);
  }
  std::vector<std::string> summary = {"mean ± sd", ""};
  for (const auto& n : names)
    summary.push_back(fixed3(mean[n]) + " ± " + fixed3(cv.at("sd").value(n, json())));
  body += row(summary) + "</table>\n";
  body += "<h2>Charts</h2>\n" + charts(dir, cv.value("pictures", json::object()));
  body += "<h2>Files</h2>\n<ul>\n" +
          link(dir, "oof_predictions.csv",
               "every sample predicted by the fold that did not train on it") +
          link(dir, "cv.json", "everything above, as JSON") + "</ul>\n";
  util::write_file_atomic(util::join_path(dir, "report.html"),
                          page("mltool cross-validation " + base_name(dir), body));
}

}  // namespace mltool::train
