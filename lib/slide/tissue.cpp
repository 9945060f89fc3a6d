#include "mltool/slide/tissue.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>

#include "mltool/util/error.hpp"

namespace mltool::slide {
namespace {

std::size_t pixel_count(int width, int height) {
  if (width < 0 || height < 0) {
    throw UsageError("image size must not be negative, got " + std::to_string(width) + "x" +
                     std::to_string(height));
  }
  return static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
}

// Otsu on a ready histogram; see otsu_threshold.
int otsu_from_histogram(const std::array<std::uint64_t, 256>& hist) {
  double total = 0.0;
  double sum_all = 0.0;
  int distinct = 0;
  int only = 0;
  for (int v = 0; v < 256; ++v) {
    total += static_cast<double>(hist[v]);
    sum_all += static_cast<double>(v) * static_cast<double>(hist[v]);
    if (hist[v] > 0) {
      ++distinct;
      only = v;
    }
  }
  if (distinct <= 1) return only;

  // Cumulative sums stay unchanged across empty bins, so every t on a plateau gets
  // bit-identical variance and the strict '>' keeps the first, smallest t.
  double w0 = 0.0;
  double sum0 = 0.0;
  double best_var = -1.0;
  int best_t = 0;
  for (int t = 0; t < 255; ++t) {
    w0 += static_cast<double>(hist[t]);
    sum0 += static_cast<double>(t) * static_cast<double>(hist[t]);
    const double w1 = total - w0;
    if (w0 == 0.0 || w1 == 0.0) continue;
    const double mean0 = sum0 / w0;
    const double mean1 = (sum_all - sum0) / w1;
    const double var = w0 * w1 * (mean0 - mean1) * (mean0 - mean1);
    if (var > best_var) {
      best_var = var;
      best_t = t;
    }
  }
  return best_t;
}

// Visits every component of pixels equal to `value` once, breadth-first with an
// explicit queue (a recursive fill overflows the stack on a large tissue blob),
// and hands each to `decide(pixels, touches_border)`; if it returns true the
// component's pixels are flipped to 1 - value.
template <typename Decide>
void for_each_component(Mask& mask, std::uint8_t value, bool eight_connected, Decide decide) {
  const int w = mask.width;
  const int h = mask.height;
  std::vector<std::uint8_t> seen(mask.data.size(), 0);
  std::vector<std::size_t> component;
  static constexpr int kDx[8] = {1, -1, 0, 0, 1, 1, -1, -1};
  static constexpr int kDy[8] = {0, 0, 1, -1, 1, -1, 1, -1};
  const int neighbours = eight_connected ? 8 : 4;
  for (std::size_t start = 0; start < mask.data.size(); ++start) {
    if (seen[start] || mask.data[start] != value) continue;
    component.clear();
    component.push_back(start);
    seen[start] = 1;
    bool touches_border = false;
    // `component` doubles as the queue: entries before `head` are done.
    for (std::size_t head = 0; head < component.size(); ++head) {
      const std::size_t p = component[head];
      const int x = static_cast<int>(p % static_cast<std::size_t>(w));
      const int y = static_cast<int>(p / static_cast<std::size_t>(w));
      if (x == 0 || y == 0 || x == w - 1 || y == h - 1) touches_border = true;
      for (int k = 0; k < neighbours; ++k) {
        const int nx = x + kDx[k];
        const int ny = y + kDy[k];
        if (nx < 0 || ny < 0 || nx >= w || ny >= h) continue;
        const std::size_t q = static_cast<std::size_t>(ny) * static_cast<std::size_t>(w) +
                              static_cast<std::size_t>(nx);
        if (seen[q] || mask.data[q] != value) continue;
        seen[q] = 1;
        component.push_back(q);
      }
    }
    if (decide(component.size(), touches_border)) {
      for (std::size_t p : component) mask.data[p] = static_cast<std::uint8_t>(1 - value);
    }
  }
}

}  // namespace

std::vector<std::uint8_t> saturation(const std::uint8_t* rgb, int width, int height) {
  const std::size_t n = pixel_count(width, height);
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int r = rgb[3 * i];
    const int g = rgb[3 * i + 1];
    const int b = rgb[3 * i + 2];
    const int hi = std::max({r, g, b});
    const int lo = std::min({r, g, b});
    out[i] = static_cast<std::uint8_t>(hi == 0 ? 0 : ((hi - lo) * 255 + hi / 2) / hi);
  }
  return out;
}

