// µm/px from the size of nuclei (see mpp_estimate.hpp for the method).
#include "mltool/slide/mpp_estimate.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "flat_image.hpp"
#include "mltool/slide/geometry.hpp"
#include "mltool/slide/tissue.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/options.hpp"
#include "thumbnail.hpp"

namespace mltool::slide {
namespace {

// Red optical density is binned over [0, kMaxOd): 256 bins for Otsu.
constexpr double kMaxOd = 3.0;
// A pixel is stained when its HSV saturation is above this (glass is grey) and it is not
// nearly black (a border).
constexpr double kMinSaturation = 0.12;
constexpr int kMinBrightness = 40;
// Components smaller than this are specks, not nuclei; more elongated than this are
// fibroblast nuclei seen edge-on, or touching nuclei, whose area says little of the scale.
constexpr std::int64_t kMinCoreArea = 3;
constexpr double kMaxElongation = 2.0;
// Per-region estimates from fewer nuclei are not used for the spread between regions.
constexpr std::int64_t kMinRegionNuclei = 10;
// Regions whose estimates spread more than this (sd of their natural logs) disagree.
constexpr double kMaxRegionSpread = 0.35;
// The relative noise of a measured median core (natural-log units), before deblurring.
constexpr double kCoreNoise = 0.04;
// Deblurring that magnifies errors more than this: the nuclei are too small to measure.
constexpr double kMaxBlurGain = 4;

bool stained(const std::uint8_t* p) {
  const int hi = std::max({p[0], p[1], p[2]}), lo = std::min({p[0], p[1], p[2]});
  return hi >= kMinBrightness && hi - lo > kMinSaturation * hi;
}

int od_bin(double od) { return std::clamp(static_cast<int>(od / kMaxOd * 256), 0, 255); }

// Otsu's threshold (a bin) over the bins of the selected pixels.
int otsu_bins(const std::vector<std::uint8_t>& bins, const std::vector<std::uint8_t>& selected,
              int above) {
  std::vector<std::uint8_t> values;
  values.reserve(bins.size());
  for (std::size_t i = 0; i < bins.size(); ++i)
    if (selected[i] && bins[i] > above) values.push_back(bins[i]);
  return otsu_threshold(values);
}

// Sums of one 8-connected component: area and second moments.
struct Moments {
  double n = 0, x = 0, y = 0, xx = 0, yy = 0, xy = 0;
  void add(int px, int py) {
    n += 1, x += px, y += py, xx += double(px) * px, yy += double(py) * py, xy += double(px) * py;
  }
  // Ratio of the axes of the ellipse with the same second moments (a pixel's own 1/12 added,
  // so a single row of pixels is finite).
  double elongation() const {
    const double mx = x / n, my = y / n;
    const double vxx = xx / n - mx * mx + 1.0 / 12, vyy = yy / n - my * my + 1.0 / 12;
    const double vxy = xy / n - mx * my;
    const double half = (vxx + vyy) / 2,
                 root = std::sqrt(std::max(0.0, half * half - (vxx * vyy - vxy * vxy)));
    return std::sqrt((half + root) / std::max(1e-9, half - root));
  }
};

// The 8-connected components of `mask` (cleared as they are visited).
template <class Visit>
void for_each_component(std::vector<std::uint8_t>& mask, int width, int height, Visit visit) {
  std::vector<int> stack;
  for (int start = 0; start < width * height; ++start) {
    if (!mask[start]) continue;
    Moments m;
    mask[start] = 0;
    stack.push_back(start);
    while (!stack.empty()) {
      const int p = stack.back();
      stack.pop_back();
      const int px = p % width, py = p / width;
      m.add(px, py);
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
          const int qx = px + dx, qy = py + dy;
          if (qx < 0 || qy < 0 || qx >= width || qy >= height) continue;
          const int q = qy * width + qx;
          if (mask[q]) mask[q] = 0, stack.push_back(q);
        }
    }
    visit(m);
  }
}

// The value below which `share` of the total weight lies.
double weighted_quantile(std::vector<std::pair<double, double>> values, double share) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  double total = 0;
  for (const auto& v : values) total += v.second;
  double sum = 0;
  for (const auto& v : values) {
    sum += v.second;
    if (sum >= share * total) return v.first;
  }
  return values.back().first;
}

