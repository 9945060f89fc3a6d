// What a run leaves for other tools: weights as safetensors and as a state dict that
// torch.load reads, and the validation predictions. Internal to lib/train.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "mltool/train/models.hpp"
#include "mltool/train/trained_run.hpp"

namespace mltool::train {

class Task;

/// The model's parameters and buffers under their exported names, in module order: "BLOCK.
/// LAYER.NAME" as in PyTorch's state_dict; a TorchScript model's own names. The tensors share
/// the model's storage.
std::vector<std::pair<std::string, torch::Tensor>> state_dict(BlockModel& model);

/// Copies every tensor of state_dict(model) from the safetensors file at `path` (the reverse
/// of export_safetensors): FormatError naming the file for a tensor it lacks or of another
/// shape.
void import_safetensors(BlockModel& model, const std::string& path);

/// The model's parameters and buffers ("BLOCK.LAYER.NAME", as in PyTorch's state_dict) as a
/// safetensors file, written atomically.
void export_safetensors(BlockModel& model, const std::string& path,
                        const std::map<std::string, std::string>& metadata);

/// The same tensors as a dict {name: tensor} in torch.save's zip format, which
/// torch.load(path) reads with its default weights_only=True.
void export_state_dict(BlockModel& model, const std::string& path);

/// predictions.csv: record (position in the split), sample (row for tiles, slide or bag for
/// bags, tile key for images), then the task's columns (classification: label, prediction,
/// one logit per label; regression: target, prediction; survival: time, event, risk, and with
/// nll the survival at each cut).
void write_predictions(const std::string& path, const SplitSamples& samples,
                       const torch::Tensor& outputs, const Task& task);

}  // namespace mltool::train