int otsu_threshold(const std::vector<std::uint8_t>& values) {
  std::array<std::uint64_t, 256> hist{};
  for (std::uint8_t v : values) ++hist[v];
  return otsu_from_histogram(hist);
}

void remove_small_objects(Mask& mask, std::int64_t min_px) {
  if (min_px <= 1) return;
  for_each_component(mask, 1, true, [&](std::size_t size, bool) {
    return static_cast<std::int64_t>(size) < min_px;
  });
}

void fill_small_holes(Mask& mask, std::int64_t max_px) {
  if (max_px <= 1) return;
  for_each_component(mask, 0, false, [&](std::size_t size, bool touches_border) {
    return !touches_border && static_cast<std::int64_t>(size) < max_px;
  });
}

bool is_artifact(int r, int g, int b, const ArtifactRules& rules) {
  const int hi = std::max({r, g, b});
  const int lo = std::min({r, g, b});
  if (hi < rules.dark_below) return true;                                 // dark
  if (hi < rules.grey_below && hi - lo < rules.grey_chroma) return true;  // grey
  if (g - r > rules.green_over_red) return true;                          // green/cyan
  return g >= r && b - std::max(r, g) >= rules.blue_over;                 // blue
}

Mask tissue_mask(const std::uint8_t* rgb, int width, int height, const TissueOptions& options) {
  const std::size_t n = pixel_count(width, height);
  const std::vector<std::uint8_t> sat = saturation(rgb, width, height);
  std::vector<std::uint8_t> artifact(n, 0);
  std::array<std::uint64_t, 256> hist{};
  for (std::size_t i = 0; i < n; ++i) {
    // Artifact pixels stay out of the histogram too: a black scan border or a pen stroke
    // would otherwise be a third mode that drags the threshold.
    if (options.artifacts)
      artifact[i] = is_artifact(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2], *options.artifacts);
    if (!artifact[i]) ++hist[sat[i]];
  }
  int threshold = std::max(otsu_from_histogram(hist), options.min_saturation);
  // Otsu always splits in two. Without glass in view (a thumbnail all tissue) it splits the
  // tissue itself, pale stroma from dense nuclei. Glass is unsaturated, so when even the lower
  // class is saturated on average, there is no background class: the floor alone decides.
  std::uint64_t low_count = 0, low_sum = 0;
  for (int v = 0; v <= threshold; ++v)
    low_count += hist[v], low_sum += hist[v] * static_cast<std::uint64_t>(v);
  if (low_count > 0 && static_cast<double>(low_sum) / low_count > options.min_saturation)
    threshold = options.min_saturation;

  Mask mask;
  mask.width = width;
  mask.height = height;
  mask.threshold = threshold;
  mask.data.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    mask.data[i] = (!artifact[i] && sat[i] > threshold) ? 1 : 0;
  }
  remove_small_objects(mask, options.min_object_px);
  fill_small_holes(mask, options.max_hole_px);
  return mask;
}

