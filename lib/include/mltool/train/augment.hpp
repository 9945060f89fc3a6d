// Augmentation of a pixel model's training batches (`mltool train --augment`), a LibTorch
// header: include only from torch translation units. Applied on the batch's device, sample by
// sample, with each sample's draws a function of (the run's seed, the global step, the
// sample's index in the training split) only — never of its position in the batch — so
// --resume, --sections, --micro-batches and --nproc see the same pixels as the plain run.
// docs/train.md#augmentation.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mltool::train {

/// One transform of --augment, in the order given.
enum class AugmentKind { flip, rot90, hed, brightness, contrast, saturation };

struct AugmentItem {
  AugmentKind kind = AugmentKind::flip;
  double amount = 0;  ///< hed: sigma; brightness, contrast, saturation: X; else 0
  std::string text;   ///< as given: "hed:0.05"
};

/// "flip,rot90,hed:0.05" (items may also come in several arguments, each a comma list) →
/// the items. UsageError naming --augment for an unknown item, a missing or extra amount, or
/// an amount out of range (hed: 0 < sigma <= 1; the others: 0 < X <= 1).
std::vector<AugmentItem> parse_augment(const std::vector<std::string>& texts);

/// The transforms of one run.
class Augmenter {
 public:
  Augmenter(std::vector<AugmentItem> items, std::uint64_t seed);

  /// uint8 B×H×W×3 (H == W when rot90 is among the items) on any device → the augmented
  /// batch, same shape, type and device. `ids` (B): each sample's index in the training split;
  /// `step`: the global step (0-based). `params`, when given, gets what was drawn: one object
  /// per item, each a list of B rows of its parameters (flip: [horizontal, vertical], rot90:
  /// [k], hed: [a_h, a_e, a_d, b_h, b_e, b_d], the others: [factor]).
  torch::Tensor apply(const torch::Tensor& batch, const std::vector<std::int64_t>& ids,
                      std::int64_t step, nlohmann::json* params = nullptr) const;

  bool empty() const { return items_.empty(); }
  const std::vector<AugmentItem>& items() const { return items_; }

 private:
  std::vector<AugmentItem> items_;
  std::uint64_t seed_;
};

}  // namespace mltool::train
