// The charts mltool writes (inspect --plot, the run and cross-validation charts) as SVG: shapes in
// pixel coordinates, text as text in DejaVu Sans (the font the QC pictures and heatmaps use),
// axes with ticks at round numbers, legends. write_chart publishes FILE.svg and the PNG that
// libvips' SVG loader (librsvg) renders of it, both atomically (lib/report/chart_png.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mltool::report {

struct Rgb {
  std::uint8_t r, g, b;
};

/// "#rrggbb".
std::string hex(Rgb c);

/// Round tick values covering [lo, hi]: multiples of 1, 2 or 5 × 10^k, about `count` of them
/// (at least two when hi > lo). Values within a step's 1e-9 of zero are exactly zero.
std::vector<double> nice_ticks(double lo, double hi, int count = 5);

/// A tick label: `v` with as many decimals as the tick step needs (0.25 → "0.25", 1000 →
/// "1000", 0.1 + 0.2 → "0.3").
std::string tick_label(double v, double step);

enum class Anchor { start, middle, end };

/// An SVG document being drawn: each call appends one element, in painting order.
class Svg {
 public:
  Svg(int width, int height);
  int width() const { return width_; }
  int height() const { return height_; }

  void rect(double x, double y, double w, double h, Rgb fill, double opacity = 1);
  void line(double x0, double y0, double x1, double y1, Rgb stroke, double width = 1,
            const std::string& dash = "");
  /// A polyline through `points` (x, y), unfilled.
  void polyline(const std::vector<std::pair<double, double>>& points, Rgb stroke, double width = 2,
                const std::string& dash = "");
  /// A closed filled polygon (confidence bands).
  void polygon(const std::vector<std::pair<double, double>>& points, Rgb fill, double opacity);
  void circle(double cx, double cy, double r, Rgb fill, double opacity = 1);
  /// Text with its baseline at y; `rotate` degrees about (x, y) (−90: reads upwards).
  void text(double x, double y, const std::string& s, double size, Rgb colour,
            Anchor anchor = Anchor::start, bool bold = false, double rotate = 0);
  /// A title attribute-free group marker: `<g class="NAME">` … `end_group()`, so a reader
  /// (the report page, a test) can find a chart's parts.
  void begin_group(const std::string& name);
  void end_group();

  /// The document: an XML declaration, then the <svg> element.
  std::string str() const;
  /// The <svg> element alone, for embedding in HTML.
  std::string element() const;

 private:
  int width_, height_;
  std::string body_;
};

/// The width of `s` in DejaVu Sans at `size` px, estimated (about 0.6 em per character) for
/// laying out legends; rendering does not depend on it.
double text_width(const std::string& s, double size);

/// A plot area: data ranges [x0, x1] × [y0, y1] mapped onto the pixels [left, right] ×
/// [top, bottom] (y up).
struct Axes {
  double x0, x1, y0, y1;
  double left, right, top, bottom;
  double px(double x) const { return left + (x - x0) / (x1 - x0) * (right - left); }
  double py(double y) const { return bottom - (y - y0) / (y1 - y0) * (bottom - top); }
};

/// Grid lines and tick labels at `xticks` and `yticks`, the axis lines and the axis labels.
void draw_axes(Svg& svg, const Axes& axes, const std::vector<double>& xticks,
               const std::vector<double>& yticks, const std::string& xlabel,
               const std::string& ylabel);

struct LegendEntry {
  std::string name;
  Rgb colour;
  enum Mark { box, line, dot } mark = box;
};

/// A legend laid out in rows from (x, y) (the top left) within `width` pixels; returns the y
/// below its last row.
double draw_legend(Svg& svg, double x, double y, double width,
                   const std::vector<LegendEntry>& entries, double size = 15);

/// `path` with its extension (if any) replaced by ".svg": where write_chart puts the SVG.
std::string svg_path_of(const std::string& png_path);

/// Publishes the chart: svg_path_of(png_path) holds svg.str(), `png_path` its rendering by
/// libvips' SVG loader (librsvg) at svg's size, flattened onto white (8-bit RGB). Each is
/// written aside and renamed. ResourceError when libvips cannot render it (or the build has no
/// libvips: MLTOOL_WITH_SLIDE off).
void write_chart(const std::string& png_path, const Svg& svg);

}  // namespace mltool::report