// A core of `px` pixels measured, in pixels once the measurement's own blur (`blur`,
// added in quadrature) is taken out; never below a tenth of what was measured.
double deblurred(double px, double blur) {
  return std::sqrt(std::max(px * px - blur * blur, px * px / 100));
}

// How much a relative error in a measured core grows once deblurred:
// d log(deblurred(px)) / d log(px).
double blur_gain(double px, double blur) { return px * px / std::pow(deblurred(px, blur), 2); }

// The median of the regions' chroma_detail (0 for none).
double median_chroma_detail(const std::vector<NucleusSample>& regions) {
  std::vector<double> v;
  for (const auto& r : regions)
    if (r.chroma_detail > 0) v.push_back(r.chroma_detail);
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// 4:2:0 JPEG stores colour at half the resolution: red minus luminance (chroma) then has
// almost no detail at the pixel scale. The energy of 1-px second differences of chroma over
// that of luminance: 0.1-0.5 in sharp H&E, about 0.01-0.03 once 4:2:0-coded.
double chroma_detail(const std::uint8_t* rgb, int width, int height) {
  const auto at = [&](int x, int y, bool chroma) {
    const std::uint8_t* p = rgb + 3 * (static_cast<std::size_t>(y) * width + x);
    const double luma = 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
    return chroma ? p[0] - luma : luma;
  };
  double energy[2] = {0, 0};
  for (int y = 1; y + 1 < height; ++y)
    for (int x = 1; x + 1 < width; ++x)
      for (int c = 0; c < 2; ++c) {
        const double h = at(x - 1, y, c) - 2 * at(x, y, c) + at(x + 1, y, c);
        const double v = at(x, y - 1, c) - 2 * at(x, y, c) + at(x, y + 1, c);
        energy[c] += h * h + v * v;
      }
  return energy[0] > 0 ? energy[1] / energy[0] : 0;
}

double median_core(const std::vector<const NucleusSample*>& samples) {
  std::vector<std::pair<double, double>> values;
  for (const auto* s : samples)
    for (std::size_t i = 0; i < s->diameters_px.size(); ++i)
      values.emplace_back(s->diameters_px[i], s->areas_px[i]);
  return weighted_quantile(std::move(values), 0.5);
}

// Whole round nuclei are at most this elongated (the cores allow kMaxElongation), and at
// most this many times the typical core across (wider: touching nuclei merged).
constexpr double kMaxNucleusElongation = 1.5;
constexpr double kMaxNucleusOverCore = 4;
// Nuclei are a visible step of hematoxylin: the means of Otsu's two classes differ by at
// least this optical density, or the region has none (noise on uniform stroma gives about
// 0.04; the real and generated slides of docs/info.md 0.8-1.5).
constexpr double kMinNucleusContrast = 0.2;

// The hematoxylin column of the inverse of Ruifrok and Johnston's stain matrix (H, E and
// their cross product, each normalised): a pixel's H concentration is its RGB optical
// densities dotted with it.
std::array<double, 3> hematoxylin_column() {
  const std::array<double, 3> h0 = {0.65, 0.70, 0.29}, e0 = {0.07, 0.99, 0.11};
  const auto unit = [](std::array<double, 3> v) {
    const double n = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    for (auto& x : v) x /= n;
    return v;
  };
  const auto h = unit(h0), e = unit(e0);
  const auto r =
      unit({h[1] * e[2] - h[2] * e[1], h[2] * e[0] - h[0] * e[2], h[0] * e[1] - h[1] * e[0]});
  // Rows h, e, r; the first column of the inverse is (e × r) / det.
  const std::array<double, 3> c = {e[1] * r[2] - e[2] * r[1], e[2] * r[0] - e[0] * r[2],
                                   e[0] * r[1] - e[1] * r[0]};
  const double det = h[0] * c[0] + h[1] * c[1] + h[2] * c[2];
  return {c[0] / det, c[1] / det, c[2] / det};
}

// Whole round nuclei: hematoxylin above Otsu's threshold among the stained pixels.
void measure_whole_nuclei(const std::uint8_t* rgb, const std::vector<std::uint8_t>& is_stained,
                          int width, int height, NucleusSample& out) {
  static const std::array<double, 3> column = hematoxylin_column();
  std::array<std::array<double, 256>, 3> od_part{};
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) od_part[c][v] = -std::log((v + 1) / 256.0) * column[c];
  const std::size_t n = is_stained.size();
  std::vector<std::uint8_t> bins(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* p = rgb + 3 * i;
    bins[i] = od_bin(od_part[0][p[0]] + od_part[1][p[1]] + od_part[2][p[2]]);
  }
  const int t = otsu_bins(bins, is_stained, -1);
  double sum[2] = {0, 0}, count[2] = {0, 0};
  for (std::size_t i = 0; i < n; ++i)
    if (is_stained[i]) sum[bins[i] > t] += bins[i], count[bins[i] > t] += 1;
  if (count[0] == 0 || count[1] == 0 ||
      (sum[1] / count[1] - sum[0] / count[0]) * kMaxOd / 256 < kMinNucleusContrast)
    return;
  std::vector<std::uint8_t> nucleus(n);
  for (std::size_t i = 0; i < n; ++i) nucleus[i] = is_stained[i] && bins[i] > t;
  for_each_component(nucleus, width, height, [&](const Moments& m) {
    if (m.n < kMinCoreArea || m.elongation() > kMaxNucleusElongation) return;
    out.nucleus_diameters_px.push_back(2 * std::sqrt(m.n / M_PI));
    out.nucleus_areas_px.push_back(m.n);
  });
}

}  // namespace

