// Stain normalisation as torchstain computes it (torchstain/torch/normalizers/macenko.py and
// reinhard.py, torchstain/torch/utils): the same float32 operations in the same order, so the
// pixels agree with it to within a rounding of the last bit (see docs/extract.md).
#include "mltool/features/stain.hpp"

#include <c10/util/ParallelGuard.h>

#include <cmath>
#include <optional>

#include "mltool/io/sha256.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::features {
namespace {

// Macenko's constants, torchstain's defaults: transmitted light, the percentile of the stain
// angles, the optical density below which a pixel counts as transparent.
constexpr int kIo = 240;
constexpr double kAlpha = 1;
constexpr double kBeta = 0.15;
// A reference image larger than this is refused: crop a representative region.
constexpr std::int64_t kMaxReferencePixels = std::int64_t{1} << 26;

// torchstain's percentile: the nearest-rank value, k = 1 + round(q / 100 * (n - 1)) with
// Python's round (half to even, as nearbyint in the default rounding mode).
torch::Tensor percentile(const torch::Tensor& t, double q) {
  const double k = 1 + std::nearbyint(.01 * q * static_cast<double>(t.numel() - 1));
  return std::get<0>(t.reshape(-1).kthvalue(static_cast<std::int64_t>(k)));
}

// Optical density of uint8 H×W×3 as P×3 float32, and which pixels are not transparent.
struct Density {
  torch::Tensor od;
  torch::Tensor stained;  // P booleans: OD >= beta in every channel
  std::int64_t count = 0;
  bool enough = false;  // kMinStainedFraction of the pixels
};

Density density(const torch::Tensor& hwc) {
  Density d;
  d.od = -torch::log((hwc.reshape({-1, 3}).to(torch::kFloat32) + 1) / kIo);
  d.stained = ~torch::any(d.od < kBeta, 1);
  d.count = d.stained.sum().item<std::int64_t>();
  d.enough = d.count >= 2 && static_cast<double>(d.count) >=
                                 kMinStainedFraction * static_cast<double>(d.od.size(0));
  return d;
}

// The least-squares solution X of he X = y (he 3×2 of full rank, y 3×P), as LAPACK's gelsy
// (torch.linalg.lstsq's driver on the CPU) finds it: he = QR, X = R⁻¹ Qᵀ y. Not lstsq itself:
// its blocked, threaded application of Qᵀ to the P columns rounds differently from run to
// run with more than one math thread (torchstain's own estimates vary in their last bit), and
// a stain estimate must not, or a resumed run's rows would differ from an uninterrupted one's.
// The product Qᵀ y sums three terms per value and the triangular solve treats each column
// alone, so any thread split gives the same bits.
torch::Tensor least_squares(const torch::Tensor& he, const torch::Tensor& y) {
  const auto [q, r] = torch::linalg_qr(he);  // reduced: Q 3×2, R 2×2
  return torch::linalg_solve_triangular(r, torch::matmul(q.t(), y), /*upper=*/true);
}

struct MacenkoFit {
  torch::Tensor he;     // 3×2 stain matrix, haematoxylin first
  torch::Tensor c;      // 2×P concentrations
  torch::Tensor max_c;  // 2: their 99th percentiles
};

// x x' of 3×P `x`: as torch::mm (torchstain's), or, `serial`, as sums of products, which
// the math library does not split over its threads (under c10::ParallelGuard nothing does).
torch::Tensor gram(const torch::Tensor& x, bool serial) {
  if (!serial) return torch::mm(x, x.t());
  std::vector<torch::Tensor> rows;
  for (std::int64_t i = 0; i < 3; ++i) rows.push_back((x[i].unsqueeze(0) * x).sum(1));
  return torch::stack(rows);
}

// torchstain's __compute_matrices on one tile's optical density (`serial`: on pooled tiles).
MacenkoFit macenko_matrices(const Density& d, bool serial = false) {
  const torch::Tensor od_hat = d.od.index({d.stained});
  torch::Tensor x = od_hat.t();
  x = x - x.mean(1).unsqueeze(1);
  const torch::Tensor cov = gram(x, serial) / (x.size(1) - 1);
  const torch::Tensor eigvecs =
      std::get<1>(torch::linalg_eigh(cov))
          .index_select(1, torch::tensor({1, 2}, torch::TensorOptions().device(cov.device())));
  const torch::Tensor that = torch::matmul(od_hat, eigvecs);
  const torch::Tensor phi = torch::atan2(that.select(1, 1), that.select(1, 0));
  const torch::Tensor min_phi = percentile(phi, kAlpha);
  const torch::Tensor max_phi = percentile(phi, 100 - kAlpha);
  const torch::Tensor v_min =
      torch::matmul(eigvecs, torch::stack({torch::cos(min_phi), torch::sin(min_phi)})).unsqueeze(1);
  const torch::Tensor v_max =
      torch::matmul(eigvecs, torch::stack({torch::cos(max_phi), torch::sin(max_phi)})).unsqueeze(1);
  MacenkoFit fit;
  fit.he = torch::where(v_min[0] > v_max[0], torch::cat({v_min, v_max}, 1),
                        torch::cat({v_max, v_min}, 1));
  fit.c = least_squares(fit.he, d.od.t());
  fit.max_c = torch::stack({percentile(fit.c[0], 99), percentile(fit.c[1], 99)});
  return fit;
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

// float32 RGB 3×H×W in [0, 1] → torchstain's "OpenCV" LAB, 3×H×W.
torch::Tensor rgb2lab(const torch::Tensor& rgb) {
  const LabConstants& k = lab_constants();
  const auto device = rgb.device();
  torch::Tensor arr =
      torch::where(rgb > 0.04045, torch::pow((rgb + 0.055) / 1.055, 2.4), rgb / 12.92);
  const torch::Tensor xyz = torch::tensordot(k.rgb2xyz.to(device).t(), arr, {0}, {0});
  arr = torch::mul(xyz, torch::reciprocal(k.white).to(device).unsqueeze(-1).unsqueeze(-1));
  arr = torch::where(arr > 0.008856, torch::pow(arr, 1.0 / 3), 7.787 * arr + 16.0 / 116);
  const torch::Tensor x = arr[0], y = arr[1], z = arr[2];
  const torch::Tensor l = ((116. * y) - 16.) * 2.55;
  const torch::Tensor a = 500.0 * (x - y) + 128;
  const torch::Tensor b = 200.0 * (y - z) + 128;
  return torch::stack({l, a, b}, 0);
}

// torchstain's lab2rgb: 3×H×W LAB → float32 H×W×3 RGB; not yet clamped to [0, 1].
torch::Tensor lab2rgb(const torch::Tensor& lab) {
  const LabConstants& k = lab_constants();
  const auto device = lab.device();
  const torch::Tensor l = lab[0] / 2.55, a = lab[1] - 128, b = lab[2] - 128;
  const torch::Tensor y = (l + 16.) / 116.;
  const torch::Tensor x = (a / 500.) + y;
  const torch::Tensor z = y - (b / 200.);
  torch::Tensor out = torch::stack({x, y, z}, 0);
  out = torch::where(out > 0.2068966, torch::pow(out, 3), (out - 16.0 / 116) / 7.787);
  out = torch::mul(out, k.white.to(device).unsqueeze(-1).unsqueeze(-1));
  const torch::Tensor arr = torch::tensordot(out, k.xyz2rgb.to(device).t(), {0}, {0});
  return torch::where(arr > 0.0031308, 1.055 * torch::pow(arr, 1 / 2.4) - 0.055, arr * 12.92);
}

// uint8 H×W×3 → its LAB channels as torchstain's lab_split gives them.
std::vector<torch::Tensor> lab_channels(const torch::Tensor& hwc) {
  const torch::Tensor rgb = hwc.permute({2, 0, 1}).contiguous().to(torch::kFloat32) / 255;
  const torch::Tensor lab = rgb2lab(rgb);
  return {lab[0] / 2.55, lab[1] - 128, lab[2] - 128};
}

std::vector<float> values(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kCPU, torch::kFloat32).contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

}  // namespace

StainNormalizer::StainNormalizer(StainNorm method, const torch::Tensor& reference,
                                 const std::string& what)
    : method_(method) {
  torch::InferenceMode guard;
  const Density d = density(reference);
  if (!d.enough)
    throw UsageError(at_file(what, "has too little stain to fit --stain-norm on (" +
                                       std::to_string(d.count) + " of " +
                                       std::to_string(d.od.size(0)) +
                                       " pixels stained): choose a region of stained tissue"));
  if (method == StainNorm::macenko) {
    const MacenkoFit fit = macenko_matrices(d);
    a_ = fit.he;
    b_ = fit.max_c;
  } else if (method == StainNorm::reinhard) {
    std::vector<torch::Tensor> means, stds;
    for (const auto& channel : lab_channels(reference)) {
      means.push_back(torch::mean(channel));
      stds.push_back(torch::std(channel));
    }
    a_ = torch::stack(means);
    b_ = torch::stack(stds);
  } else {
    throw UsageError("no stain normalisation method to fit");
  }
  if (!torch::isfinite(a_).all().item<bool>() || !torch::isfinite(b_).all().item<bool>())
    throw UsageError(at_file(what, "gives no finite stain estimate to fit --stain-norm on"));
}

StainNormalizer StainNormalizer::from_file(StainNorm method, const std::string& path) {
  if (!util::exists(path)) throw InputError(at_file(path, "no such --stain-reference image"));
  const slide::Slide image = slide::Slide::open(path);
  const auto& level = image.geometry().levels.at(0);
  if (level.width * level.height > kMaxReferencePixels)
    throw UsageError(at_file(path, "is " + std::to_string(level.width) + " × " +
                                       std::to_string(level.height) +
                                       " pixels, too large for a --stain-reference image: crop "
                                       "a representative region of stained tissue"));
  torch::Tensor rgb = torch::empty({level.height, level.width, 3}, torch::kUInt8);
  image.read_rgb(0, 0, 0, level.width, level.height, rgb.data_ptr<std::uint8_t>());
  StainNormalizer out(method, rgb, path);
  const util::MappedFile file(path);
  io::Sha256 sha;
  sha.update(file.data(), file.size());
  out.sha256_ = sha.hex();
  return out;
}

torch::Tensor StainNormalizer::macenko(const torch::Tensor& hwc, const SourceStain* source) const {
  const Density d = density(hwc);
  if (!d.enough) return {};
  torch::Tensor c, max_c;
  if (source) {
    c = least_squares(source->a.to(hwc.device()), d.od.t());
    max_c = source->b.to(hwc.device());
  } else {
    MacenkoFit fit = macenko_matrices(d);
    c = std::move(fit.c);
    max_c = std::move(fit.max_c);
  }
  const torch::Tensor he_ref = a_.to(hwc.device()), max_c_ref = b_.to(hwc.device());
  c = c * (max_c_ref / max_c).unsqueeze(-1);
  const torch::Tensor norm = torch::exp(-torch::matmul(he_ref, c)) * kIo;
  if (!torch::isfinite(norm).all().item<bool>()) return {};
  return norm.clamp_max(255).t().reshape(hwc.sizes()).to(torch::kInt32).to(torch::kUInt8);
}

torch::Tensor StainNormalizer::reinhard(const torch::Tensor& hwc, const SourceStain* source) const {
  if (!density(hwc).enough) return {};
  const torch::Tensor means = a_.to(hwc.device()), stds = b_.to(hwc.device());
  std::vector<torch::Tensor> channels = lab_channels(hwc);
  for (std::size_t i = 0; i < channels.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i);
    const torch::Tensor& x = channels[i];
    const torch::Tensor mu = source ? source->a[k].to(x.device()) : torch::mean(x);
    const torch::Tensor sd = source ? source->b[k].to(x.device()) : torch::std(x);
    channels[i] = (x - mu) / sd * stds[k] + means[k];
  }
  const torch::Tensor lab =
      torch::stack({channels[0] * 2.55, channels[1] + 128, channels[2] + 128}, 0);
  const torch::Tensor rgb = lab2rgb(lab);
  if (!torch::isfinite(rgb).all().item<bool>()) return {};
  return (torch::clamp(rgb, 0, 1) * 255).to(torch::kUInt8);
}

