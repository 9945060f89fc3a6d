// Stain normalisation as torchstain computes it (torchstain/torch/normalizers/macenko.py and
// reinhard.py), the tiles with too little stain left as they are: on the CPU tile by tile over
// the math threads (features/macenko.hpp, reinhard.hpp), as are the fits of the reference and
// of --stain-fit slide; on another device the batch's tiles at once, as tensors
// (stain_math.hpp).
#include "mltool/features/stain.hpp"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>

#include "mltool/features/macenko.hpp"
#include "mltool/features/reinhard.hpp"
#include "mltool/io/sha256.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "stain_math.hpp"

namespace mltool::features {
namespace {

using stain_math::Density;

// The test seam MLTOOL_STAIN_TENSORS=1 (docs/development.md): CPU batches take the GPU's
// tensor path (stain_math.hpp), so that a machine without a GPU checks its arithmetic.
bool tensors_on_cpu() {
  static const bool yes = [] {
    const char* v = std::getenv("MLTOOL_STAIN_TENSORS");
    return v && std::string(v) == "1";
  }();
  return yes;
}

// A reference image larger than this is refused: crop a representative region.
constexpr std::int64_t kMaxReferencePixels = std::int64_t{1} << 26;

// Whether `count` stained pixels of `pixels` are enough to estimate a stain from.
bool enough(std::int64_t count, std::int64_t pixels) {
  return count >= 2 &&
         static_cast<double>(count) >= kMinStainedFraction * static_cast<double>(pixels);
}

// A tensor's n floats (CPU float32) into `out`, and back.
void copy_floats(const torch::Tensor& t, float* out, std::size_t n) {
  const torch::Tensor c = t.to(torch::kCPU, torch::kFloat32).contiguous();
  if (static_cast<std::size_t>(c.numel()) != n)
    throw UsageError("stain normalisation: a stain of " + std::to_string(c.numel()) +
                     " values, not " + std::to_string(n));
  std::memcpy(out, c.data_ptr<float>(), n * sizeof(float));
}
template <std::size_t N>
torch::Tensor tensor_of(const std::array<float, N>& v) {
  return torch::tensor(std::vector<float>(v.begin(), v.end()));
}

// The CPU kernels of each method behind one interface, and their stains as SourceStains
// (Macenko: a the 3×2 stain matrix, b the 2 maximum concentrations; Reinhard: a the 3 LAB
// means, b the 3 standard deviations).
struct MacenkoCpu {
  using Stain = macenko::Stain;
  static std::optional<Stain> fit(const std::uint8_t* px, std::int64_t p, std::int64_t count) {
    return macenko::fit(px, p, count, lapack_eigenvectors);
  }
  // The eigenvectors torch.linalg.eigh gives torchstain (LAPACK's) of the 2 largest eigenvalues:
  // their signs decide a tile whose stain angles straddle ±π (macenko::EigenSigns).
  static std::array<std::array<float, 3>, 2> lapack_eigenvectors(const std::array<float, 9>& cov) {
    const c10::InferenceMode guard;
    const torch::Tensor c =
        torch::from_blob(const_cast<float*>(cov.data()), {3, 3}, torch::kFloat32).clone();
    const torch::Tensor v = std::get<1>(torch::linalg_eigh(c)).contiguous();  // ascending
    const float* e = v.data_ptr<float>();
    std::array<std::array<float, 3>, 2> out{};
    for (std::size_t k = 0; k < 2; ++k)
      for (std::size_t i = 0; i < 3; ++i) out[k][i] = e[3 * i + 1 + k];
    return out;
  }
  static bool normalize(const std::uint8_t* px, std::int64_t p, const Stain& source,
                        const Stain& target, std::uint8_t* out) {
    return macenko::normalize(px, p, source, target, out);
  }
  static SourceStain source(const Stain& s) {
    return {tensor_of(s.he).view({3, 2}), tensor_of(s.max_c)};
  }
  static Stain stain(const SourceStain& s) {
    Stain out;
    copy_floats(s.a, out.he.data(), out.he.size());
    copy_floats(s.b, out.max_c.data(), out.max_c.size());
    return out;
  }
};
struct ReinhardCpu {
  using Stain = reinhard::Stain;
  static std::optional<Stain> fit(const std::uint8_t* px, std::int64_t p, std::int64_t) {
    return reinhard::fit(px, p);
  }
  static bool normalize(const std::uint8_t* px, std::int64_t p, const Stain& source,
                        const Stain& target, std::uint8_t* out) {
    return reinhard::normalize(px, p, source, target, out);
  }
  static SourceStain source(const Stain& s) { return {tensor_of(s.mean), tensor_of(s.std)}; }
  static Stain stain(const SourceStain& s) {
    Stain out;
    copy_floats(s.a, out.mean.data(), out.mean.size());
    copy_floats(s.b, out.std.data(), out.std.size());
    return out;
  }
};

// The stain of one image, uint8 …×W×3 on the CPU (tiles laid one under the other are one
// image), `count` of its pixels stained; nothing where the estimate is not finite.
template <class Kernel>
std::optional<SourceStain> fit_image(const torch::Tensor& image, std::int64_t count) {
  const torch::Tensor px = image.contiguous();
  const auto fit = Kernel::fit(px.data_ptr<std::uint8_t>(), px.numel() / 3, count);
  if (!fit) return std::nullopt;
  return Kernel::source(*fit);
}
std::optional<SourceStain> fit_image(StainNorm method, const torch::Tensor& image,
                                     std::int64_t count) {
  return method == StainNorm::macenko ? fit_image<MacenkoCpu>(image, count)
                                      : fit_image<ReinhardCpu>(image, count);
}

// The stained pixels of a uint8 …×3 image on the CPU.
std::int64_t stained(const torch::Tensor& image) {
  const torch::Tensor px = image.contiguous();
  return macenko::stained(px.data_ptr<std::uint8_t>(), px.numel() / 3);
}

// The sources' a and b stacked on `device` (N×…).
std::pair<torch::Tensor, torch::Tensor> stacked(const std::vector<const SourceStain*>& sources,
                                                const torch::Device& device) {
  std::vector<torch::Tensor> a, b;
  for (const SourceStain* s : sources) {
    a.push_back(s->a);
    b.push_back(s->b);
  }
  return {torch::stack(a).to(device), torch::stack(b).to(device)};
}

// The tiles of `d` normalised towards he_ref/max_c_ref, float32 N×3×P before clamping: each
// one's stain estimated from itself (`sources` empty) or given.
torch::Tensor macenko_tensors(const Density& d, const std::vector<const SourceStain*>& sources,
                              const torch::Tensor& he_ref, const torch::Tensor& max_c_ref) {
  torch::Tensor he, max_c;
  if (sources.empty()) {
    he = stain_math::stain_matrices(d);
    const torch::Tensor c = stain_math::concentrations(he, d.od);
    return stain_math::macenko_pixels(c, stain_math::max_concentrations(c), he_ref, max_c_ref);
  }
  std::tie(he, max_c) = stacked(sources, d.od.device());
  return stain_math::macenko_pixels(stain_math::concentrations(he, d.od), max_c, he_ref, max_c_ref);
}

// The same for Reinhard: RGB in 0..1, float32 N×3×P before clamping.
torch::Tensor reinhard_tensors(const torch::Tensor& tiles,
                               const std::vector<const SourceStain*>& sources,
                               const torch::Tensor& means, const torch::Tensor& stds) {
  const torch::Tensor lab = stain_math::lab(tiles);
  const auto [mu, sd] =
      sources.empty() ? stain_math::mean_std(lab) : stacked(sources, tiles.device());
  return stain_math::reinhard_pixels(lab, mu, sd, means, stds);
}

// One image's `p` pixels normalised by `Kernel` towards `target` into `out`: its stain
// estimated from itself (`given` null) or given. False (`out` then undefined) where it has too
// little stain or no finite estimate.
template <class Kernel>
bool normalise_one(const std::uint8_t* px, std::int64_t p, const SourceStain* given,
                   const typename Kernel::Stain& target, std::uint8_t* out) {
  const std::int64_t count = macenko::stained(px, p);
  if (!enough(count, p)) return false;
  const std::optional<typename Kernel::Stain> source =
      given ? std::optional(Kernel::stain(*given)) : Kernel::fit(px, p, count);
  return source && Kernel::normalize(px, p, *source, target, out);
}

// uint8 N×H×W×3 CPU tiles normalised towards `target` by `Kernel`, each tile on its own over
// the math threads: its stain estimated from itself (`own`) or sources[i]; flags in `unchanged`
// (N, all 1) the tiles normalised.
template <class Kernel>
torch::Tensor on_cpu(const torch::Tensor& nhwc, const std::vector<const SourceStain*>& sources,
                     bool own, const SourceStain& target_stain,
                     std::vector<std::uint8_t>& unchanged) {
  const typename Kernel::Stain target = Kernel::stain(target_stain);
  const torch::Tensor in = nhwc.contiguous();
  torch::Tensor out = in.clone();
  const std::int64_t p = in.numel() / std::max<std::int64_t>(in.size(0), 1) / 3;
  const std::uint8_t* src = in.data_ptr<std::uint8_t>();
  std::uint8_t* dst = out.data_ptr<std::uint8_t>();
  at::parallel_for(0, in.size(0), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::uint8_t* tile = src + 3 * p * i;
      const SourceStain* given = sources[static_cast<std::size_t>(i)];
      if (!own && !given) continue;
      if (normalise_one<Kernel>(tile, p, own ? nullptr : given, target, dst + 3 * p * i))
        unchanged[static_cast<std::size_t>(i)] = 0;
      else
        std::memcpy(dst + 3 * p * i, tile, static_cast<std::size_t>(3 * p));
    }
  });
  return out;
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
  if (method != StainNorm::macenko && method != StainNorm::reinhard)
    throw UsageError("no stain normalisation method to fit");
  const torch::Tensor image = reference.to(torch::kCPU, torch::kUInt8);
  const std::int64_t pixels = image.numel() / 3, count = stained(image);
  if (!enough(count, pixels))
    throw UsageError(at_file(what, "has too little stain to fit --stain-norm on (" +
                                       std::to_string(count) + " of " + std::to_string(pixels) +
                                       " pixels stained): choose a region of stained tissue"));
  const std::optional<SourceStain> fit = fit_image(method, image, count);
  if (!fit)
    throw UsageError(at_file(what, "gives no finite stain estimate to fit --stain-norm on"));
  a_ = fit->a;
  b_ = fit->b;
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
  unchanged.assign(static_cast<std::size_t>(n), 1);
  if (n == 0) return nhwc;
  if (nhwc.device().is_cpu() && !tensors_on_cpu())
    return method_ == StainNorm::macenko
               ? on_cpu<MacenkoCpu>(nhwc, sources, own, {a_, b_}, unchanged)
               : on_cpu<ReinhardCpu>(nhwc, sources, own, {a_, b_}, unchanged);
  const Density all = stain_math::density(nhwc);
  std::vector<std::int64_t> rows;  // the tiles to normalise
  std::vector<const SourceStain*> given;
  for (std::int64_t i = 0; i < n; ++i) {
    const SourceStain* source = sources[static_cast<std::size_t>(i)];
    if ((!own && !source) || !enough(all.counts[static_cast<std::size_t>(i)], all.od.size(2)))
      continue;
    rows.push_back(i);
    if (!own) given.push_back(source);
  }
  if (rows.empty()) return nhwc;
  const Density d = stain_math::select(all, rows);
  const torch::Tensor tiles = nhwc.index_select(0, torch::tensor(rows).to(nhwc.device()));
  torch::Tensor x = method_ == StainNorm::macenko ? macenko_tensors(d, given, a_, b_)
                                                  : reinhard_tensors(tiles, given, a_, b_);
  const torch::Tensor finite = torch::isfinite(x).flatten(1).all(1).to(torch::kCPU);
  x = method_ == StainNorm::macenko ? x.clamp_max(255) : torch::clamp(x, 0, 1) * 255;
  const torch::Tensor u8 =
      x.permute({0, 2, 1}).reshape(tiles.sizes()).to(torch::kInt32).to(torch::kUInt8);
  std::vector<std::int64_t> done, from;
  for (std::size_t j = 0; j < rows.size(); ++j)
    if (finite[static_cast<std::int64_t>(j)].item<bool>()) {
      done.push_back(rows[j]);
      from.push_back(static_cast<std::int64_t>(j));
      unchanged[static_cast<std::size_t>(rows[j])] = 0;
    }
  if (done.empty()) return nhwc;
  return nhwc.index_copy(0, torch::tensor(done).to(nhwc.device()),
                         u8.index_select(0, torch::tensor(from).to(nhwc.device())));
}

