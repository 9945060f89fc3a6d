// Two tasks' predictions read back from their predictions tables' columns, for their
// statistics (Task::statistics) and charts (class_plots.hpp): classification's in
// classification.cpp, multilabel's in multilabel.cpp. Internal to lib/train.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../intervals.hpp"

namespace mltool::train {

/// A classification's predictions read from predictions.csv's columns.
struct ClassPredictions {
  std::vector<std::string> names;              ///< the labels, by id
  std::vector<std::int64_t> label, predicted;  ///< ids per sample
  std::vector<double> score;  ///< two labels: the last label's probability (softmax of logits)
  /// More than two labels: prob[k][i], label k's probability of sample i (softmax of logits).
  std::vector<std::vector<double>> prob;
};
ClassPredictions class_predictions(const nlohmann::json& task, const OutOfFold& table);

/// A multilabel task's predictions read from predictions.csv's columns (label_L, prob_L).
struct MultilabelPredictions {
  std::vector<std::string> names;                ///< the labels, in --label-columns' order
  std::vector<std::vector<std::int64_t>> truth;  ///< truth[l][i]: 1, 0, or -1 where missing
  std::vector<std::vector<double>> prob;         ///< prob[l][i]: label l's probability
  /// Label l's ROC AUC over the samples `idx` where it is observed; NaN unless both occur.
  double auc(std::size_t l, const std::vector<std::size_t>& idx) const;
};
MultilabelPredictions multilabel_predictions(const nlohmann::json& task, const OutOfFold& table);

/// Per label of a multilabel task (run.json's "task" as `task`), in its order, what `table`
/// holds: [{"label", "positives", "negatives", "missing", "auc"}] (auc null unless both
/// values occur).
nlohmann::json multilabel_counts(const nlohmann::json& task, const OutOfFold& table);

}  // namespace mltool::train
