// The SVG chart document (chart.hpp): elements, ticks, axes, legends. The PNG rendering is in
// chart_png.cpp, the only part that needs libvips.
#include "mltool/report/chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mltool/util/html.hpp"

namespace mltool::report {
namespace {

std::string num(double v) {
  if (std::abs(v) < 5e-4) v = 0;  // no "-0"
  char t[32];
  std::snprintf(t, sizeof t, "%.2f", v);
  std::string s = t;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string hex(Rgb c) {
  char t[8];
  std::snprintf(t, sizeof t, "#%02x%02x%02x", c.r, c.g, c.b);
  return t;
}

std::vector<double> nice_ticks(double lo, double hi, int count) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(count, 1);
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  const double r = raw / mag;
  const double step = r < 1.5 ? mag : r < 3 ? 2 * mag : r < 7 ? 5 * mag : 10 * mag;
  std::vector<double> out;
  // Multiples of the step counted as integers, so no rounding error accumulates.
  const auto first = static_cast<long long>(std::ceil(lo / step - 1e-9));
  const auto last = static_cast<long long>(std::floor(hi / step + 1e-9));
  for (long long k = first; k <= last; ++k) out.push_back(k == 0 ? 0.0 : k * step);
  return out;
}

std::string tick_label(double v, double step) {
  int decimals = 0;
  if (step > 0 && std::isfinite(step))
    decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 10);
  // A step of 0.25 needs two decimals where its log says one.
  while (decimals < 10 &&
         std::abs(std::round(step * std::pow(10, decimals)) - step * std::pow(10, decimals)) >
             1e-6 * step * std::pow(10, decimals))
    ++decimals;
  if (std::abs(v) < 1e-9 * std::max(step, 1e-300)) v = 0;
  char t[48];
  std::snprintf(t, sizeof t, "%.*f", decimals, v);
  return t;
}

Svg::Svg(int width, int height) : width_(width), height_(height) {
  rect(0, 0, width, height, {255, 255, 255});
}

void Svg::rect(double x, double y, double w, double h, Rgb fill, double opacity) {
  body_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(w, 0.0)) +
           "\" height=\"" + num(std::max(h, 0.0)) + "\" fill=\"" + hex(fill) + "\"";
  if (opacity < 1) body_ += " fill-opacity=\"" + num(opacity) + "\"";
  body_ += "/>\n";
}

void Svg::line(double x0, double y0, double x1, double y1, Rgb stroke, double width,
               const std::string& dash) {
  body_ += "<line x1=\"" + num(x0) + "\" y1=\"" + num(y0) + "\" x2=\"" + num(x1) + "\" y2=\"" +
           num(y1) + "\" stroke=\"" + hex(stroke) + "\" stroke-width=\"" + num(width) + "\"";
  if (!dash.empty()) body_ += " stroke-dasharray=\"" + dash + "\"";
  body_ += "/>\n";
}

void Svg::polyline(const std::vector<std::pair<double, double>>& points, Rgb stroke, double width,
                   const std::string& dash) {
  if (points.empty()) return;
  body_ += "<polyline fill=\"none\" stroke=\"" + hex(stroke) + "\" stroke-width=\"" + num(width) +
           "\" stroke-linejoin=\"round\"";
  if (!dash.empty()) body_ += " stroke-dasharray=\"" + dash + "\"";
  body_ += " points=\"";
  for (const auto& [x, y] : points) body_ += num(x) + "," + num(y) + " ";
  body_ += "\"/>\n";
}

void Svg::polygon(const std::vector<std::pair<double, double>>& points, Rgb fill, double opacity) {
  if (points.empty()) return;
  body_ += "<polygon fill=\"" + hex(fill) + "\" fill-opacity=\"" + num(opacity) +
           "\" stroke=\"none\" points=\"";
  for (const auto& [x, y] : points) body_ += num(x) + "," + num(y) + " ";
  body_ += "\"/>\n";
}

void Svg::circle(double cx, double cy, double r, Rgb fill, double opacity) {
  body_ += "<circle cx=\"" + num(cx) + "\" cy=\"" + num(cy) + "\" r=\"" + num(r) + "\" fill=\"" +
           hex(fill) + "\"";
  if (opacity < 1) body_ += " fill-opacity=\"" + num(opacity) + "\"";
  body_ += "/>\n";
}

