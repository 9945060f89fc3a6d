// report.html: one self-contained page per run directory and per cross-validation (CV/): the
// task, data, model and options, the metrics with their 95% intervals, the charts as inline
// SVG, per-fold rows (CV), and links to the predictions. No network, no script: it opens from
// a file in any browser and prints. docs/train.md#reporthtml. Plain data in (run.json,
// cv.json, the files beside them): this module knows no task, model or command.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mltool::io {
struct Table;
}

namespace mltool::report {

/// The names of `metrics` (a run's validation metrics, cv.json's mean) whose values are numbers
/// or null, in the order the reports and the log show them: val_loss, the task's own, then
/// the per-label ones (val_auc_LABEL) in `task`'s label order (--label-columns').
std::vector<std::string> metric_order(const nlohmann::json& metrics, const nlohmann::json& task);

/// Slides predicted inside a run directory (train --view: RUN/validation/, predict's output):
/// its predictions.csv and each slide's viewer page; paths relative to the run.
struct PredictedSlides {
  std::string dir;                            ///< the prediction: "validation"
  const io::Table* predictions = nullptr;     ///< its predictions.csv, as read back
  std::map<std::string, std::string> viewer;  ///< slide id → its page
};

/// Writes DIR/report.html (atomically) from `run` (the run.json just written) and the charts
/// in DIR that run.json's result names; with `slides`, a table of them (as a prediction's
/// page has), each id linking to its page.
void write_run_report(const std::string& dir, const nlohmann::json& run,
                      const PredictedSlides* slides = nullptr);

/// Writes CV/report.html from `cv` (cv.json) and the charts in CV/ it names; each fold links
/// to its own report.
void write_cv_report(const std::string& dir, const nlohmann::json& cv);

/// Writes PRED/report.html after `mltool predict` wrote PRED/predictions.csv (`predictions`,
/// as read back): the run (linked
/// to its page) and task, per slide its samples and call (classification: the majority of its
/// samples' predicted labels and their share; else the mean prediction or risk) with its
/// heatmap's thumbnail (linked, not inlined: heatmaps are large), links to the files; and
/// `known_metrics` (intervals as run.json's result.intervals has them, computed by
/// train::TrainedRun::known_label_metrics) where not null: the metrics of predictions whose
/// labels the run's labels table knows. Each slide's id links to its page of a viewer site
/// (`viewer`: slide id → the page's path relative to DIR; predict --view).
void write_predict_report(const std::string& dir, const std::string& run_dir,
                          const nlohmann::json& run, const io::Table& predictions,
                          const nlohmann::json& known_metrics,
                          const std::map<std::string, std::string>& viewer);

}  // namespace mltool::report
