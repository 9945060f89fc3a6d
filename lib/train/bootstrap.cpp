// Bootstrap intervals over groups and average precision (mltool/train/bootstrap.hpp).
#include "mltool/train/bootstrap.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "mltool/util/error.hpp"

namespace mltool::train {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// An index below n, unbiased and the same on every platform (std::uniform_int_distribution's
// algorithm is the library's choice).
std::size_t draw(std::mt19937_64& rng, std::size_t n) {
  const std::uint64_t range = n, limit = std::numeric_limits<std::uint64_t>::max() -
                                         std::numeric_limits<std::uint64_t>::max() % range;
  std::uint64_t x = rng();
  while (x >= limit) x = rng();
  return static_cast<std::size_t>(x % range);
}

}  // namespace

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double h = (static_cast<double>(values.size()) - 1) * q;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= values.size()) return values.back();
  return values[lo] + (h - static_cast<double>(lo)) * (values[lo + 1] - values[lo]);
}

void bootstrap_resamples(const std::vector<std::string>& groups, int resamples, std::uint64_t seed,
                         const std::function<void(const std::vector<std::size_t>&)>& visit) {
  // The members of each group, groups in order of first appearance.
  std::map<std::string, std::size_t> index;
  std::vector<std::vector<std::size_t>> members;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto [it, added] = index.emplace(groups[i], members.size());
    if (added) members.emplace_back();
    members[it->second].push_back(i);
  }
  if (members.empty()) return;
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> samples;
  for (int r = 0; r < resamples; ++r) {
    samples.clear();
    for (std::size_t g = 0; g < members.size(); ++g) {
      const auto& m = members[draw(rng, members.size())];
      samples.insert(samples.end(), m.begin(), m.end());
    }
    visit(samples);
  }
}

std::vector<Interval> bootstrap_intervals(const std::vector<std::string>& groups,
                                          const std::vector<Statistic>& statistics, int resamples,
                                          std::uint64_t seed, double level) {
  std::vector<std::vector<double>> values(statistics.size());
  bootstrap_resamples(groups, resamples, seed, [&](const std::vector<std::size_t>& samples) {
    for (std::size_t s = 0; s < statistics.size(); ++s) {
      const double v = statistics[s](samples);
      if (std::isfinite(v)) values[s].push_back(v);
    }
  });
  std::vector<Interval> out;
  for (const auto& v : values) {
    Interval i;
    i.resamples = static_cast<std::int64_t>(v.size());
    const bool enough = v.size() >= 10;
    i.low = enough ? percentile(v, (1 - level) / 2) : kNaN;
    i.high = enough ? percentile(v, (1 + level) / 2) : kNaN;
    out.push_back(i);
  }
  return out;
}

double average_precision(const std::vector<std::int64_t>& labels,
                         const std::vector<double>& scores) {
  if (labels.size() != scores.size())
    throw UsageError("average_precision: labels and scores differ in length");
  const std::size_t n = labels.size();
  std::uint64_t positives = 0;
  for (const auto l : labels) positives += l == 1;
  for (const double s : scores)
    if (std::isnan(s)) return kNaN;
  if (positives == 0) return kNaN;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  double ap = 0, recall_before = 0;
  std::uint64_t tp = 0, seen = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;  // one threshold: every sample with this score
    while (j < n && scores[order[j]] == scores[order[i]]) {
      tp += labels[order[j]] == 1;
      ++j;
    }
    seen += j - i;
    const double recall = static_cast<double>(tp) / static_cast<double>(positives);
    const double precision = static_cast<double>(tp) / static_cast<double>(seen);
    ap += (recall - recall_before) * precision;
    recall_before = recall;
    i = j;
  }
  return ap;
}

}  // namespace mltool::train
