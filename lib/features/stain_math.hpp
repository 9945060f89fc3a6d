// The arithmetic of --stain-norm (features/stain.cpp) on a GPU: a batch of N tiles at once, as
// tensors on the batch's device, a few launches for the whole batch whatever its size
// (torchstain's Macenko and Reinhard, each tile's estimate from that tile alone). On the CPU
// the tiles go through macenko.cpp and reinhard.cpp instead; this code runs there only under
// the test seam MLTOOL_STAIN_TENSORS=1 (docs/development.md), which checks its arithmetic
// against torchstain on a machine without a GPU. A tile's bits depend on that tile only,
// never on the others in the batch or the batch's size:
// - sums over a tile's pixels are taken in float32 (torchstain's type) in one fixed pairwise
//   order made of elementwise additions (tree_sum), not by the library's reductions, whose
//   order follows the tensor's shape, the device and the thread split;
// - on the CPU the transcendental functions (log, exp, atan2, pow, cos, sin) are applied to
//   each tile on its own (per_tile), since the vectorised and the scalar code that a thread's
//   share of a tensor ends with differ in their last bit; the optical density is a table of
//   its 256 values;
// - percentiles sort each row and take the rank's value, which is exact; the 3×3
//   eigenvectors are torch.linalg.eigh's on the batch, the least-squares concentrations the
//   2×3 pseudo-inverse's in closed form.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace mltool::features::stain_math {

/// Optical density of uint8 N×H×W×3 tiles: N×3×P float32 (P = H·W), torchstain's
/// -log((I + 1) / Io); which pixels are stained (OD >= beta in every channel, N×P) and how many
/// of them each tile has (on the host).
struct Density {
  torch::Tensor od;
  torch::Tensor stained;
  std::vector<std::int64_t> counts;
};
Density density(const torch::Tensor& nhwc);
/// The tiles `rows` of `d` (indices into dimension 0, on the host).
Density select(const Density& d, const std::vector<std::int64_t>& rows);

/// Macenko's stain matrices (N×3×2, haematoxylin first) of tiles with at least 2 stained pixels.
torch::Tensor stain_matrices(const Density& d);
/// The concentrations (N×2×P) of `od` (N×3×P) in the stains `he` (N×3×2): the least-squares
/// solution, (HeᵀHe)⁻¹Heᵀ od.
torch::Tensor concentrations(const torch::Tensor& he, const torch::Tensor& od);
/// The 99th percentile of each tile's concentrations of each stain: N×2.
torch::Tensor max_concentrations(const torch::Tensor& c);
/// The normalised pixels, float32 N×3×P, not yet clamped: the concentrations rescaled by
/// max_c_ref / max_c (N×2) and mixed with the reference's stains he_ref (3×2).
torch::Tensor macenko_pixels(const torch::Tensor& c, const torch::Tensor& max_c,
                             const torch::Tensor& he_ref, const torch::Tensor& max_c_ref);

/// uint8 N×H×W×3 → torchstain's lab_split of its rgb2lab: N×3×P float32 (L in 0..100, a and b
/// centred on 0).
torch::Tensor lab(const torch::Tensor& nhwc);
/// Each tile's per-channel mean and (sample) standard deviation of `lab`: N×3 each.
std::pair<torch::Tensor, torch::Tensor> mean_std(const torch::Tensor& lab);
/// Reinhard: each channel standardised with mu/sd (N×3) and given the target's means/stds (3);
/// back to RGB: float32 N×3×P in 0..1, not yet clamped.
torch::Tensor reinhard_pixels(const torch::Tensor& lab, const torch::Tensor& mu,
                              const torch::Tensor& sd, const torch::Tensor& means,
                              const torch::Tensor& stds);

/// Sum over the last dimension in one fixed pairwise order of elementwise additions.
torch::Tensor tree_sum(torch::Tensor x);

}  // namespace mltool::features::stain_math
