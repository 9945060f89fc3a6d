// torchstain's arithmetic (torchstain/torch/normalizers/macenko.py and reinhard.py,
// torchstain/torch/utils) over a batch of tiles; see stain_math.hpp for what keeps each tile's
// bits its own.
#include "stain_math.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "mltool/features/macenko.hpp"

namespace mltool::features::stain_math {
namespace {

using macenko::kAlpha;
using macenko::kBeta;
using macenko::kIo;

// `op` on each tile's slices of `args` (dimension 0) on its own on the CPU, the tiles spread
// over the math threads: which elements the vectorised code computes and which the scalar
// code (their log, exp, atan2, pow differ in the last bit) then depends on the tile alone.
// Elsewhere one call over the batch, whose kernels compute every element alike. `op` must
// work on a tile's slices and on the whole batch alike (elementwise; stack on dimension -1).
template <class Op>
torch::Tensor per_tile(const Op& op, const std::vector<torch::Tensor>& args) {
  if (!args.front().device().is_cpu()) return op(args);
  const std::int64_t n = args.front().size(0);
  std::vector<torch::Tensor> out(static_cast<std::size_t>(n));
  at::parallel_for(0, n, 1, [&](std::int64_t begin, std::int64_t end) {
    const c10::InferenceMode guard;
    for (std::int64_t i = begin; i < end; ++i) {
      std::vector<torch::Tensor> slices;
      for (const auto& a : args) slices.push_back(a[i]);
      out[static_cast<std::size_t>(i)] = op(slices);
    }
  });
  return torch::stack(out);
}

// torchstain's percentile of each row of `x` (R×P) over its `valid` elements (R×P booleans,
// undefined: all), n[r] of them: the nearest rank k = 1 + round(q / 100 · (n - 1)), Python's
// round (half to even, as nearbyint in the default rounding mode), of the row with the others
// set to +inf: the rows sorted at once and each one's k-th value gathered (exact).
torch::Tensor percentile(const torch::Tensor& x, const torch::Tensor& valid,
                         const std::vector<std::int64_t>& n, double q) {
  const torch::Tensor v =
      valid.defined() ? torch::where(valid, x, std::numeric_limits<double>::infinity()) : x;
  std::vector<std::int64_t> index;
  for (const std::int64_t count : n) {
    const std::int64_t m = std::max<std::int64_t>(count, 1);
    index.push_back(
        static_cast<std::int64_t>(std::nearbyint(.01 * q * static_cast<double>(m - 1))));
  }
  const torch::Tensor k = torch::tensor(index).to(v.device()).unsqueeze(1);
  return std::get<0>(v.sort(-1)).gather(1, k).squeeze(1);
}

// Σ_j w(j) · v[:, j] over the 3 channels of N×3×P, in that order of j: the weights scalars or
// N×1 tensors (one per tile).
template <class W>
torch::Tensor channel_sum(const torch::Tensor& v, const W& w) {
  return v.select(1, 0) * w(0) + v.select(1, 1) * w(1) + v.select(1, 2) * w(2);
}

// Entry (i, j) of each of a batch's small matrices (N×R×C) as N×1, to scale a tile's pixels.
torch::Tensor entry(const torch::Tensor& m, std::int64_t i, std::int64_t j) {
  return m.select(1, i).select(1, j).unsqueeze(-1);
}

// The eigenvectors of the two largest eigenvalues of each symmetric 3×3 matrix (N×3×3):
// N×3×2, torch.linalg.eigh's on the batch's device (LAPACK's on the CPU, torchstain's; cuSOLVER's
// on a GPU, whose signs may differ: they matter only on tiles whose stain angles straddle ±π).
torch::Tensor eigen_plane(const torch::Tensor& cov) {
  return std::get<1>(torch::linalg_eigh(cov)).narrow(2, 1, 2);
}

// torchstain's cov of each tile's stained optical densities: N×3×3 float32.
torch::Tensor covariance(const Density& d) {
  const auto device = d.od.device();
  const torch::Tensor m = d.stained.to(torch::kFloat32).unsqueeze(1);
  const torch::Tensor count = torch::tensor(d.counts).to(device, torch::kFloat32);
  const torch::Tensor& od = d.od;
  const torch::Tensor x = (od - (tree_sum(od * m) / count.unsqueeze(-1)).unsqueeze(-1)) * m;
  std::vector<torch::Tensor> entries(9);
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t j = i; j < 3; ++j) {
      const torch::Tensor s = tree_sum(x.select(1, i) * x.select(1, j)) / (count - 1);
      entries[static_cast<std::size_t>(3 * i + j)] = s;
      entries[static_cast<std::size_t>(3 * j + i)] = s;
    }
  return torch::stack(entries, 1).view({-1, 3, 3});
}

// Σ_j m[i][j] v_j for i = 0, 1, 2, in that order of j: a 3×3 CPU matrix on N×3×P.
torch::Tensor mix(const torch::Tensor& m, const torch::Tensor& v) {
  std::vector<torch::Tensor> out;
  for (std::int64_t i = 0; i < 3; ++i)
    out.push_back(channel_sum(v, [&](std::int64_t j) { return m[i][j].item<float>(); }));
  return torch::stack(out, 1);
}

// torchstain's colour constants (utils/rgb2lab.py, lab2rgb.py), on the CPU: the inverse as
// torch.linalg.inv computes it there.
struct LabConstants {
  torch::Tensor rgb2xyz, xyz2rgb, white;
};

const LabConstants& lab_constants() {
  static const LabConstants k = [] {
    LabConstants c;
    c.rgb2xyz = torch::tensor({0.412453f, 0.357580f, 0.180423f, 0.212671f, 0.715160f, 0.072169f,
                               0.019334f, 0.119193f, 0.950227f})
                    .view({3, 3});
    c.xyz2rgb = torch::linalg_inv(c.rgb2xyz);
    c.white = torch::tensor({0.95047f, 1.f, 1.08883f});
    return c;
  }();
  return k;
}

// -log((v + 1) / Io) for v = 0..255, float32: the CPU path's table.
const torch::Tensor& od_table() {
  static const torch::Tensor t =
      torch::from_blob(const_cast<float*>(macenko::od_table().data()), {256}, torch::kFloat32)
          .clone();
  return t;
}

}  // namespace

