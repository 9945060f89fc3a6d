// The charts of a classification run (its validation predictions) or cross-validation (the
// out-of-fold predictions): ROC and precision–recall curves of the last label with 95% bands
// by bootstrap over groups (two labels; more labels: each label's one-vs-rest curves, no
// band), a calibration plot (two labels) and the confusion matrix at the predicted label (the
// highest probability: 0.5 with two labels), computed here and drawn by
// mltool/report/class_charts.hpp. Internal to lib/train.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cv_plots.hpp"
#include "intervals.hpp"
#include "tasks/task_predictions.hpp"

namespace mltool::train {

/// Writes roc, pr, calibration (two labels) and confusion (.png and .svg) into `dir` from
/// `table` (predictions.csv's columns: label, prediction, logit_LABEL...) and returns what
/// each reports: {"roc": {"file", "svg", "auc"}, "pr": {"file", "svg", "auprc", "prevalence"}
/// (more labels: "auc" and "auprc" are {LABEL: value}, no prevalence),
/// "calibration": {"file", "svg", "bins": [{"low", "high", "samples", "mean_predicted",
/// "fraction_positive"}]}, "confusion": {"file", "svg", "labels", "matrix"}} (matrix[true]
/// [predicted] counts). The bands come from `resamples` resamples of `groups` drawn from
/// bootstrap_seed(seed) (none with 0). {} for other tasks.
nlohmann::json draw_classification_charts(const std::string& dir, const nlohmann::json& task,
                                          const OutOfFold& table, const SampleGroups& groups,
                                          int resamples, std::uint64_t seed);

/// Multilabel (run.json's "task" as `task`, `table` with label_L and prob_L columns): roc.png
/// and roc.svg in `dir`, one ROC curve per label over the samples where it is observed, each
/// label's AUC and counts in the legend; returns {"roc": {"file", "svg", "auc": {LABEL: value
/// or null}}}; {} for an empty table.
nlohmann::json draw_multilabel_charts(const std::string& dir, const nlohmann::json& task,
                                      const OutOfFold& table);

}  // namespace mltool::train
