// km.png and scatter.png (cv_plots.hpp) with their .svg, drawn with io::Svg: 1200 × 960
// pixels, axes with ticks at round numbers, a legend and a caption; KM curves as steps with
// censoring ticks and the numbers at risk under the axis.
#include "cv_plots.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "mltool/io/chart.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::train {
namespace {

using io::Anchor;
using io::Axes;
using io::Rgb;
using io::Svg;
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

double parse(const std::string& text, const std::string& column) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0')
    throw FormatError("oof_predictions.csv: column " + column + ": '" + text + "' is not a number");
  return v;
}

std::vector<double> column_of(const OutOfFold& oof, const std::string& name) {
  const auto it = std::find(oof.columns.begin(), oof.columns.end(), name);
  if (it == oof.columns.end()) throw FormatError("oof_predictions.csv has no column " + name);
  const auto c = static_cast<std::size_t>(it - oof.columns.begin());
  std::vector<double> out;
  for (const auto& row : oof.rows) out.push_back(parse(row[c], name));
  return out;
}

constexpr double kSize = 16;

// Ticks spanning [lo, hi] and the axis range widened to them.
std::vector<double> span_ticks(double& lo, double& hi) {
  auto t = io::nice_ticks(lo, hi);
  if (t.size() > 1) {
    const double step = t[1] - t[0];
    if (t.front() > lo + 1e-9 * step) t.insert(t.begin(), t.front() - step);
    if (t.back() < hi - 1e-9 * step) t.push_back(t.back() + step);
    lo = t.front(), hi = t.back();
  }
  return t;
}

// A Kaplan–Meier curve as steps, with a tick at each censoring.
void draw_curve(Svg& svg, const Axes& a, const KaplanMeier& km, Rgb colour) {
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

json draw_km(const std::string& output, const OutOfFold& oof, const std::vector<double>& medians) {
  const auto time = column_of(oof, "time"), event = column_of(oof, "event"),
             risk = column_of(oof, "risk"), fold = column_of(oof, "fold");
  std::vector<int> group;  // 1: high risk
  std::vector<double> t[2], e[2];
  for (std::size_t i = 0; i < time.size(); ++i) {
    const double median = medians.at(static_cast<std::size_t>(fold[i]));
    group.push_back(risk[i] > median ? 1 : 0);
    t[group.back()].push_back(time[i]);
    e[group.back()].push_back(event[i]);
  }
  const double p = logrank_p(time, event, group);
  double lo = 0, hi = *std::max_element(time.begin(), time.end());
  if (hi <= 0) hi = 1;
  const auto xt = span_ticks(lo, hi);
  const Axes a{lo, hi, 0, 1, kLeft, kRight, kTop, kBottom};
  Svg svg(kWidth, kHeight);
  svg.text(kLeft, 50, "Kaplan–Meier, out of fold: high vs low risk", 24, kInk, Anchor::start, true);
  io::draw_axes(svg, a, xt, {0, 0.25, 0.5, 0.75, 1}, "Time", "Survival");
  const Rgb colours[2] = {kLow, kHigh};
  const char* names[2] = {"Low risk", "High risk"};
  KaplanMeier km[2];
  svg.begin_group("curves");
  for (int g = 0; g < 2; ++g)
    if (!t[g].empty()) {
      km[g] = kaplan_meier(t[g], e[g]);
      draw_curve(svg, a, km[g], colours[g]);
    }
  svg.end_group();
  io::draw_legend(svg, kRight - 300, kTop + 10, 300,
                  {{names[0], colours[0], io::LegendEntry::line},
                   {names[1], colours[1], io::LegendEntry::line}});
  // The numbers at risk under the axis, at each tick.
  svg.text(12, kBottom + 95, "At risk", kSize, kInk, Anchor::start, true);
  for (int g = 0; g < 2; ++g) {
    const double y = kBottom + 125 + g * 28;
    svg.begin_group(g == 0 ? "at-risk-low" : "at-risk-high");
    svg.text(12, y, names[g], kSize, colours[g]);
    for (const double x : xt) {
      std::int64_t n = 0;
      for (const double ti : t[g]) n += ti >= x ? 1 : 0;
      svg.text(a.px(x), y, std::to_string(n), kSize, colours[g], Anchor::middle);
    }
    svg.end_group();
  }
  svg.text(12, kHeight - 30,
           "Log-rank p = " + p_text(p) + "; n = " + std::to_string(time.size()) + " (low " +
               std::to_string(t[0].size()) + ", high " + std::to_string(t[1].size()) +
               "); high: risk above its fold’s training median",
           kSize, kInk);
  io::write_chart(util::join_path(output, "km.png"), svg);
  return {{"file", "km.png"},
          {"svg", "km.svg"},
          {"logrank_p", std::isnan(p) ? json() : json(p)},
          {"low", t[0].size()},
          {"high", t[1].size()}};
}

json draw_scatter(const std::string& output, const OutOfFold& oof) {
  const auto truth = column_of(oof, "target"), pred = column_of(oof, "prediction");
  const double r = pearson(truth, pred);
  double lo = std::min(*std::min_element(truth.begin(), truth.end()),
                       *std::min_element(pred.begin(), pred.end()));
  double hi = std::max(*std::max_element(truth.begin(), truth.end()),
                       *std::max_element(pred.begin(), pred.end()));
  if (hi <= lo) hi = lo + 1;
  const auto ticks = span_ticks(lo, hi);
  const Axes a{lo, hi, lo, hi, kLeft, kRight, kTop, kBottom};
  Svg svg(kWidth, kHeight);
  svg.text(kLeft, 50, "Regression, out of fold: predicted vs true", 24, kInk, Anchor::start, true);
  io::draw_axes(svg, a, ticks, ticks, "True", "Predicted");
  svg.line(a.px(lo), a.py(lo), a.px(hi), a.py(hi), kAxis, 1.5, "6 5");
  svg.begin_group("points");
  for (std::size_t i = 0; i < truth.size(); ++i)
    svg.circle(a.px(truth[i]), a.py(pred[i]), 4, kLow, 0.7);
  svg.end_group();
  io::draw_legend(
      svg, kLeft + 20, kTop + 10, 400,
      {{"Sample", kLow, io::LegendEntry::dot}, {"Predicted = true", kAxis, io::LegendEntry::line}});
  svg.text(12, kHeight - 30,
           "Pearson r = " + (std::isnan(r) ? std::string("n/a") : number(r, "%.3f")) +
               "; n = " + std::to_string(truth.size()) + "; dashed: predicted = true",
           kSize, kInk);
  io::write_chart(util::join_path(output, "scatter.png"), svg);
  return {{"file", "scatter.png"},
          {"svg", "scatter.svg"},
          {"pearson", std::isnan(r) ? json() : json(r)}};
}

}  // namespace

json draw_cv_pictures(const std::string& output, CvPicture picture, const OutOfFold& oof,
                      const std::vector<double>& train_medians) {
  if (oof.rows.empty()) return json::object();
  switch (picture) {
    case CvPicture::km: return {{"km", draw_km(output, oof, train_medians)}};
    case CvPicture::scatter: return {{"scatter", draw_scatter(output, oof)}};
    case CvPicture::none: break;
  }
  return json::object();
}

}  // namespace mltool::train