NucleusSample measure_nuclei(const std::uint8_t* rgb, int width, int height) {
  const std::size_t n = static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  std::vector<std::uint8_t> bins(n), is_stained(n);
  std::array<std::uint8_t, 256> bin_of_red{};
  for (int r = 0; r < 256; ++r) bin_of_red[r] = od_bin(-std::log((r + 1) / 256.0));
  std::size_t stained_px = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* p = rgb + 3 * i;
    bins[i] = bin_of_red[p[0]];
    is_stained[i] = stained(p);
    stained_px += is_stained[i];
  }
  NucleusSample out;
  out.tissue_fraction = n ? static_cast<double>(stained_px) / n : 0;
  out.chroma_detail = chroma_detail(rgb, width, height);
  if (stained_px == 0) return out;
  const int t1 = otsu_bins(bins, is_stained, -1);
  const int t2 = otsu_bins(bins, is_stained, t1);
  std::vector<std::uint8_t> core(n);
  for (std::size_t i = 0; i < n; ++i) core[i] = is_stained[i] && bins[i] > t2;
  for_each_component(core, width, height, [&](const Moments& m) {
    if (m.n < kMinCoreArea || m.elongation() > kMaxElongation) return;
    out.diameters_px.push_back(2 * std::sqrt(m.n / M_PI));
    out.areas_px.push_back(m.n);
  });
  measure_whole_nuclei(rgb, is_stained, width, height, out);
  return out;
}

