// features::StainNormalizer on synthetic H&E-like tiles (the agreement with torchstain on a
// real slide is tests/cli/stain_test.py's): background passes through unchanged and flagged,
// a tile normalised to its own stain comes back as itself, the output is the input's shape
// and type, a reference without stain is refused.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "mltool/features/stain.hpp"
#include "mltool/util/error.hpp"

namespace mltool::features {
namespace {

// uint8 H×W×3: a mix of haematoxylin-blue and eosin-pink absorbance with seeded random
// concentrations, on white.
torch::Tensor he_tile(int size, std::uint64_t seed, double eosin_scale = 1.0) {
  torch::manual_seed(seed);
  const auto h = torch::rand({size, size, 1}) * 1.2;
  const auto e = torch::rand({size, size, 1}) * 0.8 * eosin_scale;
  const auto he_h = torch::tensor({0.65f, 0.70f, 0.29f}).view({1, 1, 3});
  const auto he_e = torch::tensor({0.07f, 0.99f, 0.11f}).view({1, 1, 3});
  const auto od = h * he_h + e * he_e;
  return (240 * torch::exp(-od)).clamp(0, 255).to(torch::kUInt8);
}

TEST(Stain, BackgroundPassesThroughFlagged) {
  const StainNormalizer n(StainNorm::macenko, he_tile(64, 1), "ref");
  const auto white = torch::full({2, 32, 32, 3}, 245, torch::kUInt8);
  const auto batch = torch::cat({white, he_tile(32, 2).unsqueeze(0)}, 0);
  std::vector<std::uint8_t> unchanged;
  const auto out = n.apply(batch, unchanged);
  ASSERT_EQ(unchanged, (std::vector<std::uint8_t>{1, 1, 0}));
  EXPECT_EQ(out.sizes(), batch.sizes());
  EXPECT_EQ(out.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(torch::equal(out.narrow(0, 0, 2), white));
  EXPECT_FALSE(torch::equal(out[2], batch[2]));
}

TEST(Stain, OwnStainComesBack) {
  for (const StainNorm method : {StainNorm::macenko, StainNorm::reinhard}) {
    const auto tile = he_tile(64, 3);
    const StainNormalizer n(method, tile, "ref");
    std::vector<std::uint8_t> unchanged;
    const auto out = n.apply(tile.unsqueeze(0), unchanged)[0];
    EXPECT_EQ(unchanged[0], 0);
    const auto diff = (out.to(torch::kInt32) - tile.to(torch::kInt32)).abs();
    // Reinhard is the identity up to float rounding and truncation; Macenko's estimate of a
    // tile's own stain gives it back up to the 255 clip of its maximum concentrations.
    EXPECT_LE(diff.to(torch::kFloat).mean().item<float>(), 1.0f) << static_cast<int>(method);
    if (method == StainNorm::reinhard) {
      EXPECT_LE(diff.max().item<int>(), 1);
    }
  }
}

TEST(Stain, TargetMovesTheStain) {
  const StainNormalizer n(StainNorm::reinhard, he_tile(64, 4, 2.0), "ref");
  const auto tile = he_tile(64, 5, 0.3);
  std::vector<std::uint8_t> unchanged;
  const auto out = n.apply(tile.unsqueeze(0), unchanged)[0];
  // More eosin in the reference: less green in the normalised tile.
  EXPECT_LT(out.select(2, 1).to(torch::kFloat).mean().item<float>(),
            tile.select(2, 1).to(torch::kFloat).mean().item<float>() - 10);
  const auto target = n.target_json();
  EXPECT_EQ(target.at("lab_means").size(), 3u);
  EXPECT_EQ(target.at("lab_stds").size(), 3u);
}

TEST(Stain, ReferenceWithoutStainRefused) {
  EXPECT_THROW(StainNormalizer(StainNorm::macenko, torch::full({16, 16, 3}, 250, torch::kUInt8),
                               "white.png"),
               UsageError);
}

}  // namespace
}  // namespace mltool::features

namespace mltool::features {
namespace {

// --stain-fit slide's pieces: a source estimated on one tile alone is that tile's own estimate
// (the slide path normalises it as the tile path does), a null source or a tile without stain
// passes through flagged, an estimate survives its JSON, and tiles without stain give none.
TEST(Stain, SourceFittedOnOneTileIsItsOwn) {
  for (const StainNorm method : {StainNorm::macenko, StainNorm::reinhard}) {
    const StainNormalizer n(method, he_tile(64, 6, 1.5), "ref");
    const auto tile = he_tile(64, 7);
    const auto source = n.fit_source(tile.unsqueeze(0));
    ASSERT_TRUE(source.has_value());
    std::vector<std::uint8_t> own_flags, slide_flags;
    const auto own = n.apply(tile.unsqueeze(0), own_flags);
    const auto white = torch::full({32 * 2, 32, 3}, 245, torch::kUInt8);
    const auto batch = torch::stack({tile, tile, torch::full({64, 64, 3}, 245, torch::kUInt8)});
    const auto slide = n.apply(batch, {&*source, nullptr, &*source}, slide_flags);
    EXPECT_EQ(slide_flags, (std::vector<std::uint8_t>{0, 1, 1}));
    const auto diff = (slide[0].to(torch::kInt32) - own[0].to(torch::kInt32)).abs();
    EXPECT_LE(diff.max().item<int>(), 1) << static_cast<int>(method);
    EXPECT_TRUE(torch::equal(slide[1], tile));
    EXPECT_TRUE(torch::equal(slide[2], batch[2]));
    const SourceStain back = n.stain_from_json(n.stain_json(*source), "t");
    EXPECT_TRUE(torch::equal(back.a, source->a) && torch::equal(back.b, source->b));
    EXPECT_FALSE(n.fit_source(white.view({1, 64, 32, 3})).has_value());
    EXPECT_THROW(n.stain_from_json({{"lab_means", {1, 2}}}, "t"), Error);
    std::vector<std::uint8_t> flags;
    EXPECT_THROW(n.apply(batch, {nullptr}, flags), Error);
  }
}

}  // namespace
}  // namespace mltool::features

namespace mltool::features {
namespace {

// The batch's tiles are normalised at once: a tile's bytes are its own whatever else is in the
// batch, the batch's size and the math threads, with either method and either fit, on a tile
// size whose pixel count is odd (the vectorised loops' tails fall inside a batch's tiles).
TEST(Stain, TileBitsIndependentOfBatchAndThreads) {
  const int threads = at::get_num_threads();
  for (const StainNorm method : {StainNorm::macenko, StainNorm::reinhard}) {
    const StainNormalizer n(method, he_tile(64, 8, 1.5), "ref");
    std::vector<torch::Tensor> tiles;
    for (std::uint64_t s = 0; s < 5; ++s) tiles.push_back(he_tile(45, 20 + s, 0.5 + 0.3 * s));
    const torch::Tensor batch = torch::stack(tiles);
    const auto source = n.fit_source(batch.narrow(0, 1, 3));
    ASSERT_TRUE(source.has_value());
    const std::vector<const SourceStain*> sources(5, &*source);
    std::vector<std::uint8_t> flags;
    at::set_num_threads(2);
    const auto together = n.apply(batch, flags);
    const auto together_slide = n.apply(batch, sources, flags);
    at::set_num_threads(1);
    const auto again = n.apply(batch, flags);
    EXPECT_TRUE(torch::equal(together, again)) << static_cast<int>(method);
    EXPECT_TRUE(torch::equal(together_slide, n.apply(batch, sources, flags)));
    for (std::int64_t i = 0; i < 5; ++i) {
      EXPECT_TRUE(torch::equal(n.apply(batch[i].unsqueeze(0), flags)[0], together[i])) << i;
      EXPECT_TRUE(torch::equal(n.apply(batch.narrow(0, i, 5 - i), flags)[0], together[i])) << i;
      EXPECT_TRUE(
          torch::equal(n.apply(batch[i].unsqueeze(0), {&*source}, flags)[0], together_slide[i]))
          << i;
    }
    at::set_num_threads(2);
    const auto refit = n.fit_source(batch.narrow(0, 1, 3));
    EXPECT_TRUE(torch::equal(refit->a, source->a) && torch::equal(refit->b, source->b));
  }
  at::set_num_threads(threads);
}

}  // namespace
}  // namespace mltool::features
