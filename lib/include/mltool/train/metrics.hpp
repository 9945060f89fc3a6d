// Classification metrics of a validation pass, on plain vectors (no LibTorch), so they can be
// checked against hand-computed values.
#pragma once

#include <cstdint>
#include <vector>

namespace mltool::train {

struct ClassificationMetrics {
  double accuracy = 0;           ///< correct / samples
  double balanced_accuracy = 0;  ///< mean recall over the labels present in `labels`
  /// Two classes only: ROC AUC of the class-1 score (ties count one half); NaN with one
  /// class present, or with more than two classes.
  double auc = 0;
};

/// `labels` and `predicted` hold label ids in [0, classes); `positive_scores` (two classes
/// only, else may be empty) the score of class 1 per sample. UsageError for mismatched sizes,
/// no samples, or ids out of range.
ClassificationMetrics classification_metrics(const std::vector<std::int64_t>& labels,
                                             const std::vector<std::int64_t>& predicted,
                                             const std::vector<double>& positive_scores,
                                             std::int64_t classes);

/// ROC AUC (Mann–Whitney U / (positives × negatives), ties averaged); `labels` are 0 or 1.
/// NaN unless both classes occur.
double binary_auc(const std::vector<std::int64_t>& labels, const std::vector<double>& scores);

}  // namespace mltool::train