namespace {

// The estimate from the nuclear cores alone (the calibrated ruler).
MppEstimate core_estimate(const std::vector<NucleusSample>& regions, double downsample) {
  MppEstimate e;
  e.regions = static_cast<int>(regions.size());
  const double detail = median_chroma_detail(regions);
  e.chroma_subsampled = detail > 0 && detail < kMaxSubsampledChromaDetail;
  const double blur = e.chroma_subsampled ? kSubsampledBlurPx : kCoreBlurPx;
  std::vector<const NucleusSample*> all;
  std::vector<double> logs;  // per-region log estimates
  for (const auto& r : regions) {
    all.push_back(&r);
    e.nuclei += static_cast<std::int64_t>(r.diameters_px.size());
    if (static_cast<std::int64_t>(r.diameters_px.size()) >= kMinRegionNuclei)
      logs.push_back(std::log(kNucleusCoreUm / (deblurred(median_core({&r}), blur) * downsample)));
  }
  if (e.nuclei == 0) {
    e.why = e.regions ? "no nuclei found" : "no tissue found";
    return e;
  }
  const double measured = median_core(all);
  e.core_px = measured * downsample;
  const double mpp = kNucleusCoreUm / (deblurred(measured, blur) * downsample);
  const double gain = blur_gain(measured, blur);
  double spread = 0;
  if (logs.size() >= 2) {
    const double mean = std::accumulate(logs.begin(), logs.end(), 0.0) / logs.size();
    for (double l : logs) spread += (l - mean) * (l - mean);
    spread = std::sqrt(spread / (logs.size() - 1));
  }
  const double noise = kCoreNoise * gain;
  double half = std::sqrt(kRulerSpread * kRulerSpread + noise * noise +
                          4 * spread * spread / std::max<std::size_t>(1, logs.size()));
  e.uncertain = true;
  if (e.nuclei < kMinNuclei) {
    e.why = "only " + std::to_string(e.nuclei) + " nuclei found";
  } else if (gain > kMaxBlurGain) {
    e.why = "nuclei too few pixels across to measure (" + decimal_text(measured, 1) + " px)";
  } else if (spread > kMaxRegionSpread) {
    e.why = "tissue regions disagree (spread " + decimal_text(spread * 100, 0) + "%)";
  } else {
    e.uncertain = false;
  }
  if (gain > kMaxBlurGain) {
    // Blur only enlarges cores, so the measured one, not deblurred, gives a lower bound;
    // how much coarser the truth is, deblurring cannot tell: up to 4 times.
    const double bound = kNucleusCoreUm / (measured * downsample);
    e.low = std::max(kMinPlausibleMpp, bound);
    e.high = std::min(kMaxPlausibleMpp, bound * 4);
    e.mpp = std::sqrt(*e.low * *e.high);
    return e;
  }
  if (e.uncertain) half = std::max(half, kUncertainHalfWidth);
  e.mpp = mpp;
  e.low = std::max(kMinPlausibleMpp, mpp * std::exp(-half));
  e.high = std::min(kMaxPlausibleMpp, mpp * std::exp(half));
  return e;
}

// The area-weighted median equivalent diameter of the whole nuclei of `samples` between
// `lo` and `hi` pixels (0 for none), and how many there were.
double median_nucleus(const std::vector<const NucleusSample*>& samples, double lo, double hi,
                      std::int64_t& count) {
  std::vector<std::pair<double, double>> values;
  for (const auto* s : samples)
    for (std::size_t i = 0; i < s->nucleus_diameters_px.size(); ++i)
      if (s->nucleus_diameters_px[i] >= lo && s->nucleus_diameters_px[i] <= hi)
        values.emplace_back(s->nucleus_diameters_px[i], s->nucleus_areas_px[i]);
  count = static_cast<std::int64_t>(values.size());
  return weighted_quantile(std::move(values), 0.5);
}

// The standard deviation of `logs` (0 for fewer than 2).
double spread_of(const std::vector<double>& logs) {
  if (logs.size() < 2) return 0;
  const double mean = std::accumulate(logs.begin(), logs.end(), 0.0) / logs.size();
  double sum = 0;
  for (double l : logs) sum += (l - mean) * (l - mean);
  return std::sqrt(sum / (logs.size() - 1));
}

// The half-width (natural-log units) of the whole nuclei's interval: the ruler's own
// (kNucleusSpread) and how far the nuclei read may be from the slide's mix of cells — the
// spread between `regions` regions where there are enough to measure it, and never less than
// a sample of `nuclei` whole nuclei allows (kNucleusMixSpread): one small image is one
// neighbourhood, whose cells need not be the slide's.
double nucleus_half_width(std::int64_t nuclei, std::size_t regions, double spread) {
  const double between = regions >= 2 ? 4 * spread * spread / regions : 0;
  const double mix = 4 * kNucleusMixSpread * kNucleusMixSpread /
                     static_cast<double>(std::max<std::int64_t>(1, nuclei));
  return std::sqrt(kNucleusSpread * kNucleusSpread + std::max(between, mix));
}

std::string too_few_nuclei(std::int64_t nuclei) {
  return "too few whole nuclei (" + std::to_string(nuclei) + ", fewer than " +
         std::to_string(kMinCertainNuclei) + ")";
}

// Too few whole nuclei: the cores' estimate stands alone. Already uncertain for the cores' own
// doubts, it keeps them; else it is uncertain now (the cores' ruler was fitted on one slide,
// and the few whole nuclei found say little of the slide's mix of cells), its interval at
// least as wide as that many whole nuclei (kMinMixNuclei at least) would allow.
void cores_alone(MppEstimate& e) {
  if (e.uncertain) return;
  e.uncertain = true;
  e.why = too_few_nuclei(e.whole_nuclei) + "; the nuclear cores' ruler alone";
  const std::int64_t nuclei = std::max<std::int64_t>(e.whole_nuclei, kMinMixNuclei);
  const double half =
      std::max({nucleus_half_width(nuclei, 0, 0), kUncertainHalfWidth, std::log(*e.high / *e.mpp)});
  e.low = std::max(kMinPlausibleMpp, *e.mpp * std::exp(-half));
  e.high = std::min(kMaxPlausibleMpp, *e.mpp * std::exp(half));
}

// The whole-nucleus estimate replacing `e`'s (the cores'), when enough round nuclei are found.
// The cores give the scale of the speck filter: a whole nucleus is at least as wide as the
// typical core (deblurred) and at most kMaxNucleusOverCore times it (wider: touching nuclei).
void nucleus_estimate(const std::vector<NucleusSample>& regions, double downsample,
                      MppEstimate& e) {
  const double core = kNucleusCoreUm / (*e.mpp * downsample);  // px of the level read
  const double lo = core, hi = kMaxNucleusOverCore * core;
  std::vector<const NucleusSample*> all;
  std::vector<double> logs;
  for (const auto& r : regions) {
    all.push_back(&r);
    std::int64_t n = 0;
    const double d = median_nucleus({&r}, lo, hi, n);
    if (n >= kMinRegionNuclei) logs.push_back(std::log(kNucleusUm / (d * downsample)));
  }
  const double d = median_nucleus(all, lo, hi, e.whole_nuclei);
  if (e.whole_nuclei < kMinNuclei) return cores_alone(e);
  e.nucleus_px = d * downsample;
  const double mpp = kNucleusUm / e.nucleus_px;
  e.from_cores = e.mpp;
  e.from_nuclei = mpp;
  e.nucleus_regions = static_cast<int>(logs.size());
  const double spread = spread_of(logs);
  // The core estimate's own doubts (too few cores, cores too blurred to deblur) no longer
  // apply; the whole nuclei's do.
  double half = nucleus_half_width(e.whole_nuclei, logs.size(), spread);
  e.uncertain = true;
  if (spread > kMaxRegionSpread)
    e.why = "tissue regions disagree (spread " + decimal_text(spread * 100, 0) + "%)";
  else if (e.whole_nuclei < kMinCertainNuclei)
    e.why = too_few_nuclei(e.whole_nuclei);
  else
    e.uncertain = false, e.why.clear();
  if (e.uncertain) half = std::max(half, kUncertainHalfWidth);
  e.mpp = mpp;
  e.low = std::max(kMinPlausibleMpp, mpp * std::exp(-half));
  e.high = std::min(kMaxPlausibleMpp, mpp * std::exp(half));
}

}  // namespace

