// mltool inspect --plot: the report drawn into an RGB buffer (rectangles and a built-in 5x7
// bitmap font) and written as a PNG. Per group (split) one row of two panels: records per
// shard stacked by label, and the label mix of each tenth of a round-robin epoch beside the
// overall mix ("ALL"); a legend of the labels at the bottom.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "mltool/io/canvas.hpp"
#include "mltool/io/image_codec.hpp"
#include "mltool/records/inspect.hpp"

namespace mltool::records {
namespace {

using io::Canvas;
using io::Rgb;

constexpr Rgb kInk{40, 40, 40}, kAxis{150, 150, 150}, kUnlabeled{200, 200, 200};
// Tableau 10: distinguishable, and kind to the common colour-vision deficiencies.
constexpr Rgb kPalette[] = {{31, 119, 180},  {255, 127, 14}, {44, 160, 44},   {214, 39, 40},
                            {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {127, 127, 127},
                            {188, 189, 34},  {23, 190, 207}};

Rgb colour(std::size_t label) { return kPalette[label % (sizeof kPalette / sizeof kPalette[0])]; }

std::string two_digits(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "-" : "INF";
  char t[32];
  std::snprintf(t, sizeof t, "%.2f", v);
  return t;
}

constexpr int kWidth = 1000, kRow = 270, kTop = 16;
constexpr int kBarsX0 = 80, kBarsX1 = 640, kMixX0 = 700, kMixX1 = 980;
constexpr int kPlotTop = 40, kPlotBottom = 230;  // within a row

// Column of stacked segments from the bottom up, `parts` scaled so that `total` fills `height`.
void stack(Canvas& c, int x0, int x1, int bottom, int height,
           const std::vector<std::uint64_t>& parts, std::uint64_t unlabeled, double total) {
  if (total <= 0) return;
  double acc = 0;
  const auto segment = [&](double v, Rgb col) {
    const int y1 = bottom - static_cast<int>(std::lround(acc / total * height));
    acc += v;
    const int y0 = bottom - static_cast<int>(std::lround(acc / total * height));
    c.fill(x0, y0, x1, y1, col);
  };
  for (std::size_t l = 0; l < parts.size(); ++l) segment(static_cast<double>(parts[l]), colour(l));
  segment(static_cast<double>(unlabeled), kUnlabeled);
}

void draw_group(Canvas& c, int y, const GroupReport& g, bool labeled) {
  const int after = c.text(kBarsX0, y + 8, g.name, kInk);
  c.text(after + 12, y + 14,
         std::to_string(g.records) + " records, max/min " + two_digits(g.max_min_ratio) + ", cv " +
             two_digits(g.cv) + ", oversample " + two_digits(g.max_oversample) + "x",
         kInk, 1);
  const int bottom = y + kPlotBottom, height = kPlotBottom - kPlotTop;

  // Records per shard.
  std::uint64_t most = 0;
  for (const auto& s : g.shards) most = std::max(most, s.records);
  c.fill(kBarsX0 - 2, y + kPlotTop, kBarsX0 - 1, bottom + 1, kAxis);
  c.fill(kBarsX0 - 2, bottom, kBarsX1, bottom + 1, kAxis);
  const std::string top = std::to_string(most);
  c.text(kBarsX0 - 6 - Canvas::text_width(top, 1), y + kPlotTop, top, kInk, 1);
  c.text(kBarsX0 - 12, bottom - 7, "0", kInk, 1);
  const std::size_t n = g.shards.size();
  const double step = n ? static_cast<double>(kBarsX1 - kBarsX0) / static_cast<double>(n) : 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& s = g.shards[i];
    const int x0 = kBarsX0 + static_cast<int>(step * static_cast<double>(i));
    int x1 = kBarsX0 + static_cast<int>(step * static_cast<double>(i + 1));
    if (x1 - x0 >= 4) x1 -= std::max(1, (x1 - x0) / 5);  // gaps between wide bars
    const double shard_height =
        most ? static_cast<double>(s.records) / static_cast<double>(most) * height : 0;
    stack(c, x0, std::max(x1, x0 + 1), bottom, static_cast<int>(std::lround(shard_height)),
          s.label_histogram, s.unlabeled, static_cast<double>(s.records));
  }
  if (n > 0 && most > 0) {  // the mean shard size, as a thin line across
    const double mean = static_cast<double>(g.records) / static_cast<double>(n);
    const int ym =
        bottom - static_cast<int>(std::lround(mean / static_cast<double>(most) * height));
    for (int x = kBarsX0; x < kBarsX1; x += 6) c.fill(x, ym, x + 3, ym + 1, kInk);
  }
  c.text(kBarsX0, bottom + 8,
         std::to_string(n) + " shards in file order, records stacked by label; dashes: mean", kInk,
         1);

  // Label mix: all records, then each tenth of a round-robin epoch.
  c.text(kMixX0, y + 14, "label share: all, then each tenth of an epoch", kInk, 1);
  if (!labeled) return;
  const int columns = kDeciles + 1, gap = 4;
  const int w = (kMixX1 - kMixX0 - gap * (columns + 1)) / columns;
  for (int k = 0; k < columns; ++k) {
    const int x0 = kMixX0 + k * (w + gap) + (k ? 2 * gap : 0);
    const auto& parts = k == 0 ? g.label_histogram : g.decile_labels[k - 1];
    double total = 0;
    for (auto v : parts) total += static_cast<double>(v);
    stack(c, x0, x0 + w, bottom, height, parts, 0, total);
    const std::string name = k == 0 ? "ALL" : std::to_string(k - 1);
    c.text(x0 + (w - Canvas::text_width(name, 1)) / 2, bottom + 8, name, kInk, 1);
  }
  if (g.worst_decile >= 0) {
    c.text(
        kMixX0, bottom + 22,
        "worst decile " + std::to_string(g.worst_decile) + ": off by " + two_digits(g.decile_drift),
        kInk, 1);
  }
}

}  // namespace

void write_plot(const std::string& path, const InspectReport& report) {
  // Legend entries laid out in rows first, to size the image.
  struct Entry {
    std::string name;
    Rgb colour;
  };
  std::vector<Entry> legend;
  constexpr std::size_t kLegend = 30;  // entries at most; colours repeat after 10 anyway
  for (std::size_t l = 0; l < report.labels.size() && l < kLegend; ++l)
    legend.push_back({report.labels[l], colour(l)});
  if (report.labels.size() > kLegend)
    legend.push_back({"+" + std::to_string(report.labels.size() - kLegend) + " more", kInk});
  bool unlabeled = false;
  for (const auto& g : report.groups) unlabeled = unlabeled || g.unlabeled > 0;
  if (unlabeled || report.labels.empty()) legend.push_back({"no label", kUnlabeled});
  std::vector<int> legend_x;
  int rows = 1, x = kBarsX0;
  for (const auto& e : legend) {
    const int w = 24 + Canvas::text_width(e.name.substr(0, 40)) + 24;
    if (x + w > kWidth - 10 && x > kBarsX0) {
      ++rows;
      x = kBarsX0;
    }
    legend_x.push_back(x);
    x += w;
  }
  const int height = kTop + static_cast<int>(report.groups.size()) * kRow + rows * 24 + 16;
  Canvas c(kWidth, height);
  const std::string heading =
      report.dataset.empty() ? "TFRecord files" : "dataset " + report.dataset;
  c.text(10, 4, heading.substr(0, 150), kAxis, 1);
  for (std::size_t g = 0; g < report.groups.size(); ++g)
    draw_group(c, kTop + static_cast<int>(g) * kRow, report.groups[g], !report.labels.empty());
  int row = 0, y = kTop + static_cast<int>(report.groups.size()) * kRow;
  for (std::size_t i = 0; i < legend.size(); ++i) {
    if (i > 0 && legend_x[i] < legend_x[i - 1]) ++row;
    const int ly = y + row * 24;
    c.fill(legend_x[i], ly, legend_x[i] + 16, ly + 14, legend[i].colour);
    c.text(legend_x[i] + 22, ly, legend[i].name.substr(0, 40), kInk);
  }
  io::write_png(path, c.image());
}

}  // namespace mltool::records
