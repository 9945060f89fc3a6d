// --augment: each sample's parameters drawn on the host from a counter-based hash of (seed,
// step, sample, item, draw), the pixels transformed on the batch's device. Every colour
// operation is elementwise, or a reduction within one sample in float64, so a sample's result
// does not depend on the other samples in its batch or on how many there are.
#include "mltool/train/augment.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "mltool/util/error.hpp"
#include "mltool/util/options.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

const util::EnumNames<AugmentKind> kAugmentKinds = {
    {AugmentKind::flip, "flip"},         {AugmentKind::rot90, "rot90"},
    {AugmentKind::hed, "hed"},           {AugmentKind::brightness, "brightness"},
    {AugmentKind::contrast, "contrast"}, {AugmentKind::saturation, "saturation"}};

bool takes_amount(AugmentKind k) { return k != AugmentKind::flip && k != AugmentKind::rot90; }

// The draws each item makes per sample.
int draws(AugmentKind k) {
  switch (k) {
    case AugmentKind::flip: return 2;
    case AugmentKind::hed: return 6;
    default: return 1;
  }
}

// SplitMix64's finaliser: nearby inputs give unrelated outputs.
std::uint64_t mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from (seed, step, sample, item, draw): a function of these alone.
double uniform(std::uint64_t seed, std::int64_t step, std::int64_t sample, std::size_t item,
               int draw) {
  std::uint64_t k = mix(seed ^ 0xA0761D6478BD642Full);
  k = mix(k + static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ull);
  k = mix(k + static_cast<std::uint64_t>(sample) * 0xD6E8FEB86659FD93ull);
  k = mix(k + (static_cast<std::uint64_t>(item) * 16 + static_cast<std::uint64_t>(draw) + 1) *
                  0x2545F4914F6CDD1Dull);
  return static_cast<double>(k >> 11) * 0x1.0p-53;
}

// The parameters of `item` for one sample, from its uniforms `u`.
std::vector<double> parameters(const AugmentItem& item, const std::vector<double>& u) {
  const double x = item.amount;
  switch (item.kind) {
    case AugmentKind::flip: return {u[0] < 0.5 ? 1.0 : 0.0, u[1] < 0.5 ? 1.0 : 0.0};
    case AugmentKind::rot90: return {std::floor(u[0] * 4)};
    case AugmentKind::hed: {
      std::vector<double> p(6);
      for (int c = 0; c < 3; ++c) {
        p[c] = 1 - x + 2 * x * u[c];       // alpha ~ U(1 - sigma, 1 + sigma)
        p[3 + c] = -x + 2 * x * u[3 + c];  // beta ~ U(-sigma, sigma)
      }
      return p;
    }
    default: {
      const double lo = std::max(0.0, 1 - x);
      return {lo + (1 + x - lo) * u[0]};  // factor ~ U(max(0, 1 - X), 1 + X)
    }
  }
}

// skimage.color's Ruifrok–Johnston matrix (rgb_from_hed) and its inverse (hed_from_rgb,
// numpy.linalg.inv in float64), rows the stains / the RGB channels.
using Matrix = std::array<std::array<double, 3>, 3>;
constexpr Matrix kRgbFromHed = {{{0.65, 0.70, 0.29}, {0.07, 0.99, 0.11}, {0.27, 0.57, 0.78}}};

Matrix inverse(const Matrix& m) {
  Matrix inv{};
  const double det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
                     m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
                     m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      const int r1 = (c + 1) % 3, r2 = (c + 2) % 3, c1 = (r + 1) % 3, c2 = (r + 2) % 3;
      inv[r][c] = (m[r1][c1] * m[r2][c2] - m[r1][c2] * m[r2][c1]) / det;
    }
  return inv;
}

// x (B×H×W×3) times the 3×3 `m` on the channel axis, as row vectors (x @ m), elementwise.
torch::Tensor times(const torch::Tensor& x, const Matrix& m) {
  std::vector<torch::Tensor> out;
  for (int c = 0; c < 3; ++c)
    out.push_back(x.select(3, 0) * static_cast<float>(m[0][c]) +
                  x.select(3, 1) * static_cast<float>(m[1][c]) +
                  x.select(3, 2) * static_cast<float>(m[2][c]));
  return torch::stack(out, 3);
}

// torchvision's rgb_to_grayscale weights: B×H×W.
torch::Tensor gray(const torch::Tensor& x) {
  return x.select(3, 0) * 0.299f + x.select(3, 1) * 0.587f + x.select(3, 2) * 0.114f;
}

// Tellez et al. 2018's HED jitter in skimage.color's units: rgb2hed, each stain's
// concentration scaled by alpha and shifted by beta, hed2rgb. `p`: B×6 float32.
torch::Tensor hed_jitter(const torch::Tensor& x, const torch::Tensor& p) {
  static const Matrix hed_from_rgb = inverse(kRgbFromHed);
  const double log_adjust = std::log(1e-6);
  // log and exp in double, rounded to float: float32's on the CPU are MKL's, whose last bit
  // changes with the CPU (MKL_CBWR); double's round to the same floats everywhere.
  const auto od = x.clamp_min(1e-6f).to(torch::kFloat64).log().to(torch::kFloat32) /
                  static_cast<float>(log_adjust);
  const auto stains = times(od, hed_from_rgb).clamp_min(0.0f);
  const auto b = x.size(0);
  const auto jittered =
      stains * p.narrow(1, 0, 3).view({b, 1, 1, 3}) + p.narrow(1, 3, 3).view({b, 1, 1, 3});
  const auto log_rgb = -times(jittered * static_cast<float>(-log_adjust), kRgbFromHed);
  return log_rgb.to(torch::kFloat64).exp().to(torch::kFloat32).clamp(0.0f, 1.0f);
}