MppEstimate estimate_from_samples(const std::vector<NucleusSample>& regions, double downsample) {
  MppEstimate e = core_estimate(regions, downsample);
  if (e.mpp) nucleus_estimate(regions, downsample, e);
  return e;
}

namespace {

// Where the tissue is: a mask and the level-0 pixels per mask pixel.
struct TissueMap {
  Mask mask;
  double dx = 1, dy = 1;
};

// A slide whose thumbnail would need much of level 0 decoded (one level, large) is not
// thumbnailed: kSampleGrid² small patches of level 0 are read instead, each a mask pixel
// (tissue when most of its pixels are stained), so the estimate never reads the whole level.
constexpr int kSampleGrid = 16;
constexpr int kSamplePx = 32;
constexpr double kMaxThumbnailSourcePx = 2e6;

// Level 0 held in memory (Slide::held_level) where the estimate's tissue map comes from level 0:
// then every read of the estimate, and the slide's tissue thumbnail and QC picture, share one
// read of it. Null where level 0 is too large to hold, or a coarser level serves the map.
const io::RgbImage* held_level0(const Slide& slide, int map_level) {
  return map_level == 0 ? slide.held_level(0) : nullptr;
}

// w × h level-0 pixels at (x, y), inside the slide: from `held` where given, else read.
void read_level0(const Slide& slide, const io::RgbImage* held, std::int64_t x, std::int64_t y,
                 std::int64_t w, std::int64_t h, std::uint8_t* rgb) {
  if (!held) return slide.read_rgb(x, y, 0, w, h, rgb);
  const auto row = static_cast<std::size_t>(w) * 3;
  for (std::int64_t j = 0; j < h; ++j)
    std::memcpy(rgb + j * row,
                held->pixels.data() + (static_cast<std::size_t>(y + j) * held->width + x) * 3, row);
}

TissueMap sampled_map(const Slide& slide, const io::RgbImage* held) {
  const Level& l0 = slide.geometry().levels[0];
  TissueMap map;
  map.mask.width = map.mask.height = kSampleGrid;
  map.mask.data.assign(kSampleGrid * kSampleGrid, 0);
  map.dx = static_cast<double>(l0.width) / kSampleGrid;
  map.dy = static_cast<double>(l0.height) / kSampleGrid;
  const std::int64_t pw = std::min<std::int64_t>(kSamplePx, l0.width);
  const std::int64_t ph = std::min<std::int64_t>(kSamplePx, l0.height);
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(pw * ph * 3));
  for (int j = 0; j < kSampleGrid; ++j)
    for (int i = 0; i < kSampleGrid; ++i) {
      const auto x =
          std::clamp<std::int64_t>(std::llround((i + 0.5) * map.dx) - pw / 2, 0, l0.width - pw);
      const auto y =
          std::clamp<std::int64_t>(std::llround((j + 0.5) * map.dy) - ph / 2, 0, l0.height - ph);
      read_level0(slide, held, x, y, pw, ph, rgb.data());
      std::int64_t count = 0;
      for (std::int64_t k = 0; k < pw * ph; ++k) count += stained(&rgb[3 * k]);
      map.mask.data[j * kSampleGrid + i] = 2 * count >= pw * ph;
    }
  return map;
}

