// report.html of a run, a cross-validation and a prediction (pages.hpp): HTML written by hand, its
// every text escaped and every link URL-encoded by util/html.hpp, the charts' SVG files inlined
// without their XML declaration.
#include "mltool/report/pages.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "mltool/io/table.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/html.hpp"

namespace mltool::report {
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

using util::href;
using util::html_attribute;
using util::html_text;

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
  for (const auto& [k, v] : object.items()) out += row({html_text(k), html_text(text_of(v))});
  return out + "</table>\n";
}

std::string link(const std::string& dir, const std::string& file, const std::string& what) {
  if (!util::exists(util::join_path(dir, file))) return "";
  return "<li><a href=\"" + href(file) + "\">" + html_text(file) + "</a>: " + html_text(what) +
         "</li>\n";
}

std::string fold_cell(const json& validation, const std::string& name,
                      const std::vector<std::string>& labels);
std::vector<std::string> task_labels(const json& task);

// The metrics in metric_order: estimate, and the 95% interval where `intervals` has one.
std::string metrics_table(const json& metrics, const json& intervals, const json& task) {
  const json by_name = intervals.is_object() ? intervals.value("metrics", json::object()) : json();
  std::string out = "<table class=\"metrics\">\n" + row({"metric", "value", "95% interval"}, true);
  for (const auto& name : metric_order(metrics, task)) {
    std::string interval = "";
    if (by_name.is_object() && by_name.contains(name)) {
      const json& m = by_name[name];
      interval = m.contains("not_estimable")
                     ? "not estimable: " + html_text(m["not_estimable"].get<std::string>())
                 : m["low"].is_number() ? fixed3(m["low"]) + " – " + fixed3(m["high"])
                                        : "–";
    }
    out += "<tr><td>" + html_text(name) + "</td><td class=\"n\">" +
           fold_cell(metrics, name, task_labels(task)) + "</td><td class=\"n\">" + interval +
           "</td></tr>\n";
  }
  out += "</table>\n";
  if (intervals.is_object())
    out += "<p>Intervals: " + std::to_string(intervals.value("resamples", 0)) +
           " bootstrap resamples of " + std::to_string(intervals.value("groups", 0)) + " " +
           html_text(intervals.value("unit", "group")) +
           "s (percentiles 2.5 and 97.5), seeded: a rerun gives the same." +
           (intervals.contains("minimum_groups")
                ? " None from fewer than " + intervals["minimum_groups"].dump() +
                      " groups, or where a label occurs in too few of them."
                : "") +
           "</p>\n";
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
    out += "<figure class=\"chart\" id=\"chart-" + html_attribute(name) + "\">\n" +
           svg.substr(start) + "<figcaption>" + html_text(name) + ": <a href=\"" + href(svg_file) +
           "\">SVG</a>, <a href=\"" + href(picture.value("file", "")) +
           "\">PNG</a></figcaption>\n</figure>\n";
  }
  return out;
}

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
         html_text(title) + "</title>\n" + kStyle + "</head>\n<body>\n<h1>" + html_text(title) +
         "</h1>\n" + body + "</body>\n</html>\n";
}

std::string task_text(const json& task) {
  // The callers' task is resolved (records::manifest_task): run.json and cv.json as written,
  // or TrainedRun's manifest.
  std::string out = html_text(task.value("kind", "unknown"));
  if (task.contains("loss")) out += ", loss " + html_text(task["loss"].get<std::string>());
  if (task.contains("labels") && task["labels"].is_array()) {
    std::string labels;
    for (const auto& l : task["labels"])
      labels += (labels.empty() ? "" : ", ") + l.get<std::string>();
    out += "; labels " + html_text(labels);
  }
  return out;
}

