// roc, pr, calibration and confusion charts (class_plots.hpp): the curves of the predictions and
// their bands, which report::draw_roc and the others draw (mltool/report/class_charts.hpp). The
// bands are pointwise 95% percentile bands of the bootstrap's curves on a grid of 101
// false-positive rates (ROC, linear interpolation as numpy's interp) or recalls (PR, the
// precision of the first threshold reaching that recall).
#include "class_plots.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "mltool/report/class_charts.hpp"
#include "mltool/train/bootstrap.hpp"
#include "mltool/train/metrics.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;
using report::Points;

// The curve's points at each distinct score from the highest down: (false-positive rate,
// true-positive rate) and (recall, precision), from `idx` of the samples. Empty without both
// classes.
struct Curves {
  Points roc, pr;
};
Curves curves(const std::vector<std::int64_t>& y, const std::vector<double>& score,
              const std::vector<std::size_t>& idx) {
  std::vector<std::size_t> order(idx);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return score[a] > score[b]; });
  double positives = 0;
  for (const auto i : idx) positives += y[i] == 1;
  const double negatives = static_cast<double>(idx.size()) - positives;
  Curves c;
  if (positives == 0 || negatives == 0) return c;
  c.roc.emplace_back(0, 0);
  double tp = 0, fp = 0;
  for (std::size_t k = 0; k < order.size();) {
    std::size_t j = k;
    while (j < order.size() && score[order[j]] == score[order[k]]) {
      (y[order[j]] == 1 ? tp : fp) += 1;
      ++j;
    }
    c.roc.emplace_back(fp / negatives, tp / positives);
    c.pr.emplace_back(tp / positives, tp / (tp + fp));
    k = j;
  }
  return c;
}

// numpy's interp of the ROC curve (x ascending, ties kept in order) at x.
double roc_at(const Points& roc, double x) {
  const auto it = std::upper_bound(roc.begin(), roc.end(), x,
                                   [](double v, const auto& p) { return v < p.first; });
  if (it == roc.begin()) return roc.front().second;
  if (it == roc.end()) return roc.back().second;
  const auto& a = *(it - 1);
  const auto& b = *it;
  return b.first == a.first
             ? a.second
             : a.second + (x - a.first) / (b.first - a.first) * (b.second - a.second);
}

// The precision of the first threshold whose recall reaches r.
double pr_at(const Points& pr, double r) {
  for (const auto& [recall, precision] : pr)
    if (recall >= r - 1e-12) return precision;
  return pr.back().second;
}

// Pointwise bands of the ROC and PR curves over the bootstrap's resamples.
std::pair<report::Band, report::Band> bands(const std::vector<std::int64_t>& y,
                                            const std::vector<double>& score,
                                            const SampleGroups& groups, int resamples,
                                            std::uint64_t seed) {
  std::vector<std::vector<double>> roc(report::kBandGrid), pr(report::kBandGrid);
  bootstrap_resamples(groups.of, resamples, bootstrap_seed(seed),
                      [&](const std::vector<std::size_t>& idx) {
                        const Curves c = curves(y, score, idx);
                        if (c.roc.empty()) return;
                        for (int g = 0; g < report::kBandGrid; ++g) {
                          const double x = g / double(report::kBandGrid - 1);
                          roc[g].push_back(roc_at(c.roc, x));
                          pr[g].push_back(pr_at(c.pr, x));
                        }
                      });
  std::pair<report::Band, report::Band> out;
  if (roc[0].size() < 10) return out;
  for (int g = 0; g < report::kBandGrid; ++g) {
    out.first.low.push_back(percentile(roc[g], 0.025));
    out.first.high.push_back(percentile(roc[g], 0.975));
    out.second.low.push_back(percentile(pr[g], 0.025));
    out.second.high.push_back(percentile(pr[g], 0.975));
  }
  return out;
}

std::string band_note(const SampleGroups& groups, int resamples) {
  return resamples > 0 ? "; band: 95%, " + std::to_string(resamples) + " bootstrap resamples of " +
                             groups.unit + "s"
                       : "";
}