// The downsample of the tissue map's thumbnail: 512 pixels along the slide's long side.
double map_downsample(const Slide& slide) {
  const Level& l0 = slide.geometry().levels[0];
  return static_cast<double>(std::max(l0.width, l0.height)) / 512.0;
}

// The level a thumbnail at `downsample` is made from: the coarsest at or finer than it.
int thumbnail_level(const Slide& slide, double downsample) {
  const auto& levels = slide.geometry().levels;
  int out = 0;
  for (std::size_t l = 0; l < levels.size(); ++l)
    if (levels[l].downsample <= downsample * (1 + kLevelTolerance) &&
        levels[l].downsample >= levels[out].downsample)
      out = static_cast<int>(l);
  return out;
}

TissueMap tissue_map(const Slide& slide, const io::RgbImage* held) {
  const auto& levels = slide.geometry().levels;
  const Level& l0 = levels[0];
  const double downsample = map_downsample(slide);
  // What the thumbnail would decode: the coarsest level at or finer than its downsample.
  double source_px = static_cast<double>(l0.width) * l0.height;
  for (const auto& l : levels)
    if (l.downsample <= downsample * (1 + kLevelTolerance))
      source_px = std::min(source_px, static_cast<double>(l.width) * l.height);
  const auto* flat = slide.flat_info();
  const bool whole_decode = flat && flat->format != "tiff";  // PNG, JPEG: decoded whole anyway
  if (source_px > kMaxThumbnailSourcePx && !whole_decode) return sampled_map(slide, held);
  const Thumbnail thumb = slide_thumbnail(slide, downsample);
  return {tissue_mask(thumb.image.pixels.data(), thumb.image.width, thumb.image.height, {}),
          thumb.dx, thumb.dy};
}

// Up to `count` boxes of at most `side` level-0 pixels where the tissue is: the slide cut into
// a grid of `side`-pixel tiles (those at the right and bottom edges clipped to the slide),
// picked by pick_regions.
std::vector<std::array<std::int64_t, 4>> tissue_regions(const Slide& slide,
                                                        const io::RgbImage* held, int count,
                                                        std::int64_t side, double& fraction) {
  const Level& l0 = slide.geometry().levels[0];
  const TissueMap map = tissue_map(slide, held);
  const IntegralMask integral(map.mask);
  fraction = integral.fraction(0, 0, map.mask.width, map.mask.height);
  std::vector<RegionCandidate> tiles;
  for (std::int64_t y = 0; y < l0.height; y += side)
    for (std::int64_t x = 0; x < l0.width; x += side) {
      const std::int64_t w = std::min(side, l0.width - x), h = std::min(side, l0.height - y);
      tiles.push_back(
          {{x, y, w, h},
           integral.fraction(x / map.dx, y / map.dy, (x + w) / map.dx, (y + h) / map.dy)});
    }
  return pick_regions(tiles, count);
}

}  // namespace

