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

namespace mltool::train {

/// Regression metrics of predictions `p` against targets `y` (lib/train/metrics_outcome.cpp).
/// R² = 1 − SS_res/SS_tot (scikit-learn's r2_score: NaN when the targets are constant);
/// Pearson's r and Spearman's ρ (Pearson of average ranks, scipy's spearmanr) are NaN when
/// either side is constant.
struct RegressionMetrics {
  double mae = 0;
  double rmse = 0;
  double r2 = 0;
  double pearson = 0;
  double spearman = 0;
};

/// UsageError for mismatched sizes or no samples.
RegressionMetrics regression_metrics(const std::vector<double>& y, const std::vector<double>& p);

/// Pearson's r of two equally long series; NaN when either is constant.
double pearson(const std::vector<double>& a, const std::vector<double>& b);

/// Harrell's concordance index of risk scores (higher = earlier event), as lifelines'
/// concordance_index(time, -risk, event) computes it: a pair is comparable when the earlier
/// time is an event, or when an event and a censoring share a time (the censored one counts as
/// the longer); two events at one time are not comparable. Concordant pairs count 1, tied
/// risks 1/2. NaN with no comparable pair.
double concordance_index(const std::vector<double>& time, const std::vector<double>& event,
                         const std::vector<double>& risk);

/// The Kaplan–Meier estimate of a sample: at each distinct time (ascending) the number at risk
/// just before it, the events and censorings at it, and the survival just after it.
struct KaplanMeier {
  std::vector<double> times;
  std::vector<std::int64_t> at_risk, events, censored;
  std::vector<double> survival;
  /// The survival at time `t` (a right-continuous step function: 1 before the first time).
  double at(double t) const;
};
KaplanMeier kaplan_meier(const std::vector<double>& time, const std::vector<double>& event);

/// The two-sided p-value of the log-rank test of group 0 against group 1 (`group` 0 or 1 per
/// sample), as lifelines' logrank_test: the chi-square statistic with 1 degree of freedom.
/// NaN when a group is empty or there is no event.
double logrank_p(const std::vector<double>& time, const std::vector<double>& event,
                 const std::vector<int>& group);

/// The integrated Brier score, as scikit-survival's integrated_brier_score(train, test,
/// estimate, times): Brier scores with inverse-probability-of-censoring weights (the
/// censoring's Kaplan–Meier estimate on the training sample) at each of `times` (ascending,
/// distinct, at least two), integrated by the trapezoidal rule over [times.front(),
/// times.back()] and divided by that span. `estimate[i * times.size() + k]` is sample i's
/// predicted survival at times[k]. NaN where scikit-survival refuses: a test time past the last
/// training time while the censoring estimate there is above zero.
double integrated_brier_score(const std::vector<double>& train_time,
                              const std::vector<double>& train_event,
                              const std::vector<double>& test_time,
                              const std::vector<double>& test_event,
                              const std::vector<double>& times,
                              const std::vector<double>& estimate);

}  // namespace mltool::train
