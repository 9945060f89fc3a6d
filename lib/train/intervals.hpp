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

/// The index of column `name` of a predictions table: FormatError when it has none.
std::size_t prediction_column(const OutOfFold& table, const std::string& name);
/// Column `name` of a predictions table as numbers (float32 as written, the risk as double):
/// FormatError for a missing column or a cell that is not a number.
std::vector<double> prediction_numbers(const OutOfFold& table, const std::string& name);
/// Column `column` of label names as ids into `names`: FormatError for an unknown label.
std::vector<std::int64_t> prediction_labels(const OutOfFold& table, const std::string& column,
                                            const std::vector<std::string>& names);

/// v[i] for each i of `idx`.
template <typename T>
std::vector<T> pick(const std::vector<T>& v, const std::vector<std::size_t>& idx) {
  std::vector<T> out;
  out.reserve(idx.size());
  for (const auto i : idx) out.push_back(v[i]);
  return out;
}

/// A metric `--bootstrap` puts an interval on: its name and how to compute it over any subset
/// of a predictions table's rows.
struct NamedStatistic {
  std::string name;
  Statistic statistic;
  /// The outcome it separates, per sample (a label id, or 1/0; -1 where unobserved): each value
  /// that occurs must occur in kMinOutcomeGroups groups for an interval; empty: no such rule
  /// (regression's R², survival's C-index).
  std::vector<std::int64_t> outcome = {};
  std::vector<std::string> outcome_names = {};  ///< each value's name, for messages
};

/// The fewest distinct groups a bootstrap interval is estimated from, and the fewest groups
/// each value of a statistic's outcome must occur in (docs/train.md#confidence-intervals): below
/// them metric_intervals records why there is no interval instead of one.
constexpr std::size_t kMinIntervalGroups = 10;
constexpr std::size_t kMinOutcomeGroups = 5;

/// Why `statistic` gets no interval from `groups` ("2 slides: an interval needs at least 10";
/// "'tumor' occurs in 3 slides: an interval needs each in at least 5"), or "" when it can.
std::string why_no_interval(const SampleGroups& groups, const NamedStatistic& statistic);

/// The intervals of `statistics` of predictions `table` (Task::statistics(table)):
/// {"level", "resamples", "seed", "unit", "groups", "minimum_groups", "metrics": {NAME:
/// {"estimate", "low", "high", "resamples"}}}; a metric without an interval (why_no_interval)
/// has null bounds, 0 resamples and "not_estimable": why. Null when `resamples` is 0. `seed` is the
/// run's --seed; the resamples are drawn from bootstrap_seed(seed).
nlohmann::json metric_intervals(const std::vector<NamedStatistic>& statistics,
                                const OutOfFold& table, const SampleGroups& groups, int resamples,
                                std::uint64_t seed);

/// The bootstrap's generator seed for a run seeded `seed`: fixed, so a rerun gives the same
/// interval, and apart from the seeds of the weights and the sampler.
inline std::uint64_t bootstrap_seed(std::uint64_t seed) { return seed ^ 0x6d6c746f6f6c4349ULL; }

}  // namespace mltool::train