// factor * x + (1 - factor) * other, clipped to [0, 1] (torchvision's blend).
torch::Tensor blend(const torch::Tensor& x, const torch::Tensor& other, const torch::Tensor& f) {
  return (f * x + (1.0f - f) * other).clamp(0.0f, 1.0f);
}

// One colour item on x (float32 in [0, 1]) with its B×k parameters `p`.
torch::Tensor colour(const AugmentItem& item, const torch::Tensor& x, const torch::Tensor& p) {
  if (item.kind == AugmentKind::hed) return hed_jitter(x, p);
  const auto f = p.view({x.size(0), 1, 1, 1});
  switch (item.kind) {
    case AugmentKind::brightness: return (x * f).clamp(0.0f, 1.0f);
    case AugmentKind::contrast: {
      // The grey mean summed in float64: its order of summation cannot move a float32 bit.
      const auto mean = gray(x).to(torch::kFloat64).mean({1, 2}).to(torch::kFloat32);
      return blend(x, mean.view({x.size(0), 1, 1, 1}), f);
    }
    default:  // saturation
      return blend(x, gray(x).unsqueeze(3), f);
  }
}

// A geometric item: per sample, a flip of the rows (vertical) and of the columns
// (horizontal), or k quarter turns (torch.rot90 over H, W; numpy.rot90 over axes 0, 1).
torch::Tensor geometric(const AugmentItem& item, const torch::Tensor& x, const torch::Tensor& p) {
  const auto b = x.size(0);
  const auto when = [&](int column, double value) {
    return p.select(1, column).eq(static_cast<float>(value)).view({b, 1, 1, 1});
  };
  if (item.kind == AugmentKind::flip) {
    const auto h = torch::where(when(0, 1), x.flip({2}), x);
    return torch::where(when(1, 1), h.flip({1}), h);
  }
  if (x.size(1) != x.size(2))
    throw InputError("--augment rot90 needs square tiles, not " + std::to_string(x.size(1)) + "x" +
                     std::to_string(x.size(2)));
  auto out = x;
  for (int k = 1; k < 4; ++k) out = torch::where(when(0, k), x.rot90(k, {1, 2}), out);
  return out;
}

}  // namespace

std::vector<AugmentItem> parse_augment(const std::vector<std::string>& texts) {
  std::vector<AugmentItem> items;
  for (const auto& text : texts) {
    std::size_t start = 0;
    while (start <= text.size()) {
      const auto comma = std::min(text.find(',', start), text.size());
      const std::string one = text.substr(start, comma - start);
      start = comma + 1;
      const auto colon = one.find(':');
      AugmentItem item;
      item.text = one;
      item.kind = util::parse_enum(kAugmentKinds, one.substr(0, colon), "--augment item");
      const std::string name = util::name_of(kAugmentKinds, item.kind);
      if (takes_amount(item.kind) != (colon != std::string::npos))
        throw UsageError(
            "--augment: '" + one + "': " + name +
            (takes_amount(item.kind) ? " needs an amount (" + name + ":0.1)" : " takes no amount"));
      if (colon != std::string::npos) {
        item.amount = util::parse_real(one.substr(colon + 1), "--augment " + name);
        if (!(item.amount > 0 && item.amount <= 1))
          throw UsageError("--augment: '" + one + "': the amount must be in (0, 1]");
      }
      items.push_back(item);
    }
  }
  return items;
}

Augmenter::Augmenter(std::vector<AugmentItem> items, std::uint64_t seed)
    : items_(std::move(items)), seed_(seed) {}

torch::Tensor Augmenter::apply(const torch::Tensor& batch, const std::vector<std::int64_t>& ids,
                               std::int64_t step, json* params) const {
  const auto b = batch.size(0);
  if (static_cast<std::int64_t>(ids.size()) != b)
    throw UsageError("Augmenter::apply: " + std::to_string(ids.size()) + " ids for " +
                     std::to_string(b) + " samples");
  if (params) *params = json::array();
  torch::Tensor x = batch;
  bool unit = false;  // x holds float32 in [0, 1] (after the first colour item)
  for (std::size_t i = 0; i < items_.size(); ++i) {
    const auto& item = items_[i];
    const int k = draws(item.kind);
    std::vector<float> drawn;
    json rows = json::array();
    for (const auto id : ids) {
      std::vector<double> u(static_cast<std::size_t>(k));
      for (int j = 0; j < k; ++j) u[j] = uniform(seed_, step, id, i, j);
      const auto p = parameters(item, u);
      drawn.insert(drawn.end(), p.begin(), p.end());
      if (params) rows.push_back(p);
    }
    if (params) params->push_back({{"item", item.text}, {"parameters", rows}});
    const auto p = torch::from_blob(drawn.data(), {b, static_cast<std::int64_t>(drawn.size()) / b},
                                    torch::kFloat32)
                       .to(x.device(), false, /*copy=*/true);
    if (item.kind == AugmentKind::flip || item.kind == AugmentKind::rot90) {
      x = geometric(item, x, p);
      continue;
    }
    if (!unit) x = x.to(torch::kFloat32).div(255.0f);
    unit = true;
    x = colour(item, x, p);
  }
  return unit ? x.mul(255.0f).round().clamp(0, 255).to(torch::kUInt8) : x;
}

}  // namespace mltool::train