// The columns of predictions.csv a slide's row summarizes: prediction (classification,
// regression) or risk (survival), else every prob_LABEL (multilabel: each label's).
std::vector<std::size_t> score_columns(const io::Table& t) {
  for (const char* name : {"prediction", "risk"}) {
    const auto it = std::find(t.columns.begin(), t.columns.end(), name);
    if (it != t.columns.end()) return {static_cast<std::size_t>(it - t.columns.begin())};
  }
  std::vector<std::size_t> out;
  for (std::size_t c = 0; c < t.columns.size(); ++c)
    if (t.columns[c].rfind("prob_", 0) == 0) out.push_back(c);
  if (out.empty()) out.push_back(t.column("slide") + 1);
  return out;
}

// One slide's cell of a score column: the mean (numbers) or the majority call with its share.
std::string slide_cell(const std::map<std::string, std::int64_t>& calls, double sum, std::int64_t n,
                       bool numeric) {
  if (numeric) return text_of(json(sum / static_cast<double>(n)));
  const auto best = std::max_element(
      calls.begin(), calls.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  char share[32];
  std::snprintf(share, sizeof share, " (%.0f%%)",
                100.0 * static_cast<double>(best->second) / static_cast<double>(n));
  return html_text(best->first) + share;
}

// Per slide of predictions.csv: its samples, and per score column (score_columns) the majority
// call with its share (classification: a non-numeric prediction column) or the mean; its id
// links to its page in `viewer` where it has one.
std::string slide_rows(const std::string& dir, const std::string& prefix, const io::Table& t,
                       const std::map<std::string, std::string>& viewer) {
  const std::size_t slide = t.column("slide");
  const auto scores = score_columns(t);
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::map<std::string, std::int64_t>>> calls;
  std::map<std::string, std::vector<double>> sums;
  std::map<std::string, std::int64_t> samples;
  std::vector<bool> numeric(scores.size(), true);
  for (const auto& r : t.rows) {
    if (!samples.count(r[slide])) order.push_back(r[slide]);
    ++samples[r[slide]];
    calls[r[slide]].resize(scores.size());
    sums[r[slide]].resize(scores.size());
    for (std::size_t k = 0; k < scores.size(); ++k) {
      const std::string& cell = r[scores[k]];
      ++calls[r[slide]][k][cell];
      char* end = nullptr;
      sums[r[slide]][k] += std::strtod(cell.c_str(), &end);
      numeric[k] = numeric[k] && !cell.empty() && *end == '\0';
    }
  }
  std::vector<std::string> head{"slide", "samples"};
  for (std::size_t k = 0; k < scores.size(); ++k)
    head.push_back(numeric[k] ? "mean " + html_text(t.columns[scores[k]])
                              : "call (share of its samples)");
  head.push_back("heatmap");
  std::string out = "<table class=\"slides\">\n" + row(head, true);
  for (const auto& id : order) {
    const auto page = viewer.find(id);
    std::vector<std::string> cells{
        page == viewer.end() ? html_text(id)
                             : "<a href=\"" + href(page->second) + "\">" + html_text(id) + "</a>",
        std::to_string(samples[id])};
    for (std::size_t k = 0; k < scores.size(); ++k)
      cells.push_back(slide_cell(calls[id][k], sums[id][k], samples[id], numeric[k]));
    const std::string png = prefix + "heatmaps/" + id + ".png";
    cells.push_back(util::exists(util::join_path(dir, png))
                        ? "<a href=\"" + href(png) + "\"><img src=\"" + href(png) +
                              "\" width=\"240\" alt=\"heatmap of " + html_attribute(id) + "\"></a>"
                        : "–");
    out += row(cells);
  }
  return out + "</table>\n";
}

// The metrics of predictions whose labels the run's labels table knows (`intervals`: their
// estimates and 95% intervals); "" when there are none.
std::string known_label_metrics(const json& intervals, const json& run) {
  if (!intervals.is_object()) return "";
  json estimates = json::object();
  for (const auto& [name, m] : intervals["metrics"].items()) estimates[name] = m["estimate"];
  return "<h2>Metrics</h2>\n<p>Every sample's label is in the run's labels table: the metrics "
         "of these predictions. Slides the run trained on make them optimistic.</p>\n" +
         metrics_table(estimates, intervals, run.value("task", json::object()));
}

// Label `counts` (Task::label_counts) as "P+ / N− / M missing".
std::string counts_text(const json& c) {
  return std::to_string(c.value("positives", 0)) + "+ / " +
         std::to_string(c.value("negatives", 0)) + "− / " + std::to_string(c.value("missing", 0)) +
         " missing";
}

// A fold's metric cell: the value, "not scorable" where the fold cannot score it, and for
// val_auc_mean the labels it leaves out.
std::string fold_cell(const json& validation, const std::string& name,
                      const std::vector<std::string>& labels) {
  const json v = validation.value(name, json());
  if (v.is_null()) return "not scorable";
  std::string out = html_text(text_of(v));
  const json averaged = validation.value(name + "_labels", json());
  if (!averaged.is_string()) return out;
  std::string left_out;
  const std::string list = "," + averaged.get<std::string>() + ",";
  for (const auto& l : labels)
    if (list.find("," + l + ",") == std::string::npos)
      left_out += (left_out.empty() ? "" : ", ") + l;
  return left_out.empty() ? out : out + " (without " + html_text(left_out) + ")";
}

// The labels of run.json's or cv.json's task.
std::vector<std::string> task_labels(const json& task) {
  const json labels = task.value("labels", json());
  return labels.is_array() ? labels.get<std::vector<std::string>>() : std::vector<std::string>{};
}

// A run's per-label section: each label's counts in the validation split and its AUC.
std::string run_label_counts(const json& counts) {
  std::string out = "<h2>Per label (validation split)</h2>\n<table class=\"labels\">\n" +
                    row({"label", "positives", "negatives", "missing", "AUC"}, true);
  for (const auto& c : counts)
    out += row({html_text(c.value("label", "")), std::to_string(c.value("positives", 0)),
                std::to_string(c.value("negatives", 0)), std::to_string(c.value("missing", 0)),
                c.value("auc", json()).is_number() ? fixed3(c["auc"]) : "not scorable"});
  return out + "</table>\n";
}

// A cross-validation's per-label section (cv.json's per_label): out-of-fold counts, AUC with
// its interval, the folds' mean and sd over the folds that score the label; then each fold's
// validation counts.
std::string cv_label_section(const json& cv) {
  const json& labels = cv.at("per_label");
  std::string out =
      "<h2>Per label</h2>\n<p>Out of fold: every sample once, predicted by the fold that did "
      "not train on it. A fold whose validation split holds one value of a label only cannot "
      "score it.</p>\n<table class=\"labels\">\n" +
      row({"label", "positives", "negatives", "missing", "out-of-fold AUC", "95% interval",
           "fold mean ± sd", "folds scored"},
          true);
  for (const auto& l : labels) {
    const std::string interval =
        l.contains("auc_not_estimable")
            ? "not estimable: " + html_text(l["auc_not_estimable"].get<std::string>())
        : l.value("auc_low", json()).is_number()
            ? fixed3(l["auc_low"]) + " – " + fixed3(l["auc_high"])
            : "–";
    out += row({html_text(l.value("label", "")), std::to_string(l.value("positives", 0)),
                std::to_string(l.value("negatives", 0)), std::to_string(l.value("missing", 0)),
                l.value("auc", json()).is_number() ? fixed3(l["auc"]) : "not scorable", interval,
                fixed3(l.value("fold_mean", json())) + " ± " + fixed3(l.value("fold_sd", json())),
                std::to_string(l.value("folds_scored", 0)) + " of " +
                    std::to_string(cv.value("folds", 0))});
  }
  out += "</table>\n<h3>Validation counts per fold</h3>\n<table class=\"fold-labels\">\n";
  std::vector<std::string> head{"fold"};
  for (const auto& l : labels) head.push_back(html_text(l.value("label", "")));
  out += row(head, true);
  for (const auto& f : cv.at("per_fold")) {
    std::vector<std::string> cells{html_text(f.value("run", ""))};
    for (const auto& c : f.value("label_counts", json::array())) cells.push_back(counts_text(c));
    out += row(cells);
  }
  return out + "</table>\n";
}

// Per fold: each metric (every metric any fold reports, in metric_order; "not scorable"
// where a fold cannot score it), then the mean and sd over the folds that score it.
std::string fold_table(const json& cv) {
  const json task = cv.value("task", json::object());
  json reported = json::object();
  for (const auto& f : cv.at("per_fold"))
    for (const auto& [name, v] : f.at("validation").items()) reported[name] = v;
  const auto names = metric_order(reported, task);
  const auto labels = task_labels(task);
  std::vector<std::string> head = {"fold", "best epoch"};
  for (const auto& n : names) head.push_back(html_text(n));
  std::string out = "<h2>Per fold</h2>\n<table class=\"folds\">\n" + row(head, true);
  for (const auto& f : cv.at("per_fold")) {
    const std::string run = f.value("run", "");
    std::vector<std::string> cells = {
        "<a href=\"" + href(run + "/report.html") + "\">" + html_text(run) + "</a>",
        text_of(f.value("best_epoch", json()))};
    for (const auto& n : names) cells.push_back(fold_cell(f.at("validation"), n, labels));
    out += row(cells);
  }
  const json& mean = cv.at("mean");
  const json scored = cv.value("scored_folds", json::object());
  std::vector<std::string> summary = {"mean ± sd", ""};
  for (const auto& n : names)
    summary.push_back(!mean.contains(n)
                          ? "not scorable in any fold"
                          : fixed3(mean[n]) + " ± " + fixed3(cv.at("sd").value(n, json())) +
                                (scored.contains(n)
                                     ? " (" + scored[n].dump() + " of " +
                                           std::to_string(cv.value("folds", 0)) + " folds)"
                                     : ""));
  return out + row(summary) + "</table>\n";
}

// " (tile-level)" for a run whose samples are tiles: its metrics score each tile on its own.
std::string level_of(const json& run) {
  return run.at("dataset").value("unit", "") == "tile" ? " (tile-level)" : "";
}

// The options that apply to the run: --huber-delta only with --loss huber, --bins only with
// --loss nll, --momentum only with --optimizer sgd (run.json keeps them all).
json applicable_options(const json& options, const json& task) {
  struct Rule {
    const char *option, *key, *value;
  };
  static const Rule kOnlyWith[] = {
      {"huber_delta", "loss", "huber"}, {"bins", "loss", "nll"}, {"momentum", "optimizer", "sgd"}};
  json out = options;
  for (const auto& r : kOnlyWith) {
    const json& where = task.contains(r.key) ? task : options;
    if (out.contains(r.option) && where.value(r.key, json()) != json(r.value)) out.erase(r.option);
  }
  return out;
}

// The validation metrics of the best epoch (metrics.jsonl's line of result.best_epoch): the
// weights predict uses by default. "" when the run has none.
std::string best_epoch_metrics(const std::string& dir, const json& run, const json& result) {
  const json best = result.value("best_epoch", json());
  const std::string path = util::join_path(dir, "metrics.jsonl");
  if (!best.is_number_integer() || best.get<int>() < 1 || !util::exists(path)) return "";
  const std::string text = util::read_file(path);
  json line;
  for (std::size_t at = 0; at < text.size();) {
    const auto end = std::min(text.find('\n', at), text.size());
    const json l = json::parse(text.substr(at, end - at), nullptr, false);
    if (l.is_object() && l.value("event", "") == "epoch" && l.value("epoch", json()) == best)
      line = l;
    at = end + 1;
  }
  if (!line.is_object()) return "";
  json metrics = json::object();
  for (const auto& [name, v] : line.items())
    if (name.rfind("val_", 0) == 0) metrics[name] = v;
  const std::string monitor = run.value("options", json::object()).value("monitor", "");
  return "<h2>Validation metrics, best epoch" + level_of(run) + "</h2>\n<p>Epoch " + best.dump() +
         " of " + text_of(result.value("epochs", json())) + ", the best by " + html_text(monitor) +
         ": the weights predict uses by default (best.safetensors).</p>\n" +
         metrics_table(metrics, json(), run.value("task", json::object()));
}

}  // namespace