std::vector<std::array<std::int64_t, 4>> pick_regions(const std::vector<RegionCandidate>& tiles,
                                                      int count) {
  std::vector<std::array<std::int64_t, 4>> full, out;
  std::vector<RegionCandidate> partial;
  for (const auto& t : tiles) {
    if (t.tissue >= kFullRegion)
      full.push_back(t.box);
    else if (t.tissue >= kMinRegionTissue)
      partial.push_back(t);
  }
  const std::size_t n = static_cast<std::size_t>(std::max(0, count));
  if (full.size() <= n) {
    out = full;
  } else {  // systematic sampling: n of them evenly spaced in reading order
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(full[static_cast<std::size_t>((i + 0.5) * full.size() / n)]);
  }
  std::stable_sort(partial.begin(), partial.end(),
                   [](const auto& a, const auto& b) { return a.tissue > b.tissue; });
  for (const auto& p : partial)
    if (out.size() < n) out.push_back(p.box);
  return out;
}

MppEstimate estimate_mpp(const Slide& slide, const EstimateOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<NucleusSample> samples;
  std::vector<std::uint8_t> rgb;
  double fraction = 0;
  const io::RgbImage* held = options.share_level0
                                 ? held_level0(slide, thumbnail_level(slide, map_downsample(slide)))
                                 : nullptr;
  for (const auto& box :
       tissue_regions(slide, held, options.regions, options.region_px, fraction)) {
    rgb.resize(static_cast<std::size_t>(box[2]) * box[3] * 3);
    read_level0(slide, held, box[0], box[1], box[2], box[3], rgb.data());
    samples.push_back(
        measure_nuclei(rgb.data(), static_cast<int>(box[2]), static_cast<int>(box[3])));
  }
  MppEstimate e = estimate_from_samples(samples, 1.0);
  e.tissue_fraction = fraction;
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return e;
}

nlohmann::json to_json(const MppEstimate& e) {
  const auto value = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  return {{"mpp", value(e.mpp)},
          {"low", value(e.low)},
          {"high", value(e.high)},
          {"uncertain", e.uncertain},
          {"why", e.why},
          {"regions", e.regions},
          {"nuclei", e.nuclei},
          {"core_px", e.core_px},
          {"seconds", e.seconds},
          {"chroma_subsampled", e.chroma_subsampled},
          {"whole_nuclei", e.whole_nuclei},
          {"nucleus_regions", e.nucleus_regions},
          {"nucleus_px", e.nucleus_px},
          {"from_cores", value(e.from_cores)},
          {"from_nuclei", value(e.from_nuclei)}};
}

std::string decimal_text(double v, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, v);
  std::string out = text;
  if (out.find('.') != std::string::npos) {
    out.erase(out.find_last_not_of('0') + 1);
    if (out.back() == '.') out.pop_back();
  }
  return out == "-0" ? "0" : out;
}

std::string estimate_basis(const MppEstimate& e) {
  const auto count = [](std::int64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  const std::string regions = " in " + count(e.regions, "region", "regions");
  if (e.from_nuclei)
    return count(e.whole_nuclei, "whole nucleus", "whole nuclei") + regions + " (" +
           count(e.nuclei, "nuclear core", "nuclear cores") + ")";
  return count(e.nuclei, "nuclear core", "nuclear cores") + regions + " (" +
         count(e.whole_nuclei, "whole nucleus", "whole nuclei") + ", fewer than " +
         std::to_string(kMinNuclei) + ")";
}

std::string estimate_text(const MppEstimate& e) {
  if (!e.mpp) return "none (" + e.why + ")";
  const auto round3 = [](double v) { return decimal_text(v, 3); };
  return round3(*e.mpp) + " µm/px (" + round3(*e.low) + "–" + round3(*e.high) +
         (e.uncertain ? ", uncertain: " + e.why : std::string()) + ")";
}

}  // namespace mltool::slide