void Svg::text(double x, double y, const std::string& s, double size, Rgb colour, Anchor anchor,
               bool bold, double rotate) {
  static constexpr const char* kAnchors[] = {"start", "middle", "end"};
  body_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) +
           "\" fill=\"" + hex(colour) + "\" text-anchor=\"" + kAnchors[static_cast<int>(anchor)] +
           "\"";
  if (bold) body_ += " font-weight=\"bold\"";
  if (rotate != 0)
    body_ += " transform=\"rotate(" + num(rotate) + " " + num(x) + " " + num(y) + ")\"";
  body_ += ">" + util::html_text(s) + "</text>\n";
}

void Svg::begin_group(const std::string& name) {
  body_ += "<g class=\"" + util::html_text(name) + "\">\n";
}

void Svg::end_group() { body_ += "</g>\n"; }

std::string Svg::element() const {
  const std::string w = std::to_string(width_), h = std::to_string(height_);
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + w + "\" height=\"" + h +
         "\" viewBox=\"0 0 " + w + " " + h + "\" font-family=\"DejaVu Sans, sans-serif\">\n" +
         body_ + "</svg>\n";
}

std::string Svg::str() const { return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + element(); }

double text_width(const std::string& s, double size) {
  std::size_t chars = 0;  // code points: continuation bytes do not count
  for (const char c : s) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return 0.6 * size * static_cast<double>(chars);
}

void draw_axes(Svg& svg, const Axes& a, const std::vector<double>& xticks,
               const std::vector<double>& yticks, const std::string& xlabel,
               const std::string& ylabel) {
  constexpr Rgb kInk{40, 40, 40}, kAxis{120, 120, 120}, kGrid{225, 225, 225};
  constexpr double kSize = 16;
  const double xstep = xticks.size() > 1 ? xticks[1] - xticks[0] : 1;
  const double ystep = yticks.size() > 1 ? yticks[1] - yticks[0] : 1;
  svg.begin_group("axes");
  for (const double t : yticks) {
    svg.line(a.left, a.py(t), a.right, a.py(t), kGrid);
    svg.text(a.left - 10, a.py(t) + kSize * 0.35, tick_label(t, ystep), kSize, kInk, Anchor::end);
  }
  for (const double t : xticks) {
    svg.line(a.px(t), a.bottom, a.px(t), a.bottom + 7, kAxis, 1.5);
    svg.text(a.px(t), a.bottom + 8 + kSize, tick_label(t, xstep), kSize, kInk, Anchor::middle);
  }
  svg.line(a.left, a.top, a.left, a.bottom, kAxis, 1.5);
  svg.line(a.left, a.bottom, a.right, a.bottom, kAxis, 1.5);
  svg.text((a.left + a.right) / 2, a.bottom + 20 + 2.2 * kSize, xlabel, kSize + 2, kInk,
           Anchor::middle);
  const double ylabel_x = a.left - 24 - 0.6 * kSize * 6;
  svg.text(std::max(ylabel_x, kSize + 6), (a.top + a.bottom) / 2, ylabel, kSize + 2, kInk,
           Anchor::middle, false, -90);
  svg.end_group();
}

double draw_legend(Svg& svg, double x, double y, double width,
                   const std::vector<LegendEntry>& entries, double size) {
  constexpr Rgb kInk{40, 40, 40};
  const double row = size * 1.6, mark = size * 1.4;
  double cx = x, cy = y;
  svg.begin_group("legend");
  for (const auto& e : entries) {
    const double w = mark + 6 + text_width(e.name, size) + 20;
    if (cx + w > x + width && cx > x) cx = x, cy += row;
    const double mid = cy + row / 2;
    if (e.mark == LegendEntry::line)
      svg.line(cx, mid, cx + mark, mid, e.colour, 3);
    else if (e.mark == LegendEntry::dot)
      svg.circle(cx + mark / 2, mid, size * 0.3, e.colour);
    else
      svg.rect(cx, mid - size * 0.45, mark, size * 0.9, e.colour);
    svg.text(cx + mark + 6, mid + size * 0.35, e.name, size, kInk);
    cx += w;
  }
  svg.end_group();
  return cy + row;
}

std::string svg_path_of(const std::string& png_path) {
  const auto slash = png_path.find_last_of('/');
  const auto dot = png_path.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  return (has_ext ? png_path.substr(0, dot) : png_path) + ".svg";
}

}  // namespace mltool::report
