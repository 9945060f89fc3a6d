// Stain normalisation of decoded tiles (`mltool extract --stain-norm`), a LibTorch header:
// include only from torch translation units. The pixels are torchstain's (PyPI,
// torchstain.normalizers, torch backend) tile by tile, within a level of 255 on average: its
// algorithms, its constants (Macenko: Io 240, alpha 1, beta 0.15) and its nearest-rank
// percentile. Each tile's stain is estimated from that tile alone as the reference library
// does (--stain-fit tile), or a source stain is estimated once for a slide's tiles
// (--stain-fit slide, features/slide_stain.hpp). Macenko runs tile by tile on the CPU over the
// math threads, and on another device on the batch's tiles at once as tensors; Reinhard as
// tensors on the batch's device. A tile's bits depend on that tile alone: not on the batch,
// nor on the math threads.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/features/extract.hpp"
#include "mltool/io/image_codec.hpp"

namespace mltool::features {

/// A tile is normalised only where at least this fraction of its pixels has an optical
/// density of at least beta (0.15) in every channel: below it (background, a bare edge) there
/// is too little stain to estimate from, and the tile passes through unchanged.
inline constexpr double kMinStainedFraction = 0.05;

/// A source stain estimated once for many tiles (--stain-fit slide): Macenko's stain matrix
/// (3×2) and 99th-percentile concentrations (2), or Reinhard's LAB means and standard
/// deviations (3 each); CPU float32, as the fitted target is.
struct SourceStain {
  torch::Tensor a;
  torch::Tensor b;
};

/// One method fitted on a reference image: Macenko's stain matrix (3×2, haematoxylin first)
/// and 99th-percentile concentrations (2), or Reinhard's LAB means and standard deviations
/// (3 each, torchstain's scaling: L in 0..100, a and b centred on 0). CPU float32.
class StainNormalizer {
 public:
  /// Fits `method` (not none) on `reference`: uint8 H×W×3 on the CPU. UsageError naming
  /// `what` if it has too little stain to fit on.
  StainNormalizer(StainNorm method, const torch::Tensor& reference, const std::string& what);

  /// Reads the image at `path` (PNG, JPEG or TIFF, through slide::Slide) and fits on it,
  /// noting the file's SHA-256. InputError for a file that cannot be read.
  static StainNormalizer from_file(StainNorm method, const std::string& path);

  /// uint8 N×H×W×3 on any device → the normalised tiles, same shape, device and type. A tile
  /// with too little stain (kMinStainedFraction), or whose estimate is not finite, is left as
  /// it is and flagged in `unchanged` (resized to N).
  torch::Tensor apply(const torch::Tensor& nhwc, std::vector<std::uint8_t>& unchanged) const;

  /// The same with each tile's source stain given instead of estimated from the tile:
  /// `sources[i]` for tile i (N of them); a null one, or a tile with too little stain, leaves
  /// the tile as it is, flagged in `unchanged`.
  torch::Tensor apply(const torch::Tensor& nhwc, const std::vector<const SourceStain*>& sources,
                      std::vector<std::uint8_t>& unchanged) const;

  /// The source stain of the pooled pixels of those of `tiles` (uint8 K×H×W×3 on the CPU)
  /// with enough stain (kMinStainedFraction): what torchstain's fit() estimates on them laid
  /// one under the other, as one image. Nothing when no tile has enough stain. Its bits do not
  /// depend on the math threads.
  std::optional<SourceStain> fit_source(const torch::Tensor& tiles) const;

  /// An image (a QC picture of a whole slide) normalised with its stain estimated from itself
  /// on the CPU, as one tile would be; nothing where it has too little stain or the estimate
  /// is not finite.
  std::optional<io::RgbImage> recolour(const io::RgbImage& image) const;

  /// A source stain as target_json() writes the target, and back (FormatError naming `what`
  /// for a malformed one).
  nlohmann::json stain_json(const SourceStain& stain) const;
  SourceStain stain_from_json(const nlohmann::json& j, const std::string& what) const;

  /// The fitted target: {"stain_matrix": [[..],[..],[..]], "max_concentrations": [..]} or
  /// {"lab_means": [..], "lab_stds": [..]}.
  nlohmann::json target_json() const;
  /// What was used, as run.json and a prediction's job.json record it: {"method", "sha256",
  /// "target" (target_json)}.
  nlohmann::json record() const;
  StainNorm method() const { return method_; }
  const std::string& sha256() const { return sha256_; }

 private:
  // Both apply()s: `own`, each tile's stain estimated from itself.
  torch::Tensor apply(const torch::Tensor& nhwc, const std::vector<const SourceStain*>& sources,
                      std::vector<std::uint8_t>& unchanged, bool own) const;
  StainNorm method_;
  torch::Tensor a_;  // Macenko: HERef 3×2; Reinhard: target means (3)
  torch::Tensor b_;  // Macenko: maxCRef (2); Reinhard: target stds (3)
  std::string sha256_;
};

}  // namespace mltool::features