torch::Tensor tree_sum(torch::Tensor x) {
  while (x.size(-1) > 1) {
    const std::int64_t n = x.size(-1), h = n / 2;
    torch::Tensor y = x.narrow(-1, 0, h) + x.narrow(-1, h, h);
    x = n % 2 ? torch::cat({y, x.narrow(-1, 2 * h, 1)}, -1) : y;
  }
  return x.select(-1, 0);
}

Density density(const torch::Tensor& nhwc) {
  const std::int64_t n = nhwc.size(0);
  const torch::Tensor px = nhwc.reshape({n, -1, 3}).permute({0, 2, 1}).contiguous();
  Density d;
  d.od = od_table()
             .to(nhwc.device())
             .index_select(0, px.reshape(-1).to(torch::kInt32))
             .view(px.sizes());
  d.stained = (d.od >= kBeta).all(1);
  const torch::Tensor counts = d.stained.sum(1).to(torch::kCPU, torch::kLong).contiguous();
  d.counts.assign(counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + n);
  return d;
}

Density select(const Density& d, const std::vector<std::int64_t>& rows) {
  const torch::Tensor idx = torch::tensor(rows).to(d.od.device());
  Density out{d.od.index_select(0, idx), d.stained.index_select(0, idx), {}};
  for (const std::int64_t r : rows) out.counts.push_back(d.counts[static_cast<std::size_t>(r)]);
  return out;
}

torch::Tensor stain_matrices(const Density& d) {
  const torch::Tensor e = eigen_plane(covariance(d));  // N×3×2
  // That = ODhat · eigvecs, phi = atan2(That[:, 1], That[:, 0]) on every pixel; the
  // percentiles take the stained ones.
  const auto project = [&](std::int64_t k) {
    return channel_sum(d.od, [&](std::int64_t j) { return entry(e, j, k); });
  };
  const torch::Tensor phi =
      per_tile([](const auto& a) { return torch::atan2(a[0], a[1]); }, {project(1), project(0)});
  const torch::Tensor lo = percentile(phi, d.stained, d.counts, kAlpha);
  const torch::Tensor hi = percentile(phi, d.stained, d.counts, 100 - kAlpha);
  const torch::Tensor trig = per_tile(
      [](const auto& a) {
        return torch::stack(
            {torch::cos(a[0]), torch::sin(a[0]), torch::cos(a[1]), torch::sin(a[1])}, -1);
      },
      {lo, hi});                         // N×4
  const auto v = [&](std::int64_t at) {  // eigvecs · (cos, sin): N×3
    return e.select(2, 0) * trig.select(1, at).unsqueeze(-1) +
           e.select(2, 1) * trig.select(1, at + 1).unsqueeze(-1);
  };
  const torch::Tensor v_min = v(0), v_max = v(2);
  const torch::Tensor first = (v_min.select(1, 0) > v_max.select(1, 0)).view({-1, 1, 1});
  return torch::where(first, torch::stack({v_min, v_max}, 2), torch::stack({v_max, v_min}, 2));
}

