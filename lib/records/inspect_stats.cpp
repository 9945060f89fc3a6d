// Statistics of `mltool inspect`: balance figures, the chi-square test with its p-value from
// the regularized incomplete gamma function, and the round-robin schedule of a uniform
// interleave, computed from shard sizes alone.
#include <algorithm>
#include <cmath>
#include <limits>

#include "mltool/records/inspect.hpp"
#include "mltool/util/error.hpp"

namespace mltool::records {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kEpsilon = 1e-15;
constexpr double kTiny = 1e-300;

// P(a, x) by its series, for x < a + 1: e^-x x^a / Γ(a + 1) * sum_n x^n / ((a+1)...(a+n)).
double gamma_p_series(double a, double x) {
  double term = 1.0 / a, sum = term;
  for (int n = 1; n < 10000000; ++n) {
    term *= x / (a + n);
    sum += term;
    if (std::fabs(term) < std::fabs(sum) * kEpsilon) break;
  }
  return sum * std::exp(-x + a * std::log(x) - std::lgamma(a));
}

// Q(a, x) by its continued fraction (modified Lentz), for x >= a + 1.
double gamma_q_fraction(double a, double x) {
  double b = x + 1 - a, c = 1 / kTiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < kEpsilon) break;
  }
  return std::exp(-x + a * std::log(x) - std::lgamma(a)) * h;
}

}  // namespace

double gamma_q(double a, double x) {
  if (!(a > 0) || !(x >= 0)) throw UsageError("gamma_q: needs a > 0 and x >= 0");
  if (x == 0) return 1;
  if (std::isinf(x)) return 0;
  if (x < a + 1) return std::clamp(1 - gamma_p_series(a, x), 0.0, 1.0);
  return std::clamp(gamma_q_fraction(a, x), 0.0, 1.0);
}

double chi_square_p(double statistic, double dof) {
  if (dof <= 0) return 1;
  return gamma_q(dof / 2, std::max(0.0, statistic) / 2);
}

ChiSquare chi_square_independence(const std::vector<std::vector<std::uint64_t>>& table) {
  const std::size_t cols = table.empty() ? 0 : table.front().size();
  std::vector<double> row_total(table.size(), 0), col_total(cols, 0);
  double total = 0;
  for (std::size_t r = 0; r < table.size(); ++r) {
    if (table[r].size() != cols) throw UsageError("chi_square_independence: ragged table");
    for (std::size_t c = 0; c < cols; ++c) {
      const auto v = static_cast<double>(table[r][c]);
      row_total[r] += v;
      col_total[c] += v;
      total += v;
    }
  }
  ChiSquare out;
  std::uint64_t rows_used = 0, cols_used = 0;
  for (double v : row_total) rows_used += v > 0;
  for (double v : col_total) cols_used += v > 0;
  if (rows_used < 2 || cols_used < 2) return out;
  for (std::size_t r = 0; r < table.size(); ++r) {
    if (row_total[r] == 0) continue;
    for (std::size_t c = 0; c < cols; ++c) {
      if (col_total[c] == 0) continue;
      const double expected = row_total[r] * col_total[c] / total;
      const double diff = static_cast<double>(table[r][c]) - expected;
      out.statistic += diff * diff / expected;
    }
  }
  out.dof = (rows_used - 1) * (cols_used - 1);
  out.p_value = chi_square_p(out.statistic, static_cast<double>(out.dof));
  return out;
}

