// How a tile becomes model input: a plain TorchScript model's resize (bilinear on floats), or
// an encoder card's rule — Pillow's own uint8 resampling, bit for bit, then a centre crop as
// torchvision's CenterCrop takes it — followed by x / 255 and (x - mean) / std.
#include <cmath>
#include <vector>

#include "mltool/features/extractor.hpp"

namespace mltool::features {
namespace {

namespace F = torch::nn::functional;

// Pillow's Resample.c: coefficients are computed in double, normalised, then held as
// fixed-point integers of PRECISION_BITS; each pass sums pixel × coefficient from 1 << 21,
// shifts right by 22 and clips to 0..255.
constexpr int kPrecisionBits = 32 - 8 - 2;

double bilinear_filter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double bicubic_filter(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// The out × in matrix of Pillow's fixed-point coefficients (precompute_coeffs and
// normalize_coeffs_8bpc), as doubles: every entry an integer.
torch::Tensor pil_coefficients(int in_size, int out_size, bool bicubic) {
  const double support_unit = bicubic ? 2.0 : 1.0;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = support_unit * filterscale;
  torch::Tensor m = torch::zeros({out_size, in_size}, torch::kFloat64);
  auto a = m.accessor<double, 2>();
  std::vector<double> k;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    k.assign(static_cast<std::size_t>(xmax), 0.0);
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double arg = (x + xmin - center + 0.5) * ss;
      k[x] = bicubic ? bicubic_filter(arg) : bilinear_filter(arg);
      ww += k[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[x] / ww : k[x];
      const double fixed = w * (1 << kPrecisionBits);
      a[xx][xmin + x] = static_cast<double>(static_cast<int>(w < 0 ? -0.5 + fixed : 0.5 + fixed));
    }
  }
  return m;
}

// One pass over the last dimension of float64 pixels N×3×H×W: exact integer sums (each below
// 2^40), then Pillow's rounding and clipping.
torch::Tensor pil_pass(const torch::Tensor& x, const torch::Tensor& coefficients) {
  const torch::Tensor sums = torch::matmul(x, coefficients.t()) + (1 << (kPrecisionBits - 1));
  return torch::floor(sums / (1 << kPrecisionBits)).clamp(0, 255);
}

// torchvision's CenterCrop offset: int(round((size - crop) / 2.0)), Python's round (half to
// even).
std::int64_t crop_offset(std::int64_t size, std::int64_t crop) {
  const std::int64_t d = size - crop;
  const std::int64_t half = d / 2;
  return d % 2 == 0 || half % 2 == 0 ? half : half + 1;
}

// The card's rule on uint8 N×H×W×3 → float32 N×3×C×C in [0, 1].
torch::Tensor resize_and_crop(const torch::Tensor& nhwc, const ResizeRule& rule) {
  torch::Tensor x;
  const bool same = nhwc.size(1) == rule.resize && nhwc.size(2) == rule.resize;
  if (same) {  // Pillow returns a copy, torchvision's tensor resize returns the input
    x = nhwc.permute({0, 3, 1, 2}).to(torch::kFloat32).div(255.0);
  } else if (rule.antialias) {
    x = pil_resize(nhwc, rule.resize, rule.bicubic).permute({0, 3, 1, 2}).to(torch::kFloat32).div(255.0);
  } else {
    x = nhwc.permute({0, 3, 1, 2}).to(torch::kFloat32).div(255.0);
    x = F::interpolate(x, F::InterpolateFuncOptions()
                              .size(std::vector<int64_t>{rule.resize, rule.resize})
                              .mode(rule.bicubic ? torch::kBicubic : torch::kBilinear)
                              .align_corners(false)
                              .antialias(false));
  }
  if (rule.crop == rule.resize) return x;
  const auto top = crop_offset(x.size(2), rule.crop), left = crop_offset(x.size(3), rule.crop);
  return x.narrow(2, top, rule.crop).narrow(3, left, rule.crop);
}

}  // namespace

torch::Tensor pil_resize(const torch::Tensor& nhwc, int size, bool bicubic) {
  const auto h = nhwc.size(1), w = nhwc.size(2);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(nhwc.device());
  const torch::Tensor horizontal =
      pil_coefficients(static_cast<int>(w), size, bicubic).to(opts.device());
  const torch::Tensor vertical =
      pil_coefficients(static_cast<int>(h), size, bicubic).to(opts.device());
  // A few tiles at a time: float64 intermediates of a whole batch would take gigabytes.
  constexpr std::int64_t kChunk = 16;
  std::vector<torch::Tensor> out;
  for (std::int64_t i = 0; i < nhwc.size(0); i += kChunk) {
    torch::Tensor x =
        nhwc.narrow(0, i, std::min(kChunk, nhwc.size(0) - i)).permute({0, 3, 1, 2}).to(opts);
    if (w != size) x = pil_pass(x, horizontal);  // Pillow: horizontal first
    if (h != size) x = pil_pass(x.transpose(2, 3), vertical).transpose(2, 3);
    out.push_back(x.to(torch::kUInt8).permute({0, 2, 3, 1}));
  }
  return torch::cat(out, 0).contiguous();
}

torch::Tensor preprocess(const torch::Tensor& nhwc, const Preprocess& p) {
  torch::Tensor x;
  if (p.rule) {
    x = resize_and_crop(nhwc, *p.rule);
  } else {
    x = nhwc.permute({0, 3, 1, 2}).to(torch::kFloat32).div(255.0);
    const auto size = p.input_size;
    if (x.size(2) != size || x.size(3) != size) {
      const bool shrink = x.size(2) > size || x.size(3) > size;
      x = F::interpolate(x, F::InterpolateFuncOptions()
                                .size(std::vector<int64_t>{size, size})
                                .mode(torch::kBilinear)
                                .align_corners(false)
                                .antialias(shrink));
    }
  }
  const auto opts = x.options();
  const torch::Tensor mean =
      torch::tensor({p.mean[0], p.mean[1], p.mean[2]}, opts).view({1, 3, 1, 1});
  const torch::Tensor std = torch::tensor({p.std[0], p.std[1], p.std[2]}, opts).view({1, 3, 1, 1});
  return ((x - mean) / std).contiguous();
}

}  // namespace mltool::features
