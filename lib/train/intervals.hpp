// The 95% intervals of a run's validation metrics (run.json's result.intervals) and of a
// cross-validation's out-of-fold metrics (cv.json's intervals), by bootstrap over groups
// (mltool/train/bootstrap.hpp), computed from the predictions the run wrote. Internal to
// lib/train.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cv_plots.hpp"
#include "dataset.hpp"
#include "mltool/train/bootstrap.hpp"

namespace mltool::train {

/// What the bootstrap resamples: one group per sample, and what the groups are.
struct SampleGroups {
  std::string
      unit;  ///< the labels table's group column (a patient), else "slide" or the bag column
  std::vector<std::string> of;  ///< of[i]: sample i's group
};

/// The groups of the samples of `s`: the labels table's group column where the dataset has
/// one (looked up by the sample's key, then its slide, then its bag), else the sample's
/// slide (tile and image samples: the slide of the tile's key) or bag.
SampleGroups sample_groups(const DatasetInfo& data, const SplitSamples& s);

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

/// A metric `--bootstrap` puts an interval on: its name and how to compute it over any subset
/// of a predictions table's rows.
struct NamedStatistic {
  std::string name;
  Statistic statistic;
};

/// Each task's statistics (Task::statistics, run.json's "task" as `task`) of predictions
/// `table` (predictions.csv's columns, or oof_predictions.csv's): classification AUROC
/// (val_auc) and AUPRC (val_auprc) with two labels, balanced accuracy; multilabel each
/// label's AUROC (val_auc_LABEL) and their mean (val_auc_mean); regression R² (val_r2); survival
/// the C-index (val_c_index).
std::vector<NamedStatistic> classification_statistics(const nlohmann::json& task,
                                                      const OutOfFold& table);
std::vector<NamedStatistic> multilabel_statistics(const nlohmann::json& task,
                                                  const OutOfFold& table);
std::vector<NamedStatistic> regression_statistics(const OutOfFold& table);
std::vector<NamedStatistic> survival_statistics(const OutOfFold& table);

/// The intervals of `statistics` of predictions `table` (Task::statistics(table)):
/// {"level", "resamples", "seed", "unit", "groups", "metrics": {NAME: {"estimate", "low",
/// "high", "resamples"}}}; null when `resamples` is 0. `seed` is the run's --seed; the
/// resamples are drawn from bootstrap_seed(seed).
nlohmann::json metric_intervals(const std::vector<NamedStatistic>& statistics,
                                const OutOfFold& table, const SampleGroups& groups, int resamples,
                                std::uint64_t seed);

/// The bootstrap's generator seed for a run seeded `seed`: fixed, so a rerun gives the same
/// interval, and apart from the seeds of the weights and the sampler.
inline std::uint64_t bootstrap_seed(std::uint64_t seed) { return seed ^ 0x6d6c746f6f6c4349ULL; }

}  // namespace mltool::train