torch::Tensor StainNormalizer::apply(const torch::Tensor& nhwc,
                                     std::vector<std::uint8_t>& unchanged) const {
  return apply(nhwc, std::vector<const SourceStain*>(static_cast<std::size_t>(nhwc.size(0))),
               unchanged, /*own=*/true);
}

torch::Tensor StainNormalizer::apply(const torch::Tensor& nhwc,
                                     const std::vector<const SourceStain*>& sources,
                                     std::vector<std::uint8_t>& unchanged) const {
  if (sources.size() != static_cast<std::size_t>(nhwc.size(0)))
    throw UsageError("stain normalisation: " + std::to_string(sources.size()) +
                     " source stains for " + std::to_string(nhwc.size(0)) + " tiles");
  return apply(nhwc, sources, unchanged, /*own=*/false);
}

torch::Tensor StainNormalizer::apply(const torch::Tensor& nhwc,
                                     const std::vector<const SourceStain*>& sources,
                                     std::vector<std::uint8_t>& unchanged, bool own) const {
  torch::InferenceMode guard;
  const std::int64_t n = nhwc.size(0);
  unchanged.assign(static_cast<std::size_t>(n), 0);
  if (n == 0) return nhwc;
  std::vector<torch::Tensor> tiles;
  for (std::int64_t i = 0; i < n; ++i) {
    const torch::Tensor tile = nhwc[i];
    const SourceStain* source = sources[static_cast<std::size_t>(i)];
    torch::Tensor out;
    if (own || source)
      out = method_ == StainNorm::macenko ? macenko(tile, source) : reinhard(tile, source);
    if (!out.defined()) {
      unchanged[static_cast<std::size_t>(i)] = 1;
      out = tile;
    }
    tiles.push_back(out);
  }
  return torch::stack(tiles, 0);
}

