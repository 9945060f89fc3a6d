// What a run learns to predict, in one place per task (lib/train/tasks/): the targets the feeds
// serve, the loss a step minimizes, the validation metrics and monitors, and the columns of
// predictions.csv. The loop, the memory modes and the exports call a Task and never branch on
// which one it is. docs/train.md#tasks. Internal to lib/train.
//
// Adding a task: a file in lib/train/tasks/ that defines it and its two factories (declared
// below), its line in kTasks (task.cpp), its kind in records::PackTask with its record codec
// (lib/records), any loss or monitor of its own in kLosses and kMonitors (train_options.cpp),
// docs/train.md#tasks. What differs between tasks elsewhere (predict's heatmaps and report
// page, the cv pictures and charts, the bootstrap intervals, run.json's result) is asked of
// the Task below, never decided by its kind.
#pragma once

#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cv_plots.hpp"
#include "dataset.hpp"
#include "intervals.hpp"
#include "mltool/train/step.hpp"
#include "mltool/train/train_job.hpp"
#include "mltool/train/trained_run.hpp"

namespace mltool::train {

class Task : public StepLoss, public TaskOutputs {
 public:
  /// run.json's "task": the kind, the loss and what predict needs to read the outputs (the
  /// labels; the time bins of the nll loss).
  virtual nlohmann::json describe() const = 0;
  /// The targets of every sample of `s`, on the CPU: int64 [N] (label ids) or float32 [N, W].
  /// Feeds serve rows of it as Batch::y.
  virtual torch::Tensor targets(const SplitSamples& s) const = 0;

  /// Moves what the loss holds (class weights) to the training device.
  virtual void to(const torch::Device& device) { (void)device; }

  // The step loss (StepLoss): per_sample(), loss_sum(), weight_sum(), loss(). Per-sample
  // losses: cross-entropy, MSE, Huber, nll; Cox couples the step's samples (its risk sets).
  /// Data parallel: the weight of sample i of the training split (rank_order's shares), or
  /// nothing when every sample weighs the same.
  virtual std::vector<double> sample_weights(const SplitSamples& s) const {
    (void)s;
    return {};
  }

  /// The validation metrics of `outputs` (CPU float32, N × outputs()) of split `s`: val_loss
  /// (the unweighted loss over the split) first, then the task's own.
  virtual nlohmann::json metrics(const torch::Tensor& outputs, const SplitSamples& s) const = 0;
  /// Whether metrics() reports `monitor`.
  virtual bool offers(Monitor monitor) const = 0;
  /// What training noticed about the loss, for run.json's result (Cox: the steps without an
  /// event, whose loss is zero); {} when nothing.
  virtual nlohmann::json training_notes() const { return nlohmann::json::object(); }

  // What predict needs of its outputs (TaskOutputs, mltool/train/trained_run.hpp): outputs(),
  // output_header(), output_row(), scores(), score_name(), label_names(), probabilities().

  /// Whether run.json's result records train_risk_median, the median of scores() over the
  /// training split (survival: the cut of the cv pictures' high- and low-risk halves).
  virtual bool records_train_median() const { return false; }
  /// The picture of `mltool train --folds all`'s out-of-fold predictions (cv_plots.hpp).
  virtual CvPicture cv_picture() const { return CvPicture::none; }

  /// The metrics `--bootstrap` puts 95% intervals on, computed from the predictions table this
  /// task writes (train's predictions.csv, cross-validation's oof_predictions.csv).
  virtual std::vector<NamedStatistic> statistics(const OutOfFold& table) const = 0;
  /// train's and cross-validation's charts of that table, drawn into `dir` (classification:
  /// confusion, ROC, PR, calibration; class_plots.hpp); {} for a task that draws none.
  virtual nlohmann::json draw_charts(const std::string& dir, const OutOfFold& table,
                                     const SampleGroups& groups, int resamples,
                                     std::uint64_t seed) const {
    (void)dir, (void)table, (void)groups, (void)resamples, (void)seed;
    return nlohmann::json::object();
  }
  /// Per label of `table` (predictions.csv's or oof_predictions.csv's columns), in the task's
  /// order: [{"label", "positives", "negatives", "missing", "auc"}] (multilabel); null for a
  /// task without per-label outcomes.
  virtual nlohmann::json label_counts(const OutOfFold& table) const {
    (void)table;
    return nullptr;
  }
  /// Whether predict's report page scores the predictions against the labels a run's labels
  /// table knows (classification).
  virtual bool scores_known_labels() const { return false; }

  /// train's predictions.csv: its columns after "record,sample", and sample i's fields.
  virtual std::string csv_header() const = 0;
  virtual std::string csv_row(const SplitSamples& s, std::size_t i, const float* out) const = 0;
};

/// A metric as metrics() reports it: the number, or null when it is undefined (NaN, inf).
inline nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

/// The task of the dataset (dataset.json's "task") with the job's loss options; `train` gives
/// what a loss learns from the training split (class weights, the nll time bins). UsageError
/// for a loss or monitor the task has not, or options of another task's loss.
std::unique_ptr<Task> make_task(const TrainJob& job, const DatasetInfo& data,
                                const SplitSamples& train);

/// The task a finished run trained (run.json's "task"; a run from before tasks: classification
/// over dataset.labels), for predict.
std::unique_ptr<Task> run_task(const nlohmann::json& run);

namespace tasks {
/// Each task from the job, the dataset and the training split (make_task), and from run.json's
/// "task" (describe(); run_task).
std::unique_ptr<Task> classification(const TrainJob& job, const DatasetInfo& data,
                                     const SplitSamples& train);
std::unique_ptr<Task> regression(const TrainJob& job, const DatasetInfo& data,
                                 const SplitSamples& train);
std::unique_ptr<Task> survival(const TrainJob& job, const DatasetInfo& data,
                               const SplitSamples& train);
std::unique_ptr<Task> multilabel(const TrainJob& job, const DatasetInfo& data,
                                 const SplitSamples& train);
std::unique_ptr<Task> classification(const nlohmann::json& task);
std::unique_ptr<Task> regression(const nlohmann::json& task);
std::unique_ptr<Task> survival(const nlohmann::json& task);
std::unique_ptr<Task> multilabel(const nlohmann::json& task);
}  // namespace tasks

}  // namespace mltool::train