double max_min_ratio(const std::vector<std::uint64_t>& counts) {
  if (counts.empty()) return kNaN;
  const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
  if (*hi == 0) return kNaN;
  if (*lo == 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(*hi) / static_cast<double>(*lo);
}

double coefficient_of_variation(const std::vector<std::uint64_t>& counts) {
  double sum = 0;
  for (auto c : counts) sum += static_cast<double>(c);
  if (sum == 0) return kNaN;
  const double mean = sum / static_cast<double>(counts.size());
  double squares = 0;
  for (auto c : counts)
    squares += (static_cast<double>(c) - mean) * (static_cast<double>(c) - mean);
  return std::sqrt(squares / static_cast<double>(counts.size())) / mean;
}

// ---------------------------------------------------------------- hypergeometric

namespace {

double log_choose(double n, double k) {
  return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1);
}

// P(X >= x) (up) or P(X <= x) (down) over P(X = x), for X hypergeometric(population,
// successes, draws), where the terms shrink away from x (x at or past the mode on that side).
// Each term comes from the previous by the pmf ratio; the sum stops once a term no longer
// changes it (log-concavity bounds what is left by term * ratio / (1 - ratio)).
double tail_over_pmf(double population, double successes, double draws, double x, bool up,
                     double first, double last) {
  const double failures = population - successes;
  double term = 1, sum = 1;
  for (double k = x; up ? k < last : k > first; k += up ? 1 : -1) {
    term *= up ? (successes - k) * (draws - k) / ((k + 1) * (failures - draws + k + 1))
               : k * (failures - draws + k) / ((successes - k + 1) * (draws - k + 1));
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return sum;
}

}  // namespace

double hypergeometric_p(std::uint64_t population, std::uint64_t successes, std::uint64_t draws,
                        std::uint64_t x) {
  if (successes > population || draws > population)
    throw UsageError("hypergeometric_p: needs successes and draws <= population");
  const std::uint64_t first = draws > population - successes ? draws - (population - successes) : 0;
  const std::uint64_t last = std::min(draws, successes);
  if (x < first || x > last) throw UsageError("hypergeometric_p: x outside the support");
  if (first == last) return 1;
  // The pmf rises up to the mode and falls after it (it is log-concave): sum the tail that
  // falls from x, and take the other from it and the pmf at x.
  const auto mode = static_cast<std::uint64_t>(
      std::floor(static_cast<long double>(draws + 1) * static_cast<long double>(successes + 1) /
                 static_cast<long double>(population + 2)));
  const auto n = static_cast<double>(population), k = static_cast<double>(successes),
             m = static_cast<double>(draws), at = static_cast<double>(x);
  const double lo = static_cast<double>(first), hi = static_cast<double>(last);
  const double log_pmf = log_choose(k, at) + log_choose(n - k, m - at) - log_choose(n, m);
  const double pmf = std::exp(log_pmf);
  const double tail =
      std::min(1.0, std::exp(log_pmf + std::log(tail_over_pmf(n, k, m, at, x >= mode, lo, hi))));
  const double other = std::clamp(1 - tail + pmf, 0.0, 1.0);
  return std::min(1.0, 2 * std::min(tail, other));
}

double decile_drift_p(const std::vector<std::uint64_t>& label_histogram,
                      const std::array<std::vector<std::uint64_t>, kDeciles>& decile_labels) {
  std::uint64_t labeled = 0;
  for (auto c : label_histogram) labeled += c;
  double smallest = 1;
  std::uint64_t cells = 0;
  for (const auto& in_decile : decile_labels) {
    std::uint64_t draws = 0;
    for (auto c : in_decile) draws += c;
    if (draws == 0) continue;
    for (std::size_t l = 0; l < label_histogram.size(); ++l) {
      if (label_histogram[l] == 0) continue;
      smallest = std::min(smallest, hypergeometric_p(labeled, label_histogram[l], draws,
                                                     l < in_decile.size() ? in_decile[l] : 0));
      ++cells;
    }
  }
  if (cells == 0) return kNaN;
  return std::min(1.0, smallest * static_cast<double>(cells));
}

double mean_shift_p(std::uint64_t population, double mean, double variance, std::uint64_t draws,
                    double draw_mean) {
  if (draws == 0 || draws > population)
    throw UsageError("mean_shift_p: needs 0 < draws <= population");
  const auto N = static_cast<double>(population), n = static_cast<double>(draws);
  const double spread = population > 1 ? variance / n * (N - n) / (N - 1) : 0;
  if (!(spread > 0)) return 1;
  const double z = (draw_mean - mean) / std::sqrt(spread);
  return std::min(1.0, std::erfc(std::fabs(z) / std::sqrt(2.0)));
}

// ---------------------------------------------------------------- RoundRobin

RoundRobin::RoundRobin(std::vector<std::uint64_t> counts) : counts_(std::move(counts)) {
  const std::size_t n = counts_.size();
  sorted_ = counts_;
  std::sort(sorted_.begin(), sorted_.end());
  sorted_prefix_.assign(n + 1, 0);
  for (std::size_t k = 0; k < n; ++k) sorted_prefix_[k + 1] = sorted_prefix_[k] + sorted_[k];
  total_ = sorted_prefix_[n];
  for (int d = 0; d <= kDeciles; ++d) {  // floor(d N / 10) without overflow
    const auto du = static_cast<std::uint64_t>(d);
    bounds_[d] = du * (total_ / kDeciles) + du * (total_ % kDeciles) / kDeciles;
  }

  // Decile d starts inside round r_d (the last round starting at or before bounds_[d]), at the
  // o_d-th of the shards still open in that round; which shards come before that point is
  // one pass over the shards in file order.
  thresholds_.assign(n, {});
  const std::uint64_t rounds = n ? sorted_.back() : 0;
  for (int d = 1; d < kDeciles; ++d) {
    if (total_ == 0) {
      for (std::size_t i = 0; i < n; ++i) thresholds_[i][d - 1] = 0;
      continue;
    }
    std::uint64_t lo = 0, hi = rounds;  // S(lo) <= b < S(hi)
    while (hi - lo > 1) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      (prefix_rounds(mid) <= bounds_[d] ? lo : hi) = mid;
    }
    const std::uint64_t round = lo, offset = bounds_[d] - prefix_rounds(lo);
    std::uint64_t rank = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (counts_[i] > round) {
        thresholds_[i][d - 1] = rank >= offset ? round : std::min(round + 1, counts_[i]);
        ++rank;
      } else {
        thresholds_[i][d - 1] = counts_[i];
      }
    }
  }

  // exhausted_at: P(i, c_i - 1) = S(c_i - 1) + #{k < i : c_k >= c_i}, the count by a Fenwick
  // tree over the ranks of the distinct sizes.
  exhausted_.assign(n, std::numeric_limits<double>::quiet_NaN());
  std::vector<std::uint64_t> distinct = sorted_;
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<std::uint64_t> tree(distinct.size() + 1, 0);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t rank = static_cast<std::size_t>(
        std::lower_bound(distinct.begin(), distinct.end(), counts_[i]) - distinct.begin());
    std::uint64_t smaller = 0;  // earlier shards with c_k < c_i
    for (std::size_t r = rank; r > 0; r &= r - 1) smaller += tree[r];
    if (counts_[i] > 0) {
      const std::uint64_t p = prefix_rounds(counts_[i] - 1) + (seen - smaller);
      exhausted_[i] = static_cast<double>(p + 1) / static_cast<double>(total_);
    }
    for (std::size_t r = rank + 1; r < tree.size(); r += r & (~r + 1)) ++tree[r];
    ++seen;
  }
}