std::optional<SourceStain> StainNormalizer::fit_source(const torch::Tensor& tiles) const {
  torch::InferenceMode guard;
  const c10::ParallelGuard serial(true);  // at::parallel_for runs inline: one order of sums
  std::vector<torch::Tensor> kept;
  for (std::int64_t i = 0; i < tiles.size(0); ++i)
    if (density(tiles[i]).enough) kept.push_back(tiles[i]);
  if (kept.empty()) return std::nullopt;
  const torch::Tensor pooled = torch::cat(kept, 0);  // (K·H)×W×3: one image, as torchstain sees
  SourceStain out;
  if (method_ == StainNorm::macenko) {
    const MacenkoFit fit = macenko_matrices(density(pooled), /*serial=*/true);
    out = {fit.he, fit.max_c};
  } else {
    std::vector<torch::Tensor> means, stds;
    for (const auto& channel : lab_channels(pooled)) {
      means.push_back(torch::mean(channel));
      stds.push_back(torch::std(channel));
    }
    out = {torch::stack(means), torch::stack(stds)};
  }
  if (!torch::isfinite(out.a).all().item<bool>() || !torch::isfinite(out.b).all().item<bool>())
    return std::nullopt;
  return out;
}

nlohmann::json StainNormalizer::stain_json(const SourceStain& stain) const {
  if (method_ == StainNorm::macenko) {
    nlohmann::json matrix = nlohmann::json::array();
    for (std::int64_t row = 0; row < 3; ++row) matrix.push_back(values(stain.a[row]));
    return {{"stain_matrix", matrix}, {"max_concentrations", values(stain.b)}};
  }
  return {{"lab_means", values(stain.a)}, {"lab_stds", values(stain.b)}};
}