std::vector<std::string> metric_order(const json& metrics, const json& task) {
  const auto labels = task_labels(task);
  std::vector<std::string> plain;
  std::vector<std::vector<std::string>> of_label(labels.size());
  for (const auto& [name, value] : metrics.items()) {
    if (!value.is_number() && !value.is_null()) continue;
    std::size_t l = 0;
    while (l < labels.size() && !(name.size() > labels[l].size() + 1 &&
                                  name.compare(name.size() - labels[l].size() - 1,
                                               std::string::npos, "_" + labels[l]) == 0))
      ++l;
    (l < labels.size() ? of_label[l] : plain).push_back(name);
  }
  std::stable_partition(plain.begin(), plain.end(),
                        [](const std::string& n) { return n == "val_loss"; });
  for (const auto& names : of_label) plain.insert(plain.end(), names.begin(), names.end());
  return plain;
}

// The page names the run, not the output directory: a prediction resumed into another
// directory publishes the same bytes as one uninterrupted run (predict_test's resume check).
void write_predict_report(const std::string& dir, const std::string& run_dir, const json& run,
                          const io::Table& table, const json& known_metrics,
                          const std::map<std::string, std::string>& viewer) {
  std::string body = "<p>The run <a href=\"" +
                     href(util::join_path(util::absolute_path(run_dir), "report.html")) + "\">" +
                     html_text(util::absolute_path(run_dir)) + "</a> applied to " +
                     std::to_string(table.rows.size()) + " samples.</p>\n";
  body += "<h2>Task</h2>\n<p>" + task_text(run.value("task", json::object())) + ".</p>\n";
  body += "<h2>Per slide</h2>\n";
  if (!viewer.empty())
    body +=
        "<p>A slide's id opens it in the viewer, at every level with its heatmaps (<a "
        "href=\"view/index.html\">all slides</a>).</p>\n";
  body += slide_rows(dir, "", table, viewer);
  const std::string metrics = known_label_metrics(known_metrics, run);
  body += !metrics.empty() ? metrics
                           : "<p>No metrics: the run's labels table does not name every sample's "
                             "label (or the task is not classification); the run's page has its "
                             "validation metrics.</p>\n";
  body += "<h2>Files</h2>\n<ul>\n" + link(dir, "predictions.csv", "one row per sample") +
          link(dir, "attention.csv", "each tile's attention in its bag") +
          link(dir, "heatmaps", "a PNG and a QuPath GeoJSON per slide") +
          (viewer.empty() ? "" : link(dir, "view/index.html", "the slides' viewer (mltool view)")) +
          "</ul>\n";
  util::write_file_atomic(util::join_path(dir, "report.html"),
                          page("mltool prediction with run " + base_name(run_dir), body));
}