std::uint64_t RoundRobin::prefix_rounds(std::uint64_t j) const {
  const auto at = static_cast<std::size_t>(std::lower_bound(sorted_.begin(), sorted_.end(), j) -
                                           sorted_.begin());
  return sorted_prefix_[at] + j * (sorted_.size() - at);
}

std::uint64_t RoundRobin::position(std::size_t shard, std::uint64_t record) const {
  std::uint64_t before = 0;
  for (std::size_t k = 0; k < shard; ++k) before += counts_[k] > record;
  return prefix_rounds(record) + before;
}

int RoundRobin::decile_of_position(std::uint64_t p) const {
  return static_cast<int>(std::upper_bound(bounds_.begin(), bounds_.end() - 1, p) -
                          bounds_.begin()) -
         1;
}

int RoundRobin::decile(std::size_t shard, std::uint64_t record) const {
  int d = 0;
  for (auto t : thresholds_[shard]) d += t <= record;
  return d;
}

std::uint64_t RoundRobin::records_in(std::size_t shard, int d) const {
  const std::uint64_t c = counts_[shard];
  const std::uint64_t from = d == 0 ? 0 : std::min(c, thresholds_[shard][d - 1]);
  const std::uint64_t to = d == kDeciles - 1 ? c : std::min(c, thresholds_[shard][d]);
  return to - from;
}

double RoundRobin::factor(std::size_t shard, int d) const {
  const std::uint64_t size = decile_size(d);
  if (counts_[shard] == 0 || size == 0) return std::numeric_limits<double>::quiet_NaN();
  const double share = static_cast<double>(records_in(shard, d)) / static_cast<double>(size);
  return share * static_cast<double>(total_) / static_cast<double>(counts_[shard]);
}

}  // namespace mltool::records
