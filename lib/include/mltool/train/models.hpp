// The built-in model families as an ordered list of named blocks, each one torch::nn module;
// the forward pass is a fold over the blocks, and forward(in, begin, end) runs any range of
// them alone — the unit that sectioned training (recompute per section) and pipelining cut
// at. A block's parameters are named "BLOCK.LAYER.PARAM" in the state dict
// (e.g. "hidden1.linear.weight"), which is what model.safetensors holds.
//
//   mlp     hidden1 … hiddenN (linear [+ batch norm] + activation + dropout), head (linear)
//   abmil   embed1 … embedN (per-instance linear + activation + dropout), attention (gated
//           attention pooling over each bag's real instances, by mask), head
//   rescnn  stem (uint8 NHWC → normalized NCHW, conv 3×3 + batch norm + activation),
//           stage1 … stageS (residual units; every stage after the first halves the
//           resolution), pool (global average + dropout), head
//   clam_sb fc1 … fcN (per-instance linear + ReLU + dropout), clam (gated attention, one
//           branch; bag classifier; per-class instance classifiers on the top/bottom k)
//   clam_mb the same with one attention branch and one bag classifier per class
//   dsmil   dsmil (instance classifier, critical-instance attention, Conv1d bag classifier)
//   transmil fc1, cls (class token), layer1, ppeg, layer2 (Nyström-attention layers and the
//           position convolutions, each bag on its own tokens), norm, head
// clam and dsmil end in their own classifier (no head) and add their own loss terms to the
// task's (BlockModel::objective).
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mltool/train/model_spec.hpp"

namespace mltool::train {

/// What flows from block to block: the activations, and for bags the (B × L) bool mask of
/// real (not padding) instances, which blocks pass on.
struct Activation {
  // Blocks give what they set, the rest stays undefined ({x, mask}), without a warning for
  // the fields they leave out.
  Activation(torch::Tensor x_ = {}, torch::Tensor mask_ = {}, torch::Tensor attention_ = {},
             torch::Tensor extra_ = {})
      : x(std::move(x_)),
        mask(std::move(mask_)),
        attention(std::move(attention_)),
        extra(std::move(extra_)) {}
  torch::Tensor x;
  torch::Tensor mask;  ///< undefined for tile and image inputs
  /// Bags: the weights a MIL head gives each instance (B × L, zero on padding), what predict's
  /// attention.csv and heatmaps show. Set by the block that computes them; BlockModel's
  /// forward passes it on through the blocks after (undefined: the model tells none).
  torch::Tensor attention;
  /// In training, what a family's own loss terms read besides the logits, one row per sample
  /// (clam: each bag's instance loss for each label it could have; dsmil: each bag's
  /// max-instance logits). Set by the family's last block; undefined where it has none.
  torch::Tensor extra;
};

class StepLoss;

/// One named block. A block made of a sequence of parts (rescnn's stages: residual units)
/// says so, and sectioned training may cut between them: the block stays the unit of names,
/// parameters and spec-named sections, the part the finest cut.
class Block : public torch::nn::Module {
 public:
  virtual Activation forward(const Activation& in) = 0;
  /// Its parts: forward is forward_part over 0 … parts() - 1 in order.
  virtual std::size_t parts() const { return 1; }
  virtual Activation forward_part(const Activation& in, std::size_t) { return forward(in); }
  /// The buffers part `i` moves (batch norm's statistics).
  virtual std::vector<torch::Tensor> part_buffers(std::size_t) { return buffers(); }
};

class BlockModel : public torch::nn::Module {
 public:
  /// Appends a block, registered as a submodule under `name`.
  void add(const std::string& name, std::shared_ptr<Block> block);
  std::size_t size() const { return blocks_.size(); }
  const std::vector<std::string>& names() const { return names_; }
  Block& block(std::size_t i) { return *blocks_.at(i); }

  /// Runs blocks [begin, end) on `in`.
  Activation forward(Activation in, std::size_t begin, std::size_t end);
  /// All blocks: the logits (batch × classes).
  torch::Tensor forward(Activation in) { return forward(std::move(in), 0, size()).x; }

  /// The parts of all blocks in order (Block::parts): what --sections cuts between. A part
  /// is named by its block ("head"), or "BLOCK.I" where the block has several ("stage1.0").
  std::size_t part_count() const { return parts_.size(); }
  std::vector<std::string> part_names() const;
  /// Runs parts [begin, end) on `in`.
  Activation forward_parts(Activation in, std::size_t begin, std::size_t end);
  /// The buffers parts [begin, end) move.
  std::vector<torch::Tensor> part_buffers(std::size_t begin, std::size_t end);
  /// The part index of block `block`'s first part (part_count() for size()): block bounds as
  /// part bounds.
  std::size_t first_part(std::size_t block) const;
  /// The blocks whose parts [begin, end) are, by name: a whole block by its name, a piece of
  /// one by its parts' names.
  std::vector<std::string> names_of_parts(std::size_t begin, std::size_t end) const;

  /// Parameters (not buffers) of block i, and of the whole model.
  std::int64_t parameter_count(std::size_t i);
  std::int64_t parameter_count();

  /// A family's training objective (clam, dsmil): the weighted sum over the samples of the
  /// task's per-sample loss on the logits `out.x` combined with the family's own terms
  /// (Activation::extra) and the targets `y`; weighted as `task`'s loss_sum, so that
  /// dividing by its weight_sum gives the step's loss and parts of a batch add up to it.
  using Objective = std::function<torch::Tensor(const StepLoss& task, const Activation& out,
                                                const torch::Tensor& y)>;
  void set_objective(Objective objective) { objective_ = std::move(objective); }
  /// Unset: the task's loss on the logits alone.
  const Objective& objective() const { return objective_; }

 private:
  Objective objective_;
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::vector<std::pair<std::size_t, std::size_t>> parts_;  ///< (block, its part) in order
};

/// Builds the model of `spec` for inputs of `input_dims` features (tile, bag) or 3-channel
/// tiles (image; input_dims ignored) and `classes` outputs. Parameters are initialised from
/// torch's default generator: seed it first.
std::shared_ptr<BlockModel> build_model(const ModelSpec& spec, std::int64_t input_dims,
                                        std::int64_t classes);

}  // namespace mltool::train
