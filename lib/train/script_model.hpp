// `mltool train --model MODEL.pt`: a TorchScript module (torch.jit.script or torch.jit.trace,
// then .save) trained in place of a built-in family. Told apart from a JSON spec by content:
// a zip archive (TorchScript's container) is a module, anything else a spec. Internal to
// lib/train.
#pragma once

#include <torch/script.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mltool/train/models.hpp"

namespace mltool::train {

/// Whether `path` starts like a zip archive (TorchScript's container), not a JSON spec.
bool is_script_file(const std::string& path);

struct ScriptModel {
  std::string path;
  std::string sha256;  ///< of the file, recorded in run.json so --resume refuses another
  std::shared_ptr<torch::jit::Module> module;
  /// Trained on bags: forward(bag) on each bag's L x D instances returns its logits
  /// (classes, or 1 x classes); else forward(features) on N x D returns N x classes.
  bool bag = false;
  /// Trained on an image dataset: forward(pixels) takes float32 N x 3 x H x W in [0, 1] (the
  /// decoded tiles / 255, after --stain-norm and --augment; models::pixels_to_float) and
  /// returns N x classes. Its own normalisation is its business.
  bool pixels = false;
};

/// Loads the module on the CPU (InputError naming the file if it is not one).
ScriptModel load_script_model(const std::string& path);

/// A forward on zeros in eval mode, before anything is written (a batch of 2 samples of
/// `sample` shape: {D} features, or {3, T, T} pixels for tiles of T px; or a bag of 3
/// instances): InputError naming the file and the shape if it fails or returns anything but
/// the logits. A module written for the other unit (a bag model given tiles, a tile model
/// given bags; told by a second forward on one row more) is refused as such, naming
/// `manifest`, the dataset.json that says the unit.
void probe_script(const ScriptModel& m, const std::vector<std::int64_t>& sample,
                  std::int64_t classes, const std::string& manifest);

/// The root's children in the order its forward runs them, when forward is exactly
/// child_k(...child_1(x)) (each child once, the root holding no tensors of its own); else
/// empty.
std::vector<std::string> sequential_children(const torch::jit::Module& m);

/// The module as a block model whose parameters and buffers are the module's own tensors
/// (trained in place) under its own names, train()/eval() reaching it, every forward checking
/// the output's shape (InputError naming the file otherwise); on pixels, the uint8 tiles
/// converted first (ScriptModel::pixels). On tiles and pixels, a module whose
/// forward runs its children in sequence has one block per child (what --sections cuts
/// at); otherwise, and on bags, one block, "script".
std::shared_ptr<BlockModel> script_block_model(const ScriptModel& m, std::int64_t classes);

/// Saves a CPU copy of the module in eval mode as TorchScript (torch.jit.load reads it).
void save_script(const torch::jit::Module& m, const std::string& path);

}  // namespace mltool::train
