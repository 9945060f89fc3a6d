// Strata and statistics of outcomes (see outcome.hpp): what every task shares; each task's
// rule is its row's (lib/records/tasks/).
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

const char* stratify_name(PackTask task) { return spec_of(task).stratify; }

std::vector<std::uint32_t> strata(PackTask task, const std::vector<Outcome>& outcomes) {
  const auto rule = spec_of(task).strata;
  if (outcomes.empty() || rule == nullptr) return std::vector<std::uint32_t>(outcomes.size(), 0);
  return rule(outcomes);
}

std::vector<std::uint32_t> stratum_classes(PackTask task) { return spec_of(task).stratum_classes; }

json outcome_stats(PackTask task, const std::vector<Outcome>& outcomes) {
  const auto stats = spec_of(task).outcome_stats;
  return stats == nullptr ? json(nullptr) : stats(outcomes);
}

}  // namespace mltool::records::detail
