#include "mltool/train/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "mltool/util/error.hpp"

namespace mltool::train {

double binary_auc(const std::vector<std::int64_t>& labels, const std::vector<double>& scores) {
  if (labels.size() != scores.size())
    throw UsageError("binary_auc: labels and scores differ in length");
  const std::size_t n = labels.size();
  for (const double s : scores)
    if (std::isnan(s)) return std::numeric_limits<double>::quiet_NaN();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  // Sum of the positives' ranks (1-based, ties given their average rank).
  double positive_rank_sum = 0;
  std::uint64_t positives = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (std::size_t k = i; k < j; ++k)
      if (labels[order[k]] == 1) {
        positive_rank_sum += rank;
        ++positives;
      }
    i = j;
  }
  const std::uint64_t negatives = n - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

ClassificationMetrics classification_metrics(const std::vector<std::int64_t>& labels,
                                             const std::vector<std::int64_t>& predicted,
                                             const std::vector<double>& positive_scores,
                                             std::int64_t classes) {
  if (labels.empty()) throw UsageError("classification_metrics: no samples");
  if (labels.size() != predicted.size())
    throw UsageError("classification_metrics: labels and predictions differ in length");
  std::vector<std::uint64_t> support(static_cast<std::size_t>(classes), 0),
      hits(static_cast<std::size_t>(classes), 0);
  std::uint64_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= classes || predicted[i] < 0 || predicted[i] >= classes)
      throw UsageError("classification_metrics: label id out of range [0, " +
                       std::to_string(classes) + ")");
    ++support[labels[i]];
    if (labels[i] == predicted[i]) {
      ++hits[labels[i]];
      ++correct;
    }
  }
  ClassificationMetrics m;
  m.accuracy = static_cast<double>(correct) / static_cast<double>(labels.size());
  double recall_sum = 0;
  int present = 0;
  for (std::size_t c = 0; c < support.size(); ++c)
    if (support[c] > 0) {
      recall_sum += static_cast<double>(hits[c]) / static_cast<double>(support[c]);
      ++present;
    }
  m.balanced_accuracy = recall_sum / present;
  m.auc = std::numeric_limits<double>::quiet_NaN();
  if (classes == 2) {
    if (positive_scores.size() != labels.size())
      throw UsageError("classification_metrics: two classes need one score per sample");
    m.auc = binary_auc(labels, positive_scores);
  }
  return m;
}

}  // namespace mltool::train
