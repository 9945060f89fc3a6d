// Confidence intervals of validation metrics by bootstrap over groups (patients where the
// dataset has them, else slides or bags): whole groups are drawn with replacement, so samples
// of one patient, which are not independent, stay together. Plain vectors, no LibTorch, so the
// intervals can be checked against a numpy bootstrap (docs/train.md#confidence-intervals).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mltool::train {

/// A statistic of a resample: the indices of its samples (a sample of a group drawn twice is
/// listed twice). NaN where it is undefined for that resample (one class only); such
/// resamples are left out of its interval.
using Statistic = std::function<double(const std::vector<std::size_t>& samples)>;

/// The percentile interval of one statistic.
struct Interval {
  double low = 0, high = 0;    ///< NaN when fewer than 10 resamples gave a number
  std::int64_t resamples = 0;  ///< those that gave a number
};

/// Calls `visit` with the samples of each of `resamples` bootstrap resamples of the groups:
/// `groups[i]` is sample i's group; each resample draws as many groups as there are, with
/// replacement, from a 64-bit Mersenne Twister seeded with `seed` (an index below n drawn by
/// rejection, so the draws are the same on every platform), and lists the samples of each
/// drawn group (groups in order of first appearance). One thread: the draws do not depend on
/// the machine.
void bootstrap_resamples(const std::vector<std::string>& groups, int resamples, std::uint64_t seed,
                         const std::function<void(const std::vector<std::size_t>&)>& visit);

/// The `level` percentile interval (numpy's linear percentiles at (1 − level)/2 and
/// (1 + level)/2) of each statistic over the resamples of bootstrap_resamples; every
/// statistic sees the same resamples.
std::vector<Interval> bootstrap_intervals(const std::vector<std::string>& groups,
                                          const std::vector<Statistic>& statistics, int resamples,
                                          std::uint64_t seed, double level = 0.95);

/// numpy's percentile (method "linear") of `values` at `q` in [0, 1]; NaN for none.
double percentile(std::vector<double> values, double q);

/// Average precision as scikit-learn's average_precision_score: Σ (R_k − R_{k−1}) P_k over
/// the distinct scores from the highest down; `labels` 0 or 1. NaN without positives.
double average_precision(const std::vector<std::int64_t>& labels,
                         const std::vector<double>& scores);

}  // namespace mltool::train