std::optional<io::RgbImage> StainNormalizer::recolour(const io::RgbImage& image) const {
  const auto one = [&](auto kernel) -> std::optional<io::RgbImage> {
    using Kernel = decltype(kernel);
    io::RgbImage out{image.width, image.height, std::vector<std::uint8_t>(image.pixels.size())};
    if (!normalise_one<Kernel>(image.pixels.data(), std::int64_t{image.width} * image.height,
                               nullptr, Kernel::stain({a_, b_}), out.pixels.data()))
      return std::nullopt;
    return out;
  };
  torch::InferenceMode guard;
  return method_ == StainNorm::macenko ? one(MacenkoCpu{}) : one(ReinhardCpu{});
}

std::optional<SourceStain> StainNormalizer::fit_source(const torch::Tensor& tiles) const {
  torch::InferenceMode guard;
  std::vector<std::int64_t> kept;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < tiles.size(0); ++i) {
    const std::int64_t c = stained(tiles[i]);
    if (!enough(c, tiles[i].numel() / 3)) continue;
    kept.push_back(i);
    count += c;
  }
  if (kept.empty()) return std::nullopt;
  // (K·H)×W×3: the kept tiles one under the other, one image, as torchstain sees them.
  return fit_image(method_, tiles.index_select(0, torch::tensor(kept)), count);
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