SourceStain StainNormalizer::stain_from_json(const nlohmann::json& j,
                                             const std::string& what) const {
  const auto floats = [&](const nlohmann::json& v, std::size_t n) {
    if (!v.is_array() || v.size() != n)
      throw FormatError(at_file(what, "holds a malformed stain estimate: " + j.dump()));
    std::vector<float> out;
    for (const auto& x : v) {
      if (!x.is_number()) throw FormatError(at_file(what, "holds a malformed stain estimate"));
      out.push_back(x.get<float>());
    }
    return torch::tensor(out);
  };
  if (!j.is_object()) throw FormatError(at_file(what, "holds a malformed stain estimate"));
  if (method_ == StainNorm::macenko) {
    const nlohmann::json m = j.value("stain_matrix", nlohmann::json());
    if (!m.is_array() || m.size() != 3)
      throw FormatError(at_file(what, "holds a malformed stain matrix: " + j.dump()));
    std::vector<torch::Tensor> rows;
    for (const auto& r : m) rows.push_back(floats(r, 2));
    return {torch::stack(rows), floats(j.value("max_concentrations", nlohmann::json()), 2)};
  }
  return {floats(j.value("lab_means", nlohmann::json()), 3),
          floats(j.value("lab_stds", nlohmann::json()), 3)};
}

nlohmann::json StainNormalizer::target_json() const { return stain_json({a_, b_}); }

nlohmann::json StainNormalizer::record() const {
  return {{"method", util::name_of(kStainNorms, method_)},
          {"sha256", sha256_},
          {"target", target_json()}};
}

}  // namespace mltool::features
