#include "slide_stain.hpp"

#include <algorithm>

#include "mltool/util/error.hpp"

namespace mltool::features {

std::vector<std::uint64_t> slide_fit_sample(std::uint64_t rows, int tile) {
  const auto pixels = static_cast<std::uint64_t>(tile) * static_cast<std::uint64_t>(tile);
  const std::uint64_t k =
      std::min({rows, kSlideFitTiles, std::max<std::uint64_t>(1, kSlideFitPixels / pixels)});
  std::vector<std::uint64_t> out;
  for (std::uint64_t i = 0; i < k; ++i) out.push_back((2 * i + 1) * rows / (2 * k));
  return out;
}

namespace {

// One slide's estimate from its sampled tiles, or nothing when none has enough stain.
std::optional<SourceStain> fit_slide(const StainNormalizer& stain, const slide::TilePixels& pixels,
                                     const std::vector<std::string>& keys, const SlideRows& s,
                                     int threads) {
  const int t = pixels.tile_size();
  const std::vector<std::uint64_t> sample = slide_fit_sample(s.rows, t);
  torch::Tensor tiles =
      torch::empty({static_cast<std::int64_t>(sample.size()), t, t, 3}, torch::kUInt8);
  std::vector<std::uint8_t> failed(sample.size(), 0);
  pixels.read(
      sample.size(), [&](std::size_t i) -> const std::string& { return keys[s.first + sample[i]]; },
      threads, tiles.data_ptr<std::uint8_t>(), [&](std::size_t i, const Error&) { failed[i] = 1; });
  std::vector<std::int64_t> read;
  for (std::size_t i = 0; i < sample.size(); ++i)
    if (!failed[i]) read.push_back(static_cast<std::int64_t>(i));
  if (read.empty()) return std::nullopt;
  return stain.fit_source(tiles.index_select(0, torch::tensor(read)));
}

}  // namespace

SlideStains::SlideStains(const StainNormalizer& stain, const slide::TilePixels& pixels,
                         const std::vector<std::string>& keys, const ShardPlan& plan, int threads,
                         const nlohmann::json& recorded, const std::string& what) {
  for (const SlideRows& s : plan.slides) {
    std::optional<SourceStain> fit;
    if (recorded.is_object() && recorded.contains(s.id)) {
      const nlohmann::json& j = recorded.at(s.id);
      if (!j.is_null()) fit = stain.stain_from_json(j, what);
    } else {
      fit = fit_slide(stain, pixels, keys, s, threads);
    }
    first_.push_back(s.first);
    end_.push_back(s.first + s.rows);
    json_[s.id] = fit ? stain.stain_json(*fit) : nlohmann::json();
    stains_.push_back(std::move(fit));
  }
}

const SourceStain* SlideStains::of_row(std::uint64_t row) const {
  const auto it = std::upper_bound(first_.begin(), first_.end(), row);
  if (it == first_.begin()) return nullptr;
  const auto i = static_cast<std::size_t>(it - first_.begin() - 1);
  return row < end_[i] && stains_[i] ? &*stains_[i] : nullptr;
}

std::size_t SlideStains::unfitted() const {
  return static_cast<std::size_t>(
      std::count_if(stains_.begin(), stains_.end(), [](const auto& s) { return !s; }));
}

}  // namespace mltool::features