torch::Tensor concentrations(const torch::Tensor& he, const torch::Tensor& od) {
  // The least-squares solution is unique: c = (HeᵀHe)⁻¹Heᵀ od, the 2×2 inverse in closed
  // form, each tile's 2×3 matrix applied as a fixed sum of three products per value.
  const auto g = [&](std::int64_t j, std::int64_t k) {  // (HeᵀHe)[j][k]: N
    const auto at = [&](std::int64_t i, std::int64_t c) { return he.select(1, i).select(1, c); };
    return at(0, j) * at(0, k) + at(1, j) * at(1, k) + at(2, j) * at(2, k);
  };
  const torch::Tensor g00 = g(0, 0), g01 = g(0, 1), g11 = g(1, 1);
  const torch::Tensor det = g00 * g11 - g01 * g01;
  const torch::Tensor inv[2][2] = {{g11 / det, -g01 / det}, {-g01 / det, g00 / det}};
  const auto row = [&](std::int64_t j) {  // row j of the pseudo-inverse: N×3
    return inv[j][0].unsqueeze(-1) * he.select(2, 0) + inv[j][1].unsqueeze(-1) * he.select(2, 1);
  };
  const torch::Tensor m0 = row(0), m1 = row(1);
  const auto apply = [&](const torch::Tensor& m) {
    return channel_sum(od, [&](std::int64_t i) { return m.select(1, i).unsqueeze(-1); });
  };
  return torch::stack({apply(m0), apply(m1)}, 1);
}

torch::Tensor max_concentrations(const torch::Tensor& c) {
  const std::int64_t n = c.size(0), p = c.size(2);
  return percentile(c.reshape({2 * n, p}), {}, std::vector<std::int64_t>(2 * n, p), 99)
      .view({n, 2});
}

torch::Tensor macenko_pixels(const torch::Tensor& c, const torch::Tensor& max_c,
                             const torch::Tensor& he_ref, const torch::Tensor& max_c_ref) {
  const torch::Tensor s = c * (max_c_ref.to(c.device()).unsqueeze(0) / max_c).unsqueeze(-1);
  std::vector<torch::Tensor> mixed;
  for (std::int64_t i = 0; i < 3; ++i)
    mixed.push_back(s.select(1, 0) * he_ref[i][0].item<float>() +
                    s.select(1, 1) * he_ref[i][1].item<float>());
  return per_tile([](const auto& a) { return torch::exp(-a[0]); }, {torch::stack(mixed, 1)}) * kIo;
}

torch::Tensor lab(const torch::Tensor& nhwc) {
  const LabConstants& k = lab_constants();
  const torch::Tensor rgb =
      nhwc.reshape({nhwc.size(0), -1, 3}).permute({0, 2, 1}).contiguous().to(torch::kFloat32) / 255;
  torch::Tensor arr = torch::where(
      rgb > 0.04045,
      per_tile([](const auto& a) { return torch::pow((a[0] + 0.055) / 1.055, 2.4); }, {rgb}),
      rgb / 12.92);
  arr = mix(k.rgb2xyz, arr) * torch::reciprocal(k.white).to(rgb.device()).view({1, 3, 1});
  arr = torch::where(arr > 0.008856,
                     per_tile([](const auto& a) { return torch::pow(a[0], 1.0 / 3); }, {arr}),
                     7.787 * arr + 16.0 / 116);
  const torch::Tensor x = arr.select(1, 0), y = arr.select(1, 1), z = arr.select(1, 2);
  const torch::Tensor l = ((116. * y) - 16.) * 2.55;
  const torch::Tensor a = 500.0 * (x - y) + 128;
  const torch::Tensor b = 200.0 * (y - z) + 128;
  return torch::stack({l / 2.55, a - 128, b - 128}, 1);
}

std::pair<torch::Tensor, torch::Tensor> mean_std(const torch::Tensor& lab) {
  const auto p = static_cast<double>(lab.size(2));
  const torch::Tensor mu = tree_sum(lab) / p;
  return {mu, (tree_sum((lab - mu.unsqueeze(-1)).square()) / (p - 1)).sqrt()};
}

torch::Tensor reinhard_pixels(const torch::Tensor& lab, const torch::Tensor& mu,
                              const torch::Tensor& sd, const torch::Tensor& means,
                              const torch::Tensor& stds) {
  const LabConstants& k = lab_constants();
  std::vector<torch::Tensor> c;
  for (std::int64_t i = 0; i < 3; ++i)
    c.push_back((lab.select(1, i) - mu.select(1, i).unsqueeze(-1)) / sd.select(1, i).unsqueeze(-1) *
                    stds[i].item<float>() +
                means[i].item<float>());
  // lab_merge, then lab2rgb's own split of it.
  const torch::Tensor l = c[0] * 2.55 / 2.55, a = c[1] + 128 - 128, b = c[2] + 128 - 128;
  const torch::Tensor y = (l + 16.) / 116.;
  torch::Tensor out = torch::stack({(a / 500.) + y, y, y - (b / 200.)}, 1);
  out = torch::where(out > 0.2068966,
                     per_tile([](const auto& v) { return torch::pow(v[0], 3); }, {out}),
                     (out - 16.0 / 116) / 7.787);
  const torch::Tensor arr = mix(k.xyz2rgb, out * k.white.to(out.device()).view({1, 3, 1}));
  return torch::where(
      arr > 0.0031308,
      1.055 * per_tile([](const auto& v) { return torch::pow(v[0], 1 / 2.4); }, {arr}) - 0.055,
      arr * 12.92);
}

}  // namespace mltool::features::stain_math
