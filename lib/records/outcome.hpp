// Internal to lib/records: the outcomes of records (docs/pack.md#tasks) as pack plans,
// stratifies and summarizes them; each task's own rule is in its file of lib/records/tasks/.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "mltool/records/labels.hpp"

namespace mltool::records::detail {

/// A record's outcome: `target` (regression), `time` and `event` (survival) or `values`
/// (multilabel: 1, 0 or NaN for a missing outcome, per label column).
struct Outcome {
  float target = 0;
  float time = 0;
  float event = 0;
  std::vector<float> values;
};

/// numpy.quantile(values, q) with its default (linear) method: h = (n − 1)·q, the value at
/// floor(h) plus (h − floor(h)) times the step to the next. `sorted` ascending, not empty.
double quantile(const std::vector<double>& sorted, double q);

/// The bin of `v` among cut points `cuts` (ascending): how many it exceeds.
std::uint32_t bin_of(double v, const std::vector<double>& cuts);
/// One field of every outcome, ascending.
std::vector<double> sorted_values(const std::vector<Outcome>& outcomes, float Outcome::*field);
/// `v`, or null where it is not finite (a figure undefined for the count).
nlohmann::json or_null(double v);

/// How records are stratified for splits and folds: "label" (classification),
/// "target_quantile" (regression), "event_time_tertile" (survival), "first_label"
/// (multilabel).
const char* stratify_name(PackTask task);

/// The stratum of each of `outcomes` (one per record), for regression and survival:
/// - regression: the target's quartile bin, #{c in (q25, q50, q75) : target > c} (0..3),
///   the quantiles taken over all the records' targets;
/// - survival: 3·event + the time's tertile bin, #{c in (q1/3, q2/3) : time > c} (0..5);
/// - multilabel: the first label column's value, 0 or 1, and 2 where it is missing.
std::vector<std::uint32_t> strata(PackTask task, const std::vector<Outcome>& outcomes);

/// The coarse class of each stratum (assign_splits' label_class): survival the event
/// (strata 0-2 → 0, 3-5 → 1), regression the half (bins 0-1 → 0, 2-3 → 1); classification none.
std::vector<std::uint32_t> stratum_classes(PackTask task);

/// dataset.json's outcome_stats of a split holding `outcomes` (docs/formats.md#dataset):
/// regression {count, mean, sd (n − 1), min, max}; survival {count, events, event_rate,
/// time_quantiles {q25, q50, q75}}; figures undefined for the count (an empty split, sd of one)
/// are null; classification: null.
nlohmann::json outcome_stats(PackTask task, const std::vector<Outcome>& outcomes);

}  // namespace mltool::records::detail
