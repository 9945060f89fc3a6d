// `mltool train --folds all`: every fold of a K-fold dataset (pack --folds K) trained into
// OUTPUT/fold-I (train --fold I), then gathered: OUTPUT/cv.json (each fold's validation
// metrics, their mean and sample standard deviation) and OUTPUT/oof_predictions.csv (every
// sample once, predicted by the model that did not train on it), and for survival runs
// OUTPUT/km.png (Kaplan–Meier curves of the out-of-fold high- and low-risk halves), for
// regression runs OUTPUT/scatter.png (predicted against true). docs/train.md#cross-validation.
// No LibTorch in this header.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "mltool/train/progress.hpp"
#include "mltool/train/train_job.hpp"

namespace mltool::train {

struct CrossValidationReport {
  std::string output;
  int folds = 0;
  int trained = 0;           ///< folds trained (or resumed) by this invocation
  int skipped = 0;           ///< folds already finished, kept as they were
  bool gather_only = false;  ///< --gather-only: no fold trained, the finished ones gathered
  nlohmann::json cv;         ///< cv.json as written
};

/// The log's line of a cross-validation: the folds trained, kept or gathered, then each
/// metric's mean ± sd over the folds in the reports' order (per-label metrics in
/// --label-columns' order), those some fold cannot score with "(K of N folds)", and the labels
/// val_auc_mean averages.
std::string summary_line(const CrossValidationReport& r);

/// Trains every fold not yet finished (a finished fold, its run.json "complete" or
/// "early_stopped", is never recomputed; an unfinished one is resumed from its last
/// checkpoint), unless job.gather_only, then gathers them. `progress` gets each fold's steps.
/// UsageError for a dataset without folds or --fold given too; InputError (gathering) naming
/// the folds that are missing or unfinished.
CrossValidationReport cross_validate(
    const TrainJob& job, const std::function<void(int fold, const TrainProgress&)>& progress = {});

/// "fold-I": the run directory of fold I inside the cross-validation directory.
std::string fold_directory(const std::string& output, int fold);

}  // namespace mltool::train
