// The charts of a classification's predictions (train's validation predictions, a
// cross-validation's out-of-fold ones), drawn from curves and counts their caller computed
// (lib/train/class_plots.cpp): ROC and precision–recall curves with their 95% bands, a
// calibration plot, the confusion matrix, one-vs-rest and per-label curves. 900 × 800 pixels,
// each a PNG with its SVG beside (write_chart). Each returns what run.json records of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace mltool::report {

using Points = std::vector<std::pair<double, double>>;

/// The points of a band: 0, 0.01, …, 1 of the curve's x (false-positive rate, recall).
constexpr int kBandGrid = 101;

/// A curve's pointwise 95% band at the kBandGrid points; empty: none drawn.
struct Band {
  std::vector<double> low, high;
};

/// Two labels: the ROC or precision–recall curve of the positive label's probability.
struct BinaryCurve {
  std::string negative, positive;  ///< the labels' names
  /// ROC: (false-positive rate, true-positive rate) from (0, 0), a point per distinct score
  /// from the highest down; PR: (recall, precision) per distinct score.
  Points points;
  double value = 0;       ///< AUC (ROC) or average precision (PR); NaN: undefined
  double prevalence = 0;  ///< PR: the positive label's share of the samples
  std::size_t samples = 0;
  Band band;
  std::string note;  ///< after "n = N" in the caption (the band's resamples), or ""
};

/// roc.png and roc.svg in `dir`: {"file", "svg", "auc"}.
nlohmann::json draw_roc(const std::string& dir, const BinaryCurve& roc);
/// pr.png and pr.svg in `dir` (the curve as steps, scikit-learn's way): {"file", "svg",
/// "auprc", "prevalence"}.
nlohmann::json draw_pr(const std::string& dir, const BinaryCurve& pr);

/// calibration.png and .svg: ten bins of `score` (the positive label's probability), per bin
/// the observed fraction of `label` 1 with a Wilson 95% interval: {"file", "svg", "bins":
/// [{"low", "high", "samples", "mean_predicted", "fraction_positive"}]}.
nlohmann::json draw_calibration(const std::string& dir, const std::string& positive,
                                const std::vector<double>& score,
                                const std::vector<std::int64_t>& label);

/// confusion.png and .svg: the counts of true `label` (rows) against `predicted` (columns),
/// both ids into `names`: {"file", "svg", "labels", "matrix"}.
nlohmann::json draw_confusion(const std::string& dir, const std::vector<std::string>& names,
                              const std::vector<std::int64_t>& label,
                              const std::vector<std::int64_t>& predicted);

/// One label's curve among several.
struct LabelCurve {
  std::string name;
  Points points;       ///< as BinaryCurve's; empty: no curve (the label absent, or alone)
  double value = 0;    ///< its AUC or average precision; NaN: undefined
  std::string counts;  ///< after it in the legend (multilabel: " (P+ / N−)"), or ""
};

/// More than two labels: roc or pr (.png, .svg) with each label's one-vs-rest curve, its AUC
/// or average precision in the legend: {"file", "svg", "auc" or "auprc": {LABEL: value}}.
nlohmann::json draw_one_vs_rest(const std::string& dir, const std::vector<LabelCurve>& curves,
                                bool roc, std::size_t samples);

/// Multilabel: roc.png and .svg with each label's ROC curve over the samples where it is
/// observed, its AUC and counts in the legend: {"file", "svg", "auc": {LABEL: value}}.
nlohmann::json draw_multilabel_roc(const std::string& dir, const std::vector<LabelCurve>& curves,
                                   std::size_t samples);

}  // namespace mltool::report
