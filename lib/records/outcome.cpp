// Strata and statistics of regression and survival outcomes (see outcome.hpp).
#include "outcome.hpp"

#include <algorithm>
#include <cmath>

#include "task_spec.hpp"

namespace mltool::records::detail {

using nlohmann::json;

double quantile(const std::vector<double>& sorted, double q) {
  const double h = static_cast<double>(sorted.size() - 1) * q;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[lo + 1] - sorted[lo]);
}

const char* stratify_name(PackTask task) { return spec_of(task).stratify; }

namespace {

// The bin of `v` among cut points `cuts` (ascending): how many it exceeds.
std::uint32_t bin_of(double v, const std::vector<double>& cuts) {
  return static_cast<std::uint32_t>(
      std::count_if(cuts.begin(), cuts.end(), [v](double c) { return v > c; }));
}

std::vector<double> sorted_values(const std::vector<Outcome>& outcomes, float Outcome::*field) {
  std::vector<double> v;
  v.reserve(outcomes.size());
  for (const Outcome& o : outcomes) v.push_back(o.*field);
  std::sort(v.begin(), v.end());
  return v;
}

json or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

std::vector<std::uint32_t> strata(PackTask task, const std::vector<Outcome>& outcomes) {
  std::vector<std::uint32_t> out(outcomes.size(), 0);
  if (outcomes.empty() || task == PackTask::classification) return out;
  if (task == PackTask::multilabel) {
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
      const float v = outcomes[i].values.at(0);
      out[i] = std::isnan(v) ? 2 : static_cast<std::uint32_t>(v);
    }
    return out;
  }
  const bool survival = task == PackTask::survival;
  const std::vector<double> sorted =
      sorted_values(outcomes, survival ? &Outcome::time : &Outcome::target);
  std::vector<double> cuts;
  if (survival) {
    cuts = {quantile(sorted, 1.0 / 3), quantile(sorted, 2.0 / 3)};
  } else {
    cuts = {quantile(sorted, 0.25), quantile(sorted, 0.5), quantile(sorted, 0.75)};
  }
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    out[i] = survival ? 3 * static_cast<std::uint32_t>(o.event) + bin_of(o.time, cuts)
                      : bin_of(o.target, cuts);
  }
  return out;
}

std::vector<std::uint32_t> stratum_classes(PackTask task) { return spec_of(task).stratum_classes; }

json outcome_stats(PackTask task, const std::vector<Outcome>& outcomes) {
  const double n = static_cast<double>(outcomes.size());
  if (!has_outcome_stats(task)) return nullptr;
  if (task == PackTask::survival) {
    double events = 0;
    for (const Outcome& o : outcomes) events += o.event;
    json q = {{"q25", nullptr}, {"q50", nullptr}, {"q75", nullptr}};
    if (!outcomes.empty()) {
      const auto times = sorted_values(outcomes, &Outcome::time);
      q = {{"q25", quantile(times, 0.25)},
           {"q50", quantile(times, 0.5)},
           {"q75", quantile(times, 0.75)}};
    }
    return {{"count", outcomes.size()},
            {"events", static_cast<std::uint64_t>(events)},
            {"event_rate", or_null(events / n)},
            {"time_quantiles", q}};
  }
  double sum = 0, lo = INFINITY, hi = -INFINITY;
  for (const Outcome& o : outcomes) {
    sum += o.target;
    lo = std::min(lo, static_cast<double>(o.target));
    hi = std::max(hi, static_cast<double>(o.target));
  }
  const double mean = sum / n;
  double squares = 0;  // two passes: no cancellation for targets far from 0
  for (const Outcome& o : outcomes) squares += (o.target - mean) * (o.target - mean);
  return {{"count", outcomes.size()},
          {"mean", or_null(mean)},
          {"sd", or_null(n > 1 ? std::sqrt(squares / (n - 1)) : NAN)},
          {"min", or_null(lo)},
          {"max", or_null(hi)}};
}

}  // namespace mltool::records::detail
