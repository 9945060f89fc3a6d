// km.png and scatter.png (cv_charts.hpp) with their .svg, drawn with Svg: 1200 × 960 pixels,
// axes with ticks at round numbers, a legend and a caption; KM curves as steps with censoring
// ticks and the numbers at risk under the axis. What they show comes computed
// (lib/train/cv_plots.cpp).
#include "mltool/report/cv_charts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mltool/report/chart.hpp"
#include "mltool/util/file.hpp"

namespace mltool::report {
namespace {

using json = nlohmann::json;

constexpr Rgb kInk{40, 40, 40}, kAxis{120, 120, 120};
constexpr Rgb kLow{31, 119, 180}, kHigh{214, 39, 40};
constexpr int kWidth = 1200, kHeight = 960;
constexpr double kLeft = 140, kRight = 1140, kTop = 90, kBottom = 700;

std::string number(double v, const char* format = "%.4g") {
  char t[32];
  std::snprintf(t, sizeof t, format, v);
  return t;
}

constexpr double kSize = 16;

// Ticks spanning [lo, hi] and the axis range widened to them.
std::vector<double> span_ticks(double& lo, double& hi) {
  auto t = nice_ticks(lo, hi);
  if (t.size() > 1) {
    const double step = t[1] - t[0];
    if (t.front() > lo + 1e-9 * step) t.insert(t.begin(), t.front() - step);
    if (t.back() < hi - 1e-9 * step) t.push_back(t.back() + step);
    lo = t.front(), hi = t.back();
  }
  return t;
}

// A Kaplan–Meier curve as steps, with a tick at each censoring.
void draw_curve(Svg& svg, const Axes& a, const KmCurve& km, Rgb colour) {
  std::vector<std::pair<double, double>> points{{a.px(0), a.py(1)}};
  double s = 1;
  for (std::size_t k = 0; k < km.times.size(); ++k) {
    points.emplace_back(a.px(km.times[k]), a.py(s));
    s = km.survival[k];
    points.emplace_back(a.px(km.times[k]), a.py(s));
  }
  svg.polyline(points, colour, 2.5);
  for (std::size_t k = 0; k < km.times.size(); ++k)
    if (km.censored[k] > 0)
      svg.line(a.px(km.times[k]), a.py(km.survival[k]) - 7, a.px(km.times[k]),
               a.py(km.survival[k]) + 7, colour, 2);
}

std::string p_text(double p) {
  if (std::isnan(p)) return "n/a";
  return p < 1e-4 ? number(p, "%.1e") : number(p, "%.3g");
}

}  // namespace

json draw_km(const std::string& output, const KmPicture& k) {
  double lo = 0, hi = k.longest;
  if (hi <= 0) hi = 1;
  const auto xt = span_ticks(lo, hi);
  const Axes a{lo, hi, 0, 1, kLeft, kRight, kTop, kBottom};
  Svg svg(kWidth, kHeight);
  svg.text(kLeft, 50, "Kaplan–Meier, out of fold: high vs low risk", 24, kInk, Anchor::start, true);
  draw_axes(svg, a, xt, {0, 0.25, 0.5, 0.75, 1}, "Time", "Survival");
  const Rgb colours[2] = {kLow, kHigh};
  const char* names[2] = {"Low risk", "High risk"};
  svg.begin_group("curves");
  for (int g = 0; g < 2; ++g)
    if (!k.times[g].empty()) draw_curve(svg, a, k.curves[g], colours[g]);
  svg.end_group();
  draw_legend(
      svg, kRight - 300, kTop + 10, 300,
      {{names[0], colours[0], LegendEntry::line}, {names[1], colours[1], LegendEntry::line}});
  // The numbers at risk under the axis, at each tick.
  svg.text(12, kBottom + 95, "At risk", kSize, kInk, Anchor::start, true);
  for (int g = 0; g < 2; ++g) {
    const double y = kBottom + 125 + g * 28;
    svg.begin_group(g == 0 ? "at-risk-low" : "at-risk-high");
    svg.text(12, y, names[g], kSize, colours[g]);
    for (const double x : xt) {
      std::int64_t n = 0;
      for (const double ti : k.times[g]) n += ti >= x ? 1 : 0;
      svg.text(a.px(x), y, std::to_string(n), kSize, colours[g], Anchor::middle);
    }
    svg.end_group();
  }
  const double p = k.logrank_p;
  svg.text(12, kHeight - 30,
           "Log-rank p = " + p_text(p) +
               "; n = " + std::to_string(k.times[0].size() + k.times[1].size()) + " (low " +
               std::to_string(k.times[0].size()) + ", high " + std::to_string(k.times[1].size()) +
               "); high: risk above its fold’s training median",
           kSize, kInk);
  write_chart(util::join_path(output, "km.png"), svg);
  return {{"file", "km.png"},
          {"svg", "km.svg"},
          {"logrank_p", std::isnan(p) ? json() : json(p)},
          {"low", k.times[0].size()},
          {"high", k.times[1].size()}};
}

json draw_scatter(const std::string& output, const std::vector<double>& truth,
                  const std::vector<double>& pred, double r) {
  double lo = std::min(*std::min_element(truth.begin(), truth.end()),
                       *std::min_element(pred.begin(), pred.end()));
  double hi = std::max(*std::max_element(truth.begin(), truth.end()),
                       *std::max_element(pred.begin(), pred.end()));
  if (hi <= lo) hi = lo + 1;
  const auto ticks = span_ticks(lo, hi);
  const Axes a{lo, hi, lo, hi, kLeft, kRight, kTop, kBottom};
  Svg svg(kWidth, kHeight);
  svg.text(kLeft, 50, "Regression, out of fold: predicted vs true", 24, kInk, Anchor::start, true);
  draw_axes(svg, a, ticks, ticks, "True", "Predicted");
  svg.line(a.px(lo), a.py(lo), a.px(hi), a.py(hi), kAxis, 1.5, "6 5");
  svg.begin_group("points");
  for (std::size_t i = 0; i < truth.size(); ++i)
    svg.circle(a.px(truth[i]), a.py(pred[i]), 4, kLow, 0.7);
  svg.end_group();
  draw_legend(svg, kLeft + 20, kTop + 10, 400,
              {{"Sample", kLow, LegendEntry::dot}, {"Predicted = true", kAxis, LegendEntry::line}});
  svg.text(12, kHeight - 30,
           "Pearson r = " + (std::isnan(r) ? std::string("n/a") : number(r, "%.3f")) +
               "; n = " + std::to_string(truth.size()) + "; dashed: predicted = true",
           kSize, kInk);
  write_chart(util::join_path(output, "scatter.png"), svg);
  return {{"file", "scatter.png"},
          {"svg", "scatter.svg"},
          {"pearson", std::isnan(r) ? json() : json(r)}};
}

}  // namespace mltool::report
