// Regression and survival metrics (metrics.hpp), on plain vectors: each follows the reference
// implementation the tests compare it with (scikit-learn, scipy, lifelines, scikit-survival).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "mltool/train/metrics.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// 1-based ranks, ties given their average rank (scipy's rankdata "average").
std::vector<double> average_ranks(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j < order.size() && v[order[j]] == v[order[i]]) ++j;
    const double r = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (std::size_t k = i; k < j; ++k) rank[order[k]] = r;
    i = j;
  }
  return rank;
}

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// The distinct times of a sample, ascending, with the events and all exits at each.
struct Counts {
  std::vector<double> times;
  std::vector<std::int64_t> events, exits;
};
Counts counts_of(const std::vector<double>& time, const std::vector<double>& event) {
  std::vector<std::size_t> order(time.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return time[a] < time[b]; });
  Counts c;
  for (const auto i : order) {
    if (c.times.empty() || c.times.back() != time[i]) {
      c.times.push_back(time[i]);
      c.events.push_back(0);
      c.exits.push_back(0);
    }
    c.events.back() += event[i] != 0 ? 1 : 0;
    ++c.exits.back();
  }
  return c;
}

// The censoring distribution's Kaplan–Meier estimate at `t`, as scikit-survival's
// CensoringDistributionEstimator.predict_proba; NaN where it refuses (past the last time while
// the estimate is above zero), 0 past the last time otherwise.
struct Censoring {
  std::vector<double> times, prob;  // prob[k]: from times[k] on; 1 before times[0]
  double at(double t) const {
    if (times.empty()) return 1.0;
    if (t > times.back()) return prob.back() > 0 ? kNaN : 0.0;
    const auto k = std::upper_bound(times.begin(), times.end(), t) - times.begin();
    return k == 0 ? 1.0 : prob[static_cast<std::size_t>(k - 1)];
  }
};
Censoring censoring_of(const std::vector<double>& time, const std::vector<double>& event) {
  const Counts c = counts_of(time, event);
  Censoring g;
  g.times = c.times;
  const bool all_events = std::all_of(event.begin(), event.end(), [](double e) { return e != 0; });
  double s = 1.0;
  std::int64_t at_risk = static_cast<std::int64_t>(time.size());
  for (std::size_t k = 0; k < c.times.size(); ++k) {
    const std::int64_t censored = c.exits[k] - c.events[k];
    const std::int64_t risk = at_risk - c.events[k];  // reverse: the events leave first
    if (!all_events && censored != 0) s *= 1.0 - static_cast<double>(censored) / risk;
    g.prob.push_back(s);
    at_risk -= c.exits[k];
  }
  return g;
}

void check_same_size(std::size_t a, std::size_t b, const char* what) {
  if (a != b) throw UsageError(std::string(what) + ": inputs differ in length");
  if (a == 0) throw UsageError(std::string(what) + ": no samples");
}

}  // namespace

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  check_same_size(a.size(), b.size(), "pearson");
  const double ma = mean_of(a), mb = mean_of(b);
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  if (saa == 0 || sbb == 0) return kNaN;
  return std::clamp(sab / std::sqrt(saa * sbb), -1.0, 1.0);
}

RegressionMetrics regression_metrics(const std::vector<double>& y, const std::vector<double>& p) {
  check_same_size(y.size(), p.size(), "regression_metrics");
  const double n = static_cast<double>(y.size()), my = mean_of(y);
  double abs_sum = 0, sq_sum = 0, tot = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    abs_sum += std::abs(y[i] - p[i]);
    sq_sum += (y[i] - p[i]) * (y[i] - p[i]);
    tot += (y[i] - my) * (y[i] - my);
  }
  RegressionMetrics m;
  m.mae = abs_sum / n;
  m.rmse = std::sqrt(sq_sum / n);
  m.r2 = tot > 0 ? 1.0 - sq_sum / tot : kNaN;
  m.pearson = pearson(y, p);
  m.spearman = pearson(average_ranks(y), average_ranks(p));
  return m;
}

double concordance_index(const std::vector<double>& time, const std::vector<double>& event,
                         const std::vector<double>& risk) {
  check_same_size(time.size(), event.size(), "concordance_index");
  check_same_size(time.size(), risk.size(), "concordance_index");
  double pairs = 0, score = 0;
  for (std::size_t i = 0; i < time.size(); ++i) {
    if (event[i] == 0) continue;
    for (std::size_t j = 0; j < time.size(); ++j) {
      const bool later = time[j] > time[i] || (time[j] == time[i] && event[j] == 0);
      if (!later) continue;
      pairs += 1;
      score += risk[i] > risk[j] ? 1.0 : risk[i] == risk[j] ? 0.5 : 0.0;
    }
  }
  return pairs > 0 ? score / pairs : kNaN;
}

