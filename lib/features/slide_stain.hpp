// `mltool extract --stain-fit slide` (not a public header): each slide's source stain,
// estimated once from a bounded, evenly spaced sample of its tiles (those with enough stain,
// pooled as one image: StainNormalizer::fit_source), then used for every tile of the slide.
// The estimates are recorded per slide — in the partial run's config, so a resumed run uses
// them, and in features.json's stain_fits, which --merge joins — and depend on nothing but the
// slide's own tiles, so a shard fits its slides as one run over the whole store does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/features/shard.hpp"
#include "mltool/features/stain.hpp"
#include "mltool/slide/tile_pixels.hpp"

namespace mltool::features {

/// At most this many tiles of a slide, and this many pixels in all, are sampled for its fit.
inline constexpr std::uint64_t kSlideFitTiles = 64;
inline constexpr std::uint64_t kSlideFitPixels = std::uint64_t{1} << 22;

/// Which of a slide's `rows` tiles (offsets from its first) are sampled for tiles of `tile`
/// pixels a side: k = min(rows, kSlideFitTiles, kSlideFitPixels / tile², at least 1) tiles,
/// the i-th at floor((2i + 1) · rows / 2k), i = 0..k-1.
std::vector<std::uint64_t> slide_fit_sample(std::uint64_t rows, int tile);

/// The source stains of a run's slides, looked up by store row.
class SlideStains {
 public:
  /// Fits `plan`'s slides with `stain` (reading the sampled tiles of `keys` with `pixels` on
  /// `threads` workers; a tile that cannot be read is left out), or takes a slide's estimate
  /// from `recorded` ({slide id: estimate or null}, a partial run's) where it holds one.
  SlideStains(const StainNormalizer& stain, const slide::TilePixels& pixels,
              const std::vector<std::string>& keys, const ShardPlan& plan, int threads,
              const nlohmann::json& recorded, const std::string& what);

  /// The source stain of store row `row`'s slide; null when that slide had no tile with
  /// enough stain, or is not one of the plan's.
  const SourceStain* of_row(std::uint64_t row) const;
  /// {slide id: estimate (StainNormalizer::stain_json) or null}.
  const nlohmann::json& to_json() const { return json_; }
  /// Slides without an estimate (no sampled tile with enough stain).
  std::size_t unfitted() const;

 private:
  std::vector<std::uint64_t> first_, end_;  // store rows of each slide, ascending
  std::vector<std::optional<SourceStain>> stains_;
  nlohmann::json json_ = nlohmann::json::object();
};

}  // namespace mltool::features
