// km.png and scatter.png (cv_plots.hpp), drawn on io::Canvas: 1200 × 960 pixels, axes with
// ticks, a legend and a caption; KM curves as steps with censoring ticks and the numbers at
// risk under the axis.
#include "cv_plots.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "mltool/io/canvas.hpp"
#include "mltool/train/metrics.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::train {
namespace {

using io::Canvas;
using io::Rgb;
using json = nlohmann::json;

constexpr Rgb kInk{40, 40, 40}, kAxis{150, 150, 150}, kGrid{225, 225, 225};
constexpr Rgb kLow{31, 119, 180}, kHigh{214, 39, 40};
constexpr int kWidth = 1200, kHeight = 960;
constexpr int kLeft = 140, kRight = 1140, kTop = 90, kBottom = 700;

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

// Maps data coordinates to the plot area.
struct Axes {
  double x0, x1, y0, y1;
  int px(double x) const {
    return kLeft + static_cast<int>(std::lround((x - x0) / (x1 - x0) * (kRight - kLeft)));
  }
  int py(double y) const {
    return kBottom - static_cast<int>(std::lround((y - y0) / (y1 - y0) * (kBottom - kTop)));
  }
};

// Five ticks at a round step covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5, mag = std::pow(10, std::floor(std::log10(raw)));
  const double r = raw / mag;
  const double step = r < 1.5 ? mag : r < 3 ? 2 * mag : r < 7 ? 5 * mag : 10 * mag;
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) out.push_back(t);
  return out;
}

void frame(Canvas& c, const Axes& a, const std::vector<double>& xt, const std::vector<double>& yt,
           const std::string& xlabel, const std::string& ylabel) {
  for (const double t : yt) {
    c.fill(kLeft, a.py(t), kRight, a.py(t) + 1, kGrid);
    const std::string s = number(t, "%.3g");
    c.text(kLeft - 12 - Canvas::text_width(s), a.py(t) - 7, s, kInk);
  }
  for (const double t : xt) {
    c.fill(a.px(t), kBottom, a.px(t) + 2, kBottom + 8, kAxis);
    const std::string s = number(t, "%.4g");
    c.text(a.px(t) - Canvas::text_width(s) / 2, kBottom + 14, s, kInk);
  }
  c.fill(kLeft - 2, kTop, kLeft, kBottom + 2, kAxis);
  c.fill(kLeft - 2, kBottom, kRight, kBottom + 2, kAxis);
  c.text((kLeft + kRight - Canvas::text_width(xlabel)) / 2, kBottom + 40, xlabel, kInk);
  c.text(12, kTop - 30, ylabel, kInk);
}

// A Kaplan–Meier curve: steps 3 px thick, a tick at each censoring.
void draw_curve(Canvas& c, const Axes& a, const KaplanMeier& km, Rgb colour) {
  double t = 0, s = 1;
  for (std::size_t k = 0; k < km.times.size(); ++k) {
    c.fill(a.px(t), a.py(s) - 1, a.px(km.times[k]) + 1, a.py(s) + 2, colour);
    const double next = km.survival[k];
    c.fill(a.px(km.times[k]) - 1, a.py(s), a.px(km.times[k]) + 2, a.py(next) + 1, colour);
    if (km.censored[k] > 0)
      c.fill(a.px(km.times[k]) - 1, a.py(next) - 8, a.px(km.times[k]) + 2, a.py(next) + 8, colour);
    t = km.times[k];
    s = next;
  }
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
  const double tmax = *std::max_element(time.begin(), time.end());
  const Axes a{0, tmax, 0, 1};
  Canvas c(kWidth, kHeight);
  const auto xt = ticks(0, tmax);
  frame(c, a, xt, {0, 0.25, 0.5, 0.75, 1}, "TIME", "SURVIVAL");
  c.text(kLeft, 20, "KAPLAN-MEIER, OUT-OF-FOLD: HIGH VS LOW RISK", kInk, 3);
  const Rgb colours[2] = {kLow, kHigh};
  const char* names[2] = {"LOW", "HIGH"};
  KaplanMeier km[2];
  for (int g = 0; g < 2; ++g)
    if (!t[g].empty()) {
      km[g] = kaplan_meier(t[g], e[g]);
      draw_curve(c, a, km[g], colours[g]);
    }
  // The numbers at risk under the axis, at each tick.
  c.text(12, kBottom + 80, "AT RISK", kInk);
  for (int g = 0; g < 2; ++g) {
    const int y = kBottom + 110 + g * 30;
    c.fill(12, y + 2, 36, y + 12, colours[g]);
    c.text(44, y, names[g], colours[g]);
    for (const double x : xt) {
      std::int64_t n = 0;
      for (const double ti : t[g]) n += ti >= x ? 1 : 0;
      const std::string s = std::to_string(n);
      c.text(a.px(x) - Canvas::text_width(s) / 2, y, s, colours[g]);
    }
  }
  const std::string caption =
      "LOG-RANK P = " + (std::isnan(p) ? std::string("N/A") : number(p, "%.3g")) +
      "; N = " + std::to_string(time.size()) + " (LOW " + std::to_string(t[0].size()) + ", HIGH " +
      std::to_string(t[1].size()) + "); HIGH: RISK ABOVE ITS FOLD'S TRAINING MEDIAN";
  c.text(12, kHeight - 40, caption, kInk);
  io::write_png(util::join_path(output, "km.png"), c.image());
  return {{"file", "km.png"},
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
  const double pad = (hi - lo) * 0.05;
  const Axes a{lo - pad, hi + pad, lo - pad, hi + pad};
  Canvas c(kWidth, kHeight);
  frame(c, a, ticks(a.x0, a.x1), ticks(a.y0, a.y1), "TRUE", "PREDICTED");
  c.text(kLeft, 20, "REGRESSION, OUT-OF-FOLD: PREDICTED VS TRUE", kInk, 3);
  for (int i = 0; i <= 400; ++i) {  // the diagonal, dotted
    const double v = a.x0 + (a.x1 - a.x0) * i / 400.0;
    if (i % 4 < 2) c.fill(a.px(v), a.py(v), a.px(v) + 2, a.py(v) + 2, kAxis);
  }
  for (std::size_t i = 0; i < truth.size(); ++i)
    c.fill(a.px(truth[i]) - 3, a.py(pred[i]) - 3, a.px(truth[i]) + 4, a.py(pred[i]) + 4, kLow);
  c.text(12, kHeight - 40,
         "PEARSON R = " + (std::isnan(r) ? std::string("N/A") : number(r, "%.3f")) +
             "; N = " + std::to_string(truth.size()) + "; DOTTED: PREDICTED = TRUE",
         kInk);
  io::write_png(util::join_path(output, "scatter.png"), c.image());
  return {{"file", "scatter.png"}, {"pearson", std::isnan(r) ? json() : json(r)}};
}

}  // namespace

json draw_cv_pictures(const std::string& output, const std::string& kind, const OutOfFold& oof,
                      const std::vector<double>& train_medians) {
  if (oof.rows.empty()) return json::object();
  if (kind == "survival") return {{"km", draw_km(output, oof, train_medians)}};
  if (kind == "regression") return {{"scatter", draw_scatter(output, oof)}};
  return json::object();
}

}  // namespace mltool::train