double KaplanMeier::at(double t) const {
  const auto k = std::upper_bound(times.begin(), times.end(), t) - times.begin();
  return k == 0 ? 1.0 : survival[static_cast<std::size_t>(k - 1)];
}

KaplanMeier kaplan_meier(const std::vector<double>& time, const std::vector<double>& event) {
  check_same_size(time.size(), event.size(), "kaplan_meier");
  const Counts c = counts_of(time, event);
  KaplanMeier km;
  km.times = c.times;
  std::int64_t at_risk = static_cast<std::int64_t>(time.size());
  double s = 1.0;
  for (std::size_t k = 0; k < c.times.size(); ++k) {
    km.at_risk.push_back(at_risk);
    km.events.push_back(c.events[k]);
    km.censored.push_back(c.exits[k] - c.events[k]);
    s *= 1.0 - static_cast<double>(c.events[k]) / static_cast<double>(at_risk);
    km.survival.push_back(s);
    at_risk -= c.exits[k];
  }
  return km;
}

double logrank_p(const std::vector<double>& time, const std::vector<double>& event,
                 const std::vector<int>& group) {
  check_same_size(time.size(), event.size(), "logrank_p");
  check_same_size(time.size(), group.size(), "logrank_p");
  const Counts all = counts_of(time, event);
  std::vector<double> t0, e0;
  for (std::size_t i = 0; i < time.size(); ++i)
    if (group[i] == 0) {
      t0.push_back(time[i]);
      e0.push_back(event[i]);
    }
  if (t0.empty() || t0.size() == time.size()) return kNaN;
  const Counts g0 = counts_of(t0, e0);
  double observed = 0, expected = 0, variance = 0;
  double n = static_cast<double>(time.size()), n0 = static_cast<double>(t0.size());
  for (std::size_t k = 0, k0 = 0; k < all.times.size(); ++k) {
    double d0 = 0, x0 = 0;  // group 0's events and exits at this time
    if (k0 < g0.times.size() && g0.times[k0] == all.times[k]) {
      d0 = static_cast<double>(g0.events[k0]);
      x0 = static_cast<double>(g0.exits[k0]);
      ++k0;
    }
    const double d = static_cast<double>(all.events[k]);
    if (d > 0) {
      observed += d0;
      expected += d * n0 / n;
      if (n > 1) variance += d * (n0 / n) * (1 - n0 / n) * (n - d) / (n - 1);
    }
    n -= static_cast<double>(all.exits[k]);
    n0 -= x0;
  }
  if (variance <= 0) return kNaN;
  const double chi2 = (observed - expected) * (observed - expected) / variance;
  return std::erfc(std::sqrt(chi2 / 2));
}

double integrated_brier_score(const std::vector<double>& train_time,
                              const std::vector<double>& train_event,
                              const std::vector<double>& test_time,
                              const std::vector<double>& test_event,
                              const std::vector<double>& times,
                              const std::vector<double>& estimate) {
  check_same_size(train_time.size(), train_event.size(), "integrated_brier_score");
  check_same_size(test_time.size(), test_event.size(), "integrated_brier_score");
  if (times.size() < 2 || estimate.size() != test_time.size() * times.size())
    throw UsageError(
        "integrated_brier_score: at least two times, and one estimate per sample "
        "and time");
  const Censoring g = censoring_of(train_time, train_event);
  const auto weight = [&](double t) {
    const double p = g.at(t);
    return p == 0 ? 0.0 : 1.0 / p;  // scikit-survival: a zero probability weighs 1/inf
  };
  std::vector<double> at_y(test_time.size());
  for (std::size_t i = 0; i < test_time.size(); ++i) at_y[i] = weight(test_time[i]);
  for (const double t : times) at_y.push_back(weight(t));
  if (std::any_of(at_y.begin(), at_y.end(), [](double w) { return std::isnan(w); })) return kNaN;
  std::vector<double> brier(times.size());
  for (std::size_t k = 0; k < times.size(); ++k) {
    const double at_t = weight(times[k]);
    double sum = 0;
    for (std::size_t i = 0; i < test_time.size(); ++i) {
      const double s = estimate[i * times.size() + k];
      if (test_time[i] <= times[k] && test_event[i] != 0) sum += s * s * at_y[i];
      if (test_time[i] > times[k]) sum += (1 - s) * (1 - s) * at_t;
    }
    brier[k] = sum / static_cast<double>(test_time.size());
  }
  double area = 0;
  for (std::size_t k = 1; k < times.size(); ++k)
    area += (times[k] - times[k - 1]) * (brier[k] + brier[k - 1]) / 2;
  return area / (times.back() - times.front());
}

}  // namespace mltool::train