namespace {

// The summed-area table of `value(i)` over a width × height image, row-major.
template <class Value>
std::vector<std::uint32_t> summed_area(int width, int height, const Value& value) {
  const std::size_t stride = static_cast<std::size_t>(width) + 1;
  std::vector<std::uint32_t> table(stride * (static_cast<std::size_t>(height) + 1), 0);
  for (int y = 0; y < height; ++y) {
    std::uint32_t row_sum = 0;
    const std::size_t above = static_cast<std::size_t>(y) * stride;
    const std::size_t here = above + stride;
    for (int x = 0; x < width; ++x) {
      row_sum += value(static_cast<std::size_t>(y) * static_cast<std::size_t>(width) +
                       static_cast<std::size_t>(x));
      table[here + static_cast<std::size_t>(x) + 1] =
          table[above + static_cast<std::size_t>(x) + 1] + row_sum;
    }
  }
  return table;
}

void check_integral_size(int width, int height, std::size_t held, std::uint64_t most) {
  const std::size_t n = pixel_count(width, height);
  if (n >= (std::size_t{1} << 32) || most >= (std::uint64_t{1} << 32)) {
    throw ResourceError("tissue mask of " + std::to_string(width) + "x" + std::to_string(height) +
                        " pixels is too large for its integral image; use a smaller thumbnail");
  }
  if (held != n) {
    throw UsageError("tissue mask data holds " + std::to_string(held) + " pixels, expected " +
                     std::to_string(n));
  }
}

}  // namespace

IntegralMask::IntegralMask(const Mask& mask) : width_(mask.width), height_(mask.height) {
  check_integral_size(width_, height_, mask.data.size(), 0);
  table_ = summed_area(width_, height_, [&](std::size_t i) { return mask.data[i] ? 1u : 0u; });
}

IntegralMask::IntegralMask(int width, int height, const std::vector<std::uint16_t>& counts,
                           int unit)
    : width_(width), height_(height), unit_(unit) {
  if (unit < 1) throw UsageError("IntegralMask: unit must be at least 1");
  check_integral_size(
      width_, height_, counts.size(),
      static_cast<std::uint64_t>(pixel_count(width, height)) * static_cast<std::uint64_t>(unit));
  table_ = summed_area(width_, height_,
                       [&](std::size_t i) { return static_cast<std::uint32_t>(counts[i]); });
}

double IntegralMask::integral(double x, double y) const {
  x = std::clamp(x, 0.0, static_cast<double>(width_));
  y = std::clamp(y, 0.0, static_cast<double>(height_));
  const int ix = std::min(static_cast<int>(std::floor(x)), std::max(width_ - 1, 0));
  const int iy = std::min(static_cast<int>(std::floor(y)), std::max(height_ - 1, 0));
  const double fx = std::min(x - ix, 1.0);
  const double fy = std::min(y - iy, 1.0);
  const std::size_t stride = static_cast<std::size_t>(width_) + 1;
  const auto at = [&](int cx, int cy) {
    cx = std::min(cx, width_);
    cy = std::min(cy, height_);
    return static_cast<double>(
        table_[static_cast<std::size_t>(cy) * stride + static_cast<std::size_t>(cx)]);
  };
  // F is bilinear inside each pixel (the covered area is linear in x and in y), so
  // interpolating the four corner sums is exact, not an approximation.
  const double f00 = at(ix, iy);
  const double f10 = at(ix + 1, iy);
  const double f01 = at(ix, iy + 1);
  const double f11 = at(ix + 1, iy + 1);
  return (f00 * (1 - fx) * (1 - fy) + f10 * fx * (1 - fy) + f01 * (1 - fx) * fy + f11 * fx * fy) /
         unit_;
}

double IntegralMask::tissue_area(double x0, double y0, double x1, double y1) const {
  if (!(x1 > x0) || !(y1 > y0) || width_ == 0 || height_ == 0) return 0.0;
  const double area = integral(x1, y1) - integral(x0, y1) - integral(x1, y0) + integral(x0, y0);
  return std::max(area, 0.0);
}

double IntegralMask::fraction(double x0, double y0, double x1, double y1) const {
  if (!(x1 > x0) || !(y1 > y0)) return 0.0;
  const double frac = tissue_area(x0, y0, x1, y1) / ((x1 - x0) * (y1 - y0));
  return std::clamp(frac, 0.0, 1.0);
}

double tissue_fraction(const Mask& mask, double x0, double y0, double x1, double y1) {
  return IntegralMask(mask).fraction(x0, y0, x1, y1);
}

}  // namespace mltool::slide
