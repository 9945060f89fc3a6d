// mltool inspect --plot: the report as an SVG chart (report::Svg), rendered to the PNG asked for
// with the SVG beside it. Per group (split) one row of two panels: records per shard stacked by
// label, and the label mix of each tenth of a round-robin epoch beside the overall mix ("All");
// a legend of the labels at the bottom.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mltool/records/inspect.hpp"
#include "mltool/report/chart.hpp"

namespace mltool::records {
namespace {

using report::Anchor;
using report::Rgb;
using report::Svg;

constexpr Rgb kInk{40, 40, 40}, kAxis{120, 120, 120}, kGrid{225, 225, 225},
    kUnlabeled{200, 200, 200};
// Tableau 10: distinguishable, and kind to the common colour-vision deficiencies.
constexpr Rgb kPalette[] = {{31, 119, 180},  {255, 127, 14}, {44, 160, 44},   {214, 39, 40},
                            {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {127, 127, 127},
                            {188, 189, 34},  {23, 190, 207}};

Rgb colour(std::size_t label) { return kPalette[label % (sizeof kPalette / sizeof kPalette[0])]; }

std::string two_digits(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "–" : "∞";
  char t[32];
  std::snprintf(t, sizeof t, "%.2f", v);
  return t;
}

constexpr int kWidth = 1000, kRow = 290, kTop = 30;
constexpr double kBarsX0 = 80, kBarsX1 = 640, kMixX0 = 700, kMixX1 = 980;
constexpr double kPlotTop = 50, kPlotBottom = 240;  // within a row
constexpr double kSmall = 13, kText = 15;

// Column of stacked segments from the bottom up, `parts` scaled so that `total` fills `height`.
void stack(Svg& svg, double x0, double x1, double bottom, double height,
           const std::vector<std::uint64_t>& parts, std::uint64_t unlabeled, double total) {
  if (total <= 0) return;
  double acc = 0;
  const auto segment = [&](double v, Rgb col) {
    if (v <= 0) return;
    const double y1 = bottom - acc / total * height;
    acc += v;
    const double y0 = bottom - acc / total * height;
    svg.rect(x0, y0, x1 - x0, y1 - y0, col);
  };
  for (std::size_t l = 0; l < parts.size(); ++l) segment(static_cast<double>(parts[l]), colour(l));
  segment(static_cast<double>(unlabeled), kUnlabeled);
}

// Records per shard, stacked by label, on a y axis of round numbers, with the mean dashed.
void draw_shards(Svg& svg, double y, const GroupReport& g) {
  const double bottom = y + kPlotBottom, height = kPlotBottom - kPlotTop;
  std::uint64_t most = 0;
  for (const auto& s : g.shards) most = std::max(most, s.records);
  const auto ticks = report::nice_ticks(0, std::max<double>(static_cast<double>(most), 1), 4);
  const double top_value = std::max(ticks.back(), static_cast<double>(most));
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (const double t : ticks) {
    const double ty = bottom - t / top_value * height;
    svg.line(kBarsX0, ty, kBarsX1, ty, kGrid);
    svg.text(kBarsX0 - 6, ty + kSmall * 0.35, report::tick_label(t, step), kSmall, kInk,
             Anchor::end);
  }
  svg.line(kBarsX0, y + kPlotTop, kBarsX0, bottom, kAxis, 1.5);
  svg.line(kBarsX0, bottom, kBarsX1, bottom, kAxis, 1.5);
  const std::size_t n = g.shards.size();
  const double width = n ? (kBarsX1 - kBarsX0) / static_cast<double>(n) : 0;
  svg.begin_group("shards");
  for (std::size_t i = 0; i < n; ++i) {
    const auto& s = g.shards[i];
    const double x0 = kBarsX0 + width * static_cast<double>(i);
    const double x1 = x0 + (width >= 4 ? width * 0.8 : width);  // gaps between wide bars
    const double shard_height = static_cast<double>(s.records) / top_value * height;
    stack(svg, x0, x1, bottom, shard_height, s.label_histogram, s.unlabeled,
          static_cast<double>(s.records));
  }
  svg.end_group();
  if (n > 0 && most > 0) {
    const double mean = static_cast<double>(g.records) / static_cast<double>(n);
    const double ym = bottom - mean / top_value * height;
    svg.line(kBarsX0, ym, kBarsX1, ym, kInk, 1.2, "5 4");
  }
  svg.text(kBarsX0, bottom + 20,
           std::to_string(n) + " shards in file order, records stacked by label; dashed: mean",
           kSmall, kInk);
}

// Label mix: all records, then each tenth of a round-robin epoch.
void draw_mix(Svg& svg, double y, const GroupReport& g) {
  const double bottom = y + kPlotBottom, height = kPlotBottom - kPlotTop;
  const int columns = kDeciles + 1;
  const double gap = 4, w = (kMixX1 - kMixX0 - gap * (columns + 1)) / columns;
  svg.begin_group("mix");
  for (int k = 0; k < columns; ++k) {
    const double x0 = kMixX0 + k * (w + gap) + (k ? 2 * gap : 0);
    const auto& parts = k == 0 ? g.label_histogram : g.decile_labels[k - 1];
    double total = 0;
    for (auto v : parts) total += static_cast<double>(v);
    stack(svg, x0, x0 + w, bottom, height, parts, 0, total);
    svg.text(x0 + w / 2, bottom + 16, k == 0 ? "All" : std::to_string(k - 1), kSmall, kInk,
             Anchor::middle);
  }
  svg.end_group();
  if (g.worst_decile >= 0)
    svg.text(
        kMixX0, bottom + 34,
        "Worst decile " + std::to_string(g.worst_decile) + ": off by " + two_digits(g.decile_drift),
        kSmall, kInk);
}

void draw_group(Svg& svg, double y, const GroupReport& g, bool labeled) {
  svg.text(kBarsX0, y + 22, g.name, 18, kInk, Anchor::start, true);
  svg.text(kBarsX0 + report::text_width(g.name, 18) + 16, y + 22,
           std::to_string(g.records) + " records, max/min " + two_digits(g.max_min_ratio) +
               ", cv " + two_digits(g.cv) + ", oversample " + two_digits(g.max_oversample) + "×",
           kSmall, kInk);
  draw_shards(svg, y, g);
  svg.text(kMixX0, y + 40, "Label share: all, then each tenth of an epoch", kSmall, kInk);
  if (labeled) draw_mix(svg, y, g);
}

}  // namespace

void write_plot(const std::string& path, const InspectReport& report) {
  std::vector<report::LegendEntry> legend;
  constexpr std::size_t kLegend = 30;  // entries at most; colours repeat after 10 anyway
  for (std::size_t l = 0; l < report.labels.size() && l < kLegend; ++l)
    legend.push_back({report.labels[l].substr(0, 40), colour(l)});
  if (report.labels.size() > kLegend)
    legend.push_back({"+" + std::to_string(report.labels.size() - kLegend) + " more", kInk});
  bool unlabeled = false;
  for (const auto& g : report.groups) unlabeled = unlabeled || g.unlabeled > 0;
  if (unlabeled || report.labels.empty()) legend.push_back({"No label", kUnlabeled});
  // Lay the legend out once on a scratch document to learn its height.
  Svg scratch(kWidth, 1);
  const double legend_top = kTop + static_cast<double>(report.groups.size()) * kRow;
  const double legend_bottom =
      report::draw_legend(scratch, kBarsX0, legend_top, kWidth - 100, legend);
  Svg svg(kWidth, static_cast<int>(std::ceil(legend_bottom)) + 16);
  const std::string heading =
      report.dataset.empty() ? "TFRecord files" : "Dataset " + report.dataset;
  svg.text(10, 20, heading.substr(0, 150), kText, kAxis);
  for (std::size_t g = 0; g < report.groups.size(); ++g)
    draw_group(svg, kTop + static_cast<double>(g) * kRow, report.groups[g], !report.labels.empty());
  report::draw_legend(svg, kBarsX0, legend_top, kWidth - 100, legend);
  report::write_chart(path, svg);
}

}  // namespace mltool::records