// train --view: the run's validation slides, predicted inside it, each linked to its page.
std::string predicted_slides(const std::string& dir, const PredictedSlides& slides) {
  const std::string prefix = slides.dir + "/";
  return "<h2>Validation slides</h2>\n<p>The validation split's slides predicted with the final "
         "weights (<a href=\"" +
         href(prefix + "report.html") +
         "\">their page</a>); a slide's id opens it in the viewer, at every level with its "
         "heatmaps (<a href=\"" +
         href(prefix + "view/index.html") + "\">all slides</a>).</p>\n" +
         slide_rows(dir, prefix, *slides.predictions, slides.viewer);
}

void write_run_report(const std::string& dir, const json& run, const PredictedSlides* slides) {
  const json& result = run.value("result", json::object());
  const json& dataset = run.at("dataset");
  std::string body = "<p>Status <b>" + html_text(run.value("status", "?")) + "</b>; " +
                     html_text(run.value("created_by", "")) + ".</p>\n";
  body +=
      "<h2>Task and data</h2>\n<p>Task: " + task_text(run.value("task", json::object())) +
      ".</p>\n<table>\n" + row({"dataset", html_text(dataset.value("path", ""))}) +
      row({"unit", html_text(dataset.value("unit", ""))}) +
      row({"training split", html_text(dataset.value("train_split", "")) + " (" +
                                 text_of(dataset.value("train_samples", json())) + " samples)"}) +
      row({"validation split", html_text(dataset.value("val_split", "")) + " (" +
                                   text_of(dataset.value("val_samples", json())) + " samples)"}) +
      "</table>\n";
  body += "<h2>Model</h2>\n" + key_values(run.value("spec", json::object()));
  body += "<h2>Options</h2>\n" +
          key_values(applicable_options(run.value("options", json::object()),
                                        run.value("task", json::object()))) +
          "<p>Options that do not apply to this run are left out; run.json has them all.</p>\n";
  if (dataset.value("unit", "") == "tile")
    body +=
        "<p>Tile-level metrics below: each tile is a sample, scored on its own; tiles of one "
        "slide are not independent, and a slide-level figure needs bags (pack --unit "
        "bag).</p>\n";
  body += best_epoch_metrics(dir, run, result);
  body += "<h2>Validation metrics, final weights" + level_of(run) +
          "</h2>\n<p>The last epoch's weights "
          "(model.safetensors, predict --weights final); the intervals, counts and charts are "
          "theirs.</p>\n";
  const json validation = result.is_object() ? result.value("validation", json()) : json();
  body += validation.is_object() ? metrics_table(validation, result.value("intervals", json()),
                                                 run.value("task", json::object()))
                                 : "<p>None: the run did not finish.</p>\n";
  if (result.is_object() && result.contains("label_counts"))
    body += run_label_counts(result["label_counts"]);
  const std::string drawn =
      result.is_object() && result.contains("charts") ? charts(dir, result["charts"]) : "";
  if (!drawn.empty()) body += "<h2>Charts</h2>\n" + drawn;
  if (slides && slides->predictions) body += predicted_slides(dir, *slides);
  body += "<h2>Files</h2>\n<ul>\n" + link(dir, "predictions.csv", "the validation predictions") +
          link(dir, "metrics.jsonl", "the metrics of every step and epoch") +
          link(dir, "model.safetensors", "the final weights") +
          link(dir, "run.json", "everything above, as JSON") + "</ul>\n";
  util::write_file_atomic(util::join_path(dir, "report.html"),
                          page("mltool run " + base_name(dir), body));
}

