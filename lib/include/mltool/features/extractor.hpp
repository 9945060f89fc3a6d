// Feature extractors of `mltool extract` (a LibTorch header: include only from torch
// translation units). One Extractor is one model replica on one device; it takes a batch of
// decoded tiles as uint8 N×H×W×3 on its device and returns float32 N×D.
#pragma once

#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/features/extract.hpp"

namespace mltool::features {

/// How tiles become model input: resize to input_size (bilinear, antialiased when
/// shrinking), scale to [0, 1], subtract mean, divide by std (per RGB channel).
struct Preprocess {
  int input_size = 224;
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};  // ImageNet
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
};

/// Names of the built-in extractors, for "builtin:NAME".
std::vector<std::string> builtin_names();

/// What a built-in extractor's columns mean, one line per column group (for docs and --help).
std::string describe_builtin(const std::string& name);

/// The preprocessing a TorchScript model gets, as a pure function (exposed for tests):
/// uint8 N×H×W×3 → float32 N×3×S×S.
torch::Tensor preprocess(const torch::Tensor& nhwc, const Preprocess& p);

class Extractor {
 public:
  virtual ~Extractor() = default;
  /// uint8 N×H×W×3 on device() → float32 N×dims() on device().
  virtual torch::Tensor forward(const torch::Tensor& nhwc) = 0;
  virtual std::int64_t dims() const = 0;
  virtual torch::Device device() const = 0;
  /// The "model" object of features.json.
  virtual nlohmann::json describe() const = 0;
};

/// Loads `spec` ("builtin:NAME" or a TorchScript file) on `device` for tiles of
/// `tile_size` pixels. A TorchScript model is put in eval mode and probed with a batch of
/// two tiles: an output that is not one tensor with the batch as its first dimension is a
/// UsageError naming the file, before any tile is read. InputError for a missing or
/// unloadable file.
std::unique_ptr<Extractor> load_extractor(const std::string& spec, torch::Device device,
                                          int tile_size, const Preprocess& preprocess, Amp amp);

}  // namespace mltool::features
