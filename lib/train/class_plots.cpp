// roc, pr, calibration and confusion charts (class_plots.hpp), drawn with io::Svg: 900 × 800
// pixels. The bands are pointwise 95% percentile bands of the bootstrap's curves on a grid of
// 101 false-positive rates (ROC, linear interpolation as numpy's interp) or recalls (PR, the
// precision of the first threshold reaching that recall).
#include "class_plots.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <numeric>

#include "mltool/io/chart.hpp"
#include "mltool/train/bootstrap.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/util/file.hpp"

namespace mltool::train {
namespace {

using io::Anchor;
using io::Axes;
using io::Rgb;
using io::Svg;
using json = nlohmann::json;
using Points = std::vector<std::pair<double, double>>;

constexpr Rgb kInk{40, 40, 40}, kAxis{120, 120, 120}, kLine{31, 119, 180};
constexpr int kWidth = 900, kHeight = 800;
constexpr double kSize = 16;
constexpr int kGrid = 101;
const Axes kUnit{0, 1, 0, 1, 120, 860, 80, 640};
const std::vector<double> kTicks{0, 0.2, 0.4, 0.6, 0.8, 1};
constexpr Rgb kPalette[] = {{31, 119, 180},  {255, 127, 14}, {44, 160, 44},   {214, 39, 40},
                            {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {127, 127, 127},
                            {188, 189, 34},  {23, 190, 207}};

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "n/a";
  char t[32];
  std::snprintf(t, sizeof t, "%.*f", decimals, v);
  return t;
}

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

struct Band {
  std::vector<double> low, high;
};

// Pointwise bands of the ROC and PR curves over the bootstrap's resamples.
std::pair<Band, Band> bands(const std::vector<std::int64_t>& y, const std::vector<double>& score,
                            const SampleGroups& groups, int resamples, std::uint64_t seed) {
  std::vector<std::vector<double>> roc(kGrid), pr(kGrid);
  bootstrap_resamples(groups.of, resamples, bootstrap_seed(seed),
                      [&](const std::vector<std::size_t>& idx) {
                        const Curves c = curves(y, score, idx);
                        if (c.roc.empty()) return;
                        for (int g = 0; g < kGrid; ++g) {
                          const double x = g / double(kGrid - 1);
                          roc[g].push_back(roc_at(c.roc, x));
                          pr[g].push_back(pr_at(c.pr, x));
                        }
                      });
  std::pair<Band, Band> out;
  if (roc[0].size() < 10) return out;
  for (int g = 0; g < kGrid; ++g) {
    out.first.low.push_back(percentile(roc[g], 0.025));
    out.first.high.push_back(percentile(roc[g], 0.975));
    out.second.low.push_back(percentile(pr[g], 0.025));
    out.second.high.push_back(percentile(pr[g], 0.975));
  }
  return out;
}

void draw_band(Svg& svg, const Band& band) {
  if (band.low.empty()) return;
  Points poly;
  for (int g = 0; g < kGrid; ++g)
    poly.emplace_back(kUnit.px(g / double(kGrid - 1)), kUnit.py(band.high[g]));
  for (int g = kGrid - 1; g >= 0; --g)
    poly.emplace_back(kUnit.px(g / double(kGrid - 1)), kUnit.py(band.low[g]));
  svg.begin_group("band");
  svg.polygon(poly, kLine, 0.2);
  svg.end_group();
}

Points to_pixels(const Points& p) {
  Points out;
  for (const auto& [x, y] : p) out.emplace_back(kUnit.px(x), kUnit.py(y));
  return out;
}

// The precision–recall curve as steps: from (0, the first precision), a step at each
// threshold (scikit-learn's PrecisionRecallDisplay draws it so).
Points pr_steps(const Points& pr) {
  Points steps;
  if (!pr.empty()) steps.emplace_back(0, pr.front().second);
  for (std::size_t k = 0; k < pr.size(); ++k) {
    if (k > 0) steps.emplace_back(pr[k - 1].first, pr[k].second);
    steps.push_back(pr[k]);
  }
  return steps;
}

std::string band_note(const SampleGroups& groups, int resamples) {
  return resamples > 0 ? "; band: 95%, " + std::to_string(resamples) + " bootstrap resamples of " +
                             groups.unit + "s"
                       : "";
}

json draw_roc(const std::string& dir, const ClassPredictions& c, const Curves& all,
              const Band& band, const std::string& note) {
  Svg svg(kWidth, kHeight);
  svg.text(kUnit.left, 45, "ROC curve: " + c.names[1] + " against " + c.names[0], 22, kInk,
           Anchor::start, true);
  io::draw_axes(svg, kUnit, kTicks, kTicks, "False-positive rate", "True-positive rate");
  svg.line(kUnit.px(0), kUnit.py(0), kUnit.px(1), kUnit.py(1), kAxis, 1.5, "6 5");
  draw_band(svg, band);
  svg.begin_group("curve");
  svg.polyline(to_pixels(all.roc), kLine, 2.5);
  svg.end_group();
  const double auc = binary_auc(c.label, c.score);
  io::draw_legend(svg, 520, 560, 330,
                  {{"ROC, AUC " + fixed(auc, 3), kLine, io::LegendEntry::line},
                   {"Chance", kAxis, io::LegendEntry::line}});
  svg.text(20, kHeight - 50, "n = " + std::to_string(c.label.size()) + note, kSize, kInk);
  io::write_chart(util::join_path(dir, "roc.png"), svg);
  return {
      {"file", "roc.png"}, {"svg", "roc.svg"}, {"auc", std::isfinite(auc) ? json(auc) : json()}};
}

json draw_pr(const std::string& dir, const ClassPredictions& c, const Curves& all, const Band& band,
             const std::string& note) {
  Svg svg(kWidth, kHeight);
  svg.text(kUnit.left, 45, "Precision–recall curve: " + c.names[1], 22, kInk, Anchor::start, true);
  io::draw_axes(svg, kUnit, kTicks, kTicks, "Recall", "Precision");
  double positives = 0;
  for (const auto l : c.label) positives += l == 1;
  const double prevalence = positives / static_cast<double>(c.label.size());
  svg.line(kUnit.px(0), kUnit.py(prevalence), kUnit.px(1), kUnit.py(prevalence), kAxis, 1.5, "6 5");
  draw_band(svg, band);
  svg.begin_group("curve");
  svg.polyline(to_pixels(pr_steps(all.pr)), kLine, 2.5);
  svg.end_group();
  const double ap = average_precision(c.label, c.score);
  io::draw_legend(svg, 140, 560, 330,
                  {{"PR, AUPRC " + fixed(ap, 3), kLine, io::LegendEntry::line},
                   {"Prevalence " + fixed(prevalence, 3), kAxis, io::LegendEntry::line}});
  svg.text(20, kHeight - 50, "n = " + std::to_string(c.label.size()) + note, kSize, kInk);
  io::write_chart(util::join_path(dir, "pr.png"), svg);
  return {{"file", "pr.png"},
          {"svg", "pr.svg"},
          {"auprc", std::isfinite(ap) ? json(ap) : json()},
          {"prevalence", prevalence}};
}

// Ten bins of the predicted probability; per bin the observed fraction with a Wilson 95%
// interval.
json draw_calibration(const std::string& dir, const ClassPredictions& c) {
  Svg svg(kWidth, kHeight);
  svg.text(kUnit.left, 45, "Calibration: " + c.names[1], 22, kInk, Anchor::start, true);
  io::draw_axes(svg, kUnit, kTicks, kTicks, "Predicted probability", "Observed fraction");
  svg.line(kUnit.px(0), kUnit.py(0), kUnit.px(1), kUnit.py(1), kAxis, 1.5, "6 5");
  json bins = json::array();
  Points line;
  svg.begin_group("bins");
  for (int b = 0; b < 10; ++b) {
    double n = 0, sum = 0, pos = 0;
    for (std::size_t i = 0; i < c.score.size(); ++i)
      if (std::min(static_cast<int>(c.score[i] * 10), 9) == b)
        n += 1, sum += c.score[i], pos += c.label[i] == 1;
    json bin = {{"low", b / 10.0}, {"high", (b + 1) / 10.0}, {"samples", std::llround(n)}};
    if (n > 0) {
      const double mean = sum / n, frac = pos / n, z = 1.959963984540054;
      const double centre = (frac + z * z / (2 * n)) / (1 + z * z / n);
      const double half =
          z / (1 + z * z / n) * std::sqrt(frac * (1 - frac) / n + z * z / (4 * n * n));
      svg.line(kUnit.px(mean), kUnit.py(centre - half), kUnit.px(mean), kUnit.py(centre + half),
               kLine, 1.5);
      svg.circle(kUnit.px(mean), kUnit.py(frac), 5, kLine);
      line.emplace_back(kUnit.px(mean), kUnit.py(frac));
      bin["mean_predicted"] = mean;
      bin["fraction_positive"] = frac;
    }
    bins.push_back(bin);
  }
  svg.end_group();
  svg.polyline(line, kLine, 1.5);
  io::draw_legend(svg, 140, 100, 400,
                  {{"Bin of 0.1 (bars: Wilson 95%)", kLine, io::LegendEntry::dot},
                   {"Perfect calibration", kAxis, io::LegendEntry::line}});
  svg.text(20, kHeight - 50, "n = " + std::to_string(c.label.size()), kSize, kInk);
  io::write_chart(util::join_path(dir, "calibration.png"), svg);
  return {{"file", "calibration.png"}, {"svg", "calibration.svg"}, {"bins", bins}};
}

json draw_confusion(const std::string& dir, const ClassPredictions& c) {
  const std::size_t k = c.names.size();
  std::vector<std::vector<std::int64_t>> m(k, std::vector<std::int64_t>(k, 0));
  for (std::size_t i = 0; i < c.label.size(); ++i)
    ++m[static_cast<std::size_t>(c.label[i])][static_cast<std::size_t>(c.predicted[i])];
  Svg svg(kWidth, kHeight);
  svg.text(120, 45, "Confusion matrix at the predicted label", 22, kInk, Anchor::start, true);
  const double left = 220, top = 110, side = std::min(600.0 / static_cast<double>(k), 200.0);
  svg.begin_group("cells");
  for (std::size_t t = 0; t < k; ++t) {
    std::int64_t row = 0;
    for (const auto v : m[t]) row += v;
    for (std::size_t p = 0; p < k; ++p) {
      const double share = row ? static_cast<double>(m[t][p]) / static_cast<double>(row) : 0;
      const auto shade = [&](int full) {
        return static_cast<std::uint8_t>(std::lround(255 - share * (255 - full)));
      };
      const double x = left + static_cast<double>(p) * side,
                   y = top + static_cast<double>(t) * side;
      svg.rect(x, y, side - 2, side - 2, {shade(31), shade(119), shade(180)});
      svg.text(x + side / 2, y + side / 2 + 6, std::to_string(m[t][p]), 18,
               share > 0.5 ? Rgb{255, 255, 255} : kInk, Anchor::middle, true);
    }
  }
  svg.end_group();
  for (std::size_t i = 0; i < k; ++i) {
    const double mid = static_cast<double>(i) * side + side / 2;
    svg.text(left - 10, top + mid + 5, c.names[i], kSize, kInk, Anchor::end);
    svg.text(left + mid, top + static_cast<double>(k) * side + 22, c.names[i], kSize, kInk,
             Anchor::middle);
  }
  svg.text(left + static_cast<double>(k) * side / 2, top + static_cast<double>(k) * side + 55,
           "Predicted", kSize + 2, kInk, Anchor::middle);
  svg.text(40, top + static_cast<double>(k) * side / 2, "True", kSize + 2, kInk, Anchor::middle,
           false, -90);
  svg.text(20, kHeight - 50,
           "n = " + std::to_string(c.label.size()) + "; shade: share of the true label's samples",
           kSize, kInk);
  io::write_chart(util::join_path(dir, "confusion.png"), svg);
  return {{"file", "confusion.png"}, {"svg", "confusion.svg"}, {"labels", c.names}, {"matrix", m}};
}

// More than two labels: each label's one-vs-rest ROC or precision–recall curve (no band),
// its AUC or average precision in the legend and the JSON.
json draw_one_vs_rest(const std::string& dir, const ClassPredictions& c, bool roc) {
  const std::string name = roc ? "roc" : "pr";
  Svg svg(kWidth, kHeight);
  svg.text(kUnit.left, 45,
           roc ? "ROC curves, each label against the rest"
               : "Precision–recall curves, each label against the rest",
           22, kInk, Anchor::start, true);
  io::draw_axes(svg, kUnit, kTicks, kTicks, roc ? "False-positive rate" : "Recall",
                roc ? "True-positive rate" : "Precision");
  if (roc) svg.line(kUnit.px(0), kUnit.py(0), kUnit.px(1), kUnit.py(1), kAxis, 1.5, "6 5");
  std::vector<std::size_t> all(c.label.size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<io::LegendEntry> legend;
  json per_label = json::object();
  svg.begin_group("curves");
  for (std::size_t k = 0; k < c.names.size(); ++k) {
    std::vector<std::int64_t> y;
    for (const auto l : c.label) y.push_back(static_cast<std::size_t>(l) == k ? 1 : 0);
    const Curves curve = curves(y, c.prob[k], all);
    const double value = roc ? binary_auc(y, c.prob[k]) : average_precision(y, c.prob[k]);
    per_label[c.names[k]] = std::isfinite(value) ? json(value) : json();
    if (curve.roc.empty()) continue;  // the label is absent, or alone
    const Rgb colour = kPalette[k % std::size(kPalette)];
    svg.polyline(to_pixels(roc ? curve.roc : pr_steps(curve.pr)), colour, 2);
    legend.push_back({c.names[k] + (roc ? ", AUC " : ", AUPRC ") + fixed(value, 3), colour,
                      io::LegendEntry::line});
  }
  svg.end_group();
  io::draw_legend(svg, roc ? 480 : 140, 480, 370, legend, 14);
  svg.text(
      20, kHeight - 50,
      "n = " + std::to_string(c.label.size()) + "; one vs rest: the label's softmax probability",
      kSize, kInk);
  io::write_chart(util::join_path(dir, name + ".png"), svg);
  return {{"file", name + ".png"}, {"svg", name + ".svg"}, {roc ? "auc" : "auprc", per_label}};
}

// Multilabel: each label's ROC curve over the samples where it is observed, its AUC and
// counts in the legend; a label with one value only has no curve and says so.
json draw_multilabel_roc(const std::string& dir, const MultilabelPredictions& m) {
  Svg svg(kWidth, kHeight);
  svg.text(kUnit.left, 45, "ROC curves, one per label (observed samples)", 22, kInk, Anchor::start,
           true);
  io::draw_axes(svg, kUnit, kTicks, kTicks, "False-positive rate", "True-positive rate");
  svg.line(kUnit.px(0), kUnit.py(0), kUnit.px(1), kUnit.py(1), kAxis, 1.5, "6 5");
  std::vector<io::LegendEntry> legend;
  json per_label = json::object();
  svg.begin_group("curves");
  for (std::size_t l = 0; l < m.names.size(); ++l) {
    std::vector<std::size_t> seen;
    std::int64_t positives = 0;
    for (std::size_t i = 0; i < m.truth[l].size(); ++i)
      if (m.truth[l][i] >= 0) seen.push_back(i), positives += m.truth[l][i];
    const auto negatives = static_cast<std::int64_t>(seen.size()) - positives;
    const Curves curve = curves(m.truth[l], m.prob[l], seen);
    const double auc = m.auc(l, seen);
    per_label[m.names[l]] = std::isfinite(auc) ? json(auc) : json();
    const std::string counts =
        " (" + std::to_string(positives) + "+ / " + std::to_string(negatives) + "−)";
    const Rgb colour = curve.roc.empty() ? kAxis : kPalette[l % std::size(kPalette)];
    if (!curve.roc.empty()) svg.polyline(to_pixels(curve.roc), colour, 2);
    legend.push_back(
        {m.names[l] + (curve.roc.empty() ? ": no curve" : ", AUC " + fixed(auc, 3)) + counts,
         colour, io::LegendEntry::line});
  }
  svg.end_group();
  io::draw_legend(svg, 440, 640 - 30 * static_cast<double>(legend.size()), 410, legend, 14);
  svg.text(20, kHeight - 50,
           "n = " + std::to_string(m.truth.empty() ? 0 : m.truth[0].size()) +
               "; each curve over the samples where its label is observed (+ positive, − negative)",
           kSize, kInk);
  io::write_chart(util::join_path(dir, "roc.png"), svg);
  return {{"file", "roc.png"}, {"svg", "roc.svg"}, {"auc", per_label}};
}

}  // namespace

json draw_classification_charts(const std::string& dir, const json& task, const OutOfFold& table,
                                const SampleGroups& groups, int resamples, std::uint64_t seed) {
  if (table.rows.empty()) return json::object();
  const ClassPredictions c = class_predictions(task, table);
  json out = {{"confusion", draw_confusion(dir, c)}};
  if (c.names.size() > 2) {
    out["roc"] = draw_one_vs_rest(dir, c, true);
    out["pr"] = draw_one_vs_rest(dir, c, false);
    return out;
  }
  std::vector<std::size_t> all(c.label.size());
  std::iota(all.begin(), all.end(), 0);
  const Curves whole = curves(c.label, c.score, all);
  if (whole.roc.empty()) return out;  // one class only: no curve
  const auto [roc_band, pr_band] = bands(c.label, c.score, groups, resamples, seed);
  const std::string note = band_note(groups, resamples);
  out["roc"] = draw_roc(dir, c, whole, roc_band, note);
  out["pr"] = draw_pr(dir, c, whole, pr_band, note);
  out["calibration"] = draw_calibration(dir, c);
  return out;
}

}  // namespace mltool::train

namespace mltool::train {

json draw_multilabel_charts(const std::string& dir, const json& task, const OutOfFold& table) {
  if (table.rows.empty()) return json::object();
  return {{"roc", draw_multilabel_roc(dir, multilabel_predictions(task, table))}};
}

}  // namespace mltool::train