void write_cv_report(const std::string& dir, const json& cv) {
  std::string body = "<p>" + std::to_string(cv.value("folds", 0)) + "-fold cross-validation; " +
                     html_text(cv.value("created_by", "")) + ".</p>\n";
  body += "<h2>Task and data</h2>\n<p>Task: " + task_text(cv.value("task", json::object())) +
          ".</p>\n<p>Dataset: " + html_text(cv.value("dataset", "")) + "</p>\n";
  body += "<h2>Out-of-fold metrics</h2>\n";
  const json task = cv.value("task", json::object());
  const json intervals = cv.value("intervals", json());
  if (intervals.is_object()) {
    json estimates = json::object();
    for (const auto& [name, m] : intervals["metrics"].items()) estimates[name] = m["estimate"];
    body += metrics_table(estimates, intervals, task);
  } else {
    body += "<p>No intervals (--bootstrap 0).</p>\n";
  }
  if (cv.contains("per_label")) body += cv_label_section(cv);
  body += fold_table(cv);
  const std::string drawn = charts(dir, cv.value("pictures", json::object()));
  if (!drawn.empty()) body += "<h2>Charts</h2>\n" + drawn;
  body += "<h2>Files</h2>\n<ul>\n" +
          link(dir, "oof_predictions.csv",
               "every sample predicted by the fold that did not train on it") +
          link(dir, "cv.json", "everything above, as JSON") + "</ul>\n";
  util::write_file_atomic(util::join_path(dir, "report.html"),
                          page("mltool cross-validation " + base_name(dir), body));
}

}  // namespace mltool::report
