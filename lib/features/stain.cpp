// Stain normalisation as torchstain computes it (torchstain/torch/normalizers/macenko.py and
// reinhard.py): the batch's tiles at once (stain_math.hpp), the tiles with too little stain
// left as they are.
#include "mltool/features/stain.hpp"

#include <optional>
#include <tuple>
#include <utility>

#include "mltool/io/sha256.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "stain_math.hpp"

namespace mltool::features {
namespace {

using stain_math::Density;

// A reference image larger than this is refused: crop a representative region.
constexpr std::int64_t kMaxReferencePixels = std::int64_t{1} << 26;

// Whether `count` stained pixels of `pixels` are enough to estimate a stain from.
bool enough(std::int64_t count, std::int64_t pixels) {
  return count >= 2 &&
         static_cast<double>(count) >= kMinStainedFraction * static_cast<double>(pixels);
}

// The stain of one image, 1×H×W×3 (tiles laid one under the other are one image): Macenko's
// stain matrix (3×2) and 99th-percentile concentrations, or Reinhard's LAB means and standard
// deviations; CPU float32.
SourceStain fit_image(StainNorm method, const torch::Tensor& image, const Density& d) {
  if (method == StainNorm::macenko) {
    const torch::Tensor he = stain_math::stain_matrices(d);
    const torch::Tensor max_c =
        stain_math::max_concentrations(stain_math::concentrations(he, d.od));
    return {he[0].cpu(), max_c[0].cpu()};
  }
  const auto [mu, sd] = stain_math::mean_std(stain_math::lab(image));
  return {mu[0].cpu(), sd[0].cpu()};
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
torch::Tensor macenko(const Density& d, const std::vector<const SourceStain*>& sources,
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
torch::Tensor reinhard(const torch::Tensor& tiles, const std::vector<const SourceStain*>& sources,
                       const torch::Tensor& means, const torch::Tensor& stds) {
  const torch::Tensor lab = stain_math::lab(tiles);
  const auto [mu, sd] =
      sources.empty() ? stain_math::mean_std(lab) : stacked(sources, tiles.device());
  return stain_math::reinhard_pixels(lab, mu, sd, means, stds);
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
  const torch::Tensor image = reference.unsqueeze(0);
  const Density d = stain_math::density(image);
  const std::int64_t pixels = d.od.size(2);
  if (!enough(d.counts[0], pixels))
    throw UsageError(at_file(what, "has too little stain to fit --stain-norm on (" +
                                       std::to_string(d.counts[0]) + " of " +
                                       std::to_string(pixels) +
                                       " pixels stained): choose a region of stained tissue"));
  const SourceStain fit = fit_image(method, image, d);
  a_ = fit.a;
  b_ = fit.b;
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
  torch::Tensor x =
      method_ == StainNorm::macenko ? macenko(d, given, a_, b_) : reinhard(tiles, given, a_, b_);
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

std::optional<SourceStain> StainNormalizer::fit_source(const torch::Tensor& tiles) const {
  torch::InferenceMode guard;
  const Density d = stain_math::density(tiles);
  std::vector<std::int64_t> kept;
  for (std::int64_t i = 0; i < tiles.size(0); ++i)
    if (enough(d.counts[static_cast<std::size_t>(i)], d.od.size(2))) kept.push_back(i);
  if (kept.empty()) return std::nullopt;
  // (K·H)×W×3: the kept tiles one under the other, one image, as torchstain sees them.
  const torch::Tensor pooled =
      tiles.index_select(0, torch::tensor(kept)).reshape({1, -1, tiles.size(2), 3});
  SourceStain out = fit_image(method_, pooled, stain_math::density(pooled));
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
