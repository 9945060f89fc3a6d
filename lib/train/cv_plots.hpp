// The pictures of a cross-validation (train --folds all): km.png for survival, scatter.png for
// regression: what they show computed from the out-of-fold predictions, drawn by
// mltool/report/cv_charts.hpp. Internal to lib/train.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mltool::train {

/// A task's picture of the out-of-fold predictions (Task::cv_picture): none, Kaplan–Meier
/// curves of the risk halves (survival), predicted against true (regression).
enum class CvPicture { none, km, scatter };

/// oof_predictions.csv as read back: its columns and rows of text.
struct OutOfFold {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

/// Draws the task's picture into `output` (survival: km.png, the Kaplan–Meier curves of the
/// high- and low-risk halves, each sample high when its risk is above its fold's
/// `train_medians[fold]`, with the numbers at risk and the log-rank p-value; regression:
/// scatter.png, predicted against true with Pearson's r) and returns what cv.json records of
/// it ({} for CvPicture::none).
nlohmann::json draw_cv_pictures(const std::string& output, CvPicture picture, const OutOfFold& oof,
                                const std::vector<double>& train_medians);

}  // namespace mltool::train