// A binary curve of all the samples, with its band, as report::draw_roc and draw_pr take it.
report::BinaryCurve binary_curve(const ClassPredictions& c, Points points, double value,
                                 report::Band band, const std::string& note) {
  report::BinaryCurve out;
  out.negative = c.names[0];
  out.positive = c.names[1];
  out.points = std::move(points);
  out.value = value;
  double positives = 0;
  for (const auto l : c.label) positives += l == 1;
  out.prevalence = positives / static_cast<double>(c.label.size());
  out.samples = c.label.size();
  out.band = std::move(band);
  out.note = note;
  return out;
}

// More than two labels: each label's one-vs-rest curves of its softmax probability.
std::vector<report::LabelCurve> one_vs_rest(const ClassPredictions& c, bool roc) {
  std::vector<std::size_t> all(c.label.size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<report::LabelCurve> out;
  for (std::size_t k = 0; k < c.names.size(); ++k) {
    std::vector<std::int64_t> y;
    for (const auto l : c.label) y.push_back(static_cast<std::size_t>(l) == k ? 1 : 0);
    const Curves curve = curves(y, c.prob[k], all);
    out.push_back({c.names[k], roc ? curve.roc : curve.pr,
                   roc ? binary_auc(y, c.prob[k]) : average_precision(y, c.prob[k]), ""});
  }
  return out;
}

// Multilabel: each label's ROC curve over the samples where it is observed, with its counts.
std::vector<report::LabelCurve> multilabel_curves(const MultilabelPredictions& m) {
  std::vector<report::LabelCurve> out;
  for (std::size_t l = 0; l < m.names.size(); ++l) {
    std::vector<std::size_t> seen;
    std::int64_t positives = 0;
    for (std::size_t i = 0; i < m.truth[l].size(); ++i)
      if (m.truth[l][i] >= 0) seen.push_back(i), positives += m.truth[l][i];
    const auto negatives = static_cast<std::int64_t>(seen.size()) - positives;
    out.push_back({m.names[l], curves(m.truth[l], m.prob[l], seen).roc, m.auc(l, seen),
                   " (" + std::to_string(positives) + "+ / " + std::to_string(negatives) + "−)"});
  }
  return out;
}

}  // namespace

json draw_classification_charts(const std::string& dir, const json& task, const OutOfFold& table,
                                const SampleGroups& groups, int resamples, std::uint64_t seed) {
  if (table.rows.empty()) return json::object();
  const ClassPredictions c = class_predictions(task, table);
  json out = {{"confusion", report::draw_confusion(dir, c.names, c.label, c.predicted)}};
  if (c.names.size() > 2) {
    out["roc"] = report::draw_one_vs_rest(dir, one_vs_rest(c, true), true, c.label.size());
    out["pr"] = report::draw_one_vs_rest(dir, one_vs_rest(c, false), false, c.label.size());
    return out;
  }
  std::vector<std::size_t> all(c.label.size());
  std::iota(all.begin(), all.end(), 0);
  const Curves whole = curves(c.label, c.score, all);
  if (whole.roc.empty()) return out;  // one class only: no curve
  // A band is an interval at each point: none where the AUC's interval could not be estimated.
  const std::string why =
      resamples > 0 ? why_no_interval(groups, {"val_auc", {}, c.label, c.names}) : "";
  auto [roc_band, pr_band] = why.empty() ? bands(c.label, c.score, groups, resamples, seed)
                                         : std::pair<report::Band, report::Band>{};
  const std::string note = why.empty() ? band_note(groups, resamples) : "; no band: " + why;
  out["roc"] = report::draw_roc(
      dir, binary_curve(c, whole.roc, binary_auc(c.label, c.score), std::move(roc_band), note));
  out["pr"] = report::draw_pr(dir, binary_curve(c, whole.pr, average_precision(c.label, c.score),
                                                std::move(pr_band), note));
  out["calibration"] = report::draw_calibration(dir, c.names[1], c.score, c.label);
  return out;
}

json draw_multilabel_charts(const std::string& dir, const json& task, const OutOfFold& table) {
  if (table.rows.empty()) return json::object();
  const auto m = multilabel_predictions(task, table);
  return {{"roc", report::draw_multilabel_roc(dir, multilabel_curves(m),
                                              m.truth.empty() ? 0 : m.truth[0].size())}};
}

}  // namespace mltool::train
