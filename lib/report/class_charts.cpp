// roc, pr, calibration and confusion charts (class_charts.hpp), drawn with Svg: 900 × 800
// pixels. The curves and bands come computed (lib/train/class_plots.cpp); this draws them.
#include "mltool/report/class_charts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "mltool/report/chart.hpp"
#include "mltool/util/file.hpp"

namespace mltool::report {
namespace {

using json = nlohmann::json;

constexpr Rgb kInk{40, 40, 40}, kAxis{120, 120, 120}, kLine{31, 119, 180};
constexpr int kWidth = 900, kHeight = 800;
constexpr double kSize = 16;
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

void draw_band(Svg& svg, const Band& band) {
  if (band.low.empty()) return;
  Points poly;
  for (int g = 0; g < kBandGrid; ++g)
    poly.emplace_back(kUnit.px(g / double(kBandGrid - 1)), kUnit.py(band.high[g]));
  for (int g = kBandGrid - 1; g >= 0; --g)
    poly.emplace_back(kUnit.px(g / double(kBandGrid - 1)), kUnit.py(band.low[g]));
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

}  // namespace

json draw_roc(const std::string& dir, const BinaryCurve& c) {
  Svg svg(kWidth, kHeight);
  svg.text(kUnit.left, 45, "ROC curve: " + c.positive + " against " + c.negative, 22, kInk,
           Anchor::start, true);
  draw_axes(svg, kUnit, kTicks, kTicks, "False-positive rate", "True-positive rate");
  svg.line(kUnit.px(0), kUnit.py(0), kUnit.px(1), kUnit.py(1), kAxis, 1.5, "6 5");
  draw_band(svg, c.band);
  svg.begin_group("curve");
  svg.polyline(to_pixels(c.points), kLine, 2.5);
  svg.end_group();
  const double auc = c.value;
  draw_legend(svg, 520, 560, 330,
              {{"ROC, AUC " + fixed(auc, 3), kLine, LegendEntry::line},
               {"Chance", kAxis, LegendEntry::line}});
  svg.text(20, kHeight - 50, "n = " + std::to_string(c.samples) + c.note, kSize, kInk);
  write_chart(util::join_path(dir, "roc.png"), svg);
  return {
      {"file", "roc.png"}, {"svg", "roc.svg"}, {"auc", std::isfinite(auc) ? json(auc) : json()}};
}

json draw_pr(const std::string& dir, const BinaryCurve& c) {
  Svg svg(kWidth, kHeight);
  svg.text(kUnit.left, 45, "Precision–recall curve: " + c.positive, 22, kInk, Anchor::start, true);
  draw_axes(svg, kUnit, kTicks, kTicks, "Recall", "Precision");
  const double prevalence = c.prevalence;
  svg.line(kUnit.px(0), kUnit.py(prevalence), kUnit.px(1), kUnit.py(prevalence), kAxis, 1.5, "6 5");
  draw_band(svg, c.band);
  svg.begin_group("curve");
  svg.polyline(to_pixels(pr_steps(c.points)), kLine, 2.5);
  svg.end_group();
  const double ap = c.value;
  draw_legend(svg, 140, 560, 330,
              {{"PR, AUPRC " + fixed(ap, 3), kLine, LegendEntry::line},
               {"Prevalence " + fixed(prevalence, 3), kAxis, LegendEntry::line}});
  svg.text(20, kHeight - 50, "n = " + std::to_string(c.samples) + c.note, kSize, kInk);
  write_chart(util::join_path(dir, "pr.png"), svg);
  return {{"file", "pr.png"},
          {"svg", "pr.svg"},
          {"auprc", std::isfinite(ap) ? json(ap) : json()},
          {"prevalence", prevalence}};
}

// Ten bins of the predicted probability; per bin the observed fraction with a Wilson 95%
// interval.
json draw_calibration(const std::string& dir, const std::string& positive,
                      const std::vector<double>& score, const std::vector<std::int64_t>& label) {
  Svg svg(kWidth, kHeight);
  svg.text(kUnit.left, 45, "Calibration: " + positive, 22, kInk, Anchor::start, true);
  draw_axes(svg, kUnit, kTicks, kTicks, "Predicted probability", "Observed fraction");
  svg.line(kUnit.px(0), kUnit.py(0), kUnit.px(1), kUnit.py(1), kAxis, 1.5, "6 5");
  json bins = json::array();
  Points line;
  svg.begin_group("bins");
  for (int b = 0; b < 10; ++b) {
    double n = 0, sum = 0, pos = 0;
    for (std::size_t i = 0; i < score.size(); ++i)
      if (std::min(static_cast<int>(score[i] * 10), 9) == b)
        n += 1, sum += score[i], pos += label[i] == 1;
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
  draw_legend(svg, 140, 100, 400,
              {{"Bin of 0.1 (bars: Wilson 95%)", kLine, LegendEntry::dot},
               {"Perfect calibration", kAxis, LegendEntry::line}});
  svg.text(20, kHeight - 50, "n = " + std::to_string(label.size()), kSize, kInk);
  write_chart(util::join_path(dir, "calibration.png"), svg);
  return {{"file", "calibration.png"}, {"svg", "calibration.svg"}, {"bins", bins}};
}

json draw_confusion(const std::string& dir, const std::vector<std::string>& names,
                    const std::vector<std::int64_t>& label,
                    const std::vector<std::int64_t>& predicted) {
  const std::size_t k = names.size();
  std::vector<std::vector<std::int64_t>> m(k, std::vector<std::int64_t>(k, 0));
  for (std::size_t i = 0; i < label.size(); ++i)
    ++m[static_cast<std::size_t>(label[i])][static_cast<std::size_t>(predicted[i])];
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
    svg.text(left - 10, top + mid + 5, names[i], kSize, kInk, Anchor::end);
    svg.text(left + mid, top + static_cast<double>(k) * side + 22, names[i], kSize, kInk,
             Anchor::middle);
  }
  svg.text(left + static_cast<double>(k) * side / 2, top + static_cast<double>(k) * side + 55,
           "Predicted", kSize + 2, kInk, Anchor::middle);
  svg.text(40, top + static_cast<double>(k) * side / 2, "True", kSize + 2, kInk, Anchor::middle,
           false, -90);
  svg.text(20, kHeight - 50,
           "n = " + std::to_string(label.size()) + "; shade: share of the true label's samples",
           kSize, kInk);
  write_chart(util::join_path(dir, "confusion.png"), svg);
  return {{"file", "confusion.png"}, {"svg", "confusion.svg"}, {"labels", names}, {"matrix", m}};
}

// More than two labels: each label's one-vs-rest ROC or precision–recall curve (no band),
// its AUC or average precision in the legend and the JSON.
json draw_one_vs_rest(const std::string& dir, const std::vector<LabelCurve>& curves, bool roc,
                      std::size_t samples) {
  const std::string name = roc ? "roc" : "pr";
  Svg svg(kWidth, kHeight);
  svg.text(kUnit.left, 45,
           roc ? "ROC curves, each label against the rest"
               : "Precision–recall curves, each label against the rest",
           22, kInk, Anchor::start, true);
  draw_axes(svg, kUnit, kTicks, kTicks, roc ? "False-positive rate" : "Recall",
            roc ? "True-positive rate" : "Precision");
  if (roc) svg.line(kUnit.px(0), kUnit.py(0), kUnit.px(1), kUnit.py(1), kAxis, 1.5, "6 5");
  std::vector<LegendEntry> legend;
  json per_label = json::object();
  svg.begin_group("curves");
  for (std::size_t k = 0; k < curves.size(); ++k) {
    const LabelCurve& c = curves[k];
    per_label[c.name] = std::isfinite(c.value) ? json(c.value) : json();
    if (c.points.empty()) continue;  // the label is absent, or alone
    const Rgb colour = kPalette[k % std::size(kPalette)];
    svg.polyline(to_pixels(roc ? c.points : pr_steps(c.points)), colour, 2);
    legend.push_back(
        {c.name + (roc ? ", AUC " : ", AUPRC ") + fixed(c.value, 3), colour, LegendEntry::line});
  }
  svg.end_group();
  draw_legend(svg, roc ? 480 : 140, 480, 370, legend, 14);
  svg.text(20, kHeight - 50,
           "n = " + std::to_string(samples) + "; one vs rest: the label's softmax probability",
           kSize, kInk);
  write_chart(util::join_path(dir, name + ".png"), svg);
  return {{"file", name + ".png"}, {"svg", name + ".svg"}, {roc ? "auc" : "auprc", per_label}};
}

// Multilabel: each label's ROC curve over the samples where it is observed, its AUC and
// counts in the legend; a label with one value only has no curve and says so.
json draw_multilabel_roc(const std::string& dir, const std::vector<LabelCurve>& curves,
                         std::size_t samples) {
  Svg svg(kWidth, kHeight);
  svg.text(kUnit.left, 45, "ROC curves, one per label (observed samples)", 22, kInk, Anchor::start,
           true);
  draw_axes(svg, kUnit, kTicks, kTicks, "False-positive rate", "True-positive rate");
  svg.line(kUnit.px(0), kUnit.py(0), kUnit.px(1), kUnit.py(1), kAxis, 1.5, "6 5");
  std::vector<LegendEntry> legend;
  json per_label = json::object();
  svg.begin_group("curves");
  for (std::size_t l = 0; l < curves.size(); ++l) {
    const LabelCurve& c = curves[l];
    per_label[c.name] = std::isfinite(c.value) ? json(c.value) : json();
    const Rgb colour = c.points.empty() ? kAxis : kPalette[l % std::size(kPalette)];
    if (!c.points.empty()) svg.polyline(to_pixels(c.points), colour, 2);
    legend.push_back(
        {c.name + (c.points.empty() ? ": no curve" : ", AUC " + fixed(c.value, 3)) + c.counts,
         colour, LegendEntry::line});
  }
  svg.end_group();
  draw_legend(svg, 440, 640 - 30 * static_cast<double>(legend.size()), 410, legend, 14);
  svg.text(20, kHeight - 50,
           "n = " + std::to_string(samples) +
               "; each curve over the samples where its label is observed (+ positive, − negative)",
           kSize, kInk);
  write_chart(util::join_path(dir, "roc.png"), svg);
  return {{"file", "roc.png"}, {"svg", "roc.svg"}, {"auc", per_label}};
}

}  // namespace mltool::report
