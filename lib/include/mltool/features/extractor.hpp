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

#include "mltool/features/encoder_card.hpp"
#include "mltool/features/extract.hpp"

namespace mltool::features {

/// How tiles become model input. Without a rule (a plain TorchScript model): resize to
/// input_size (bilinear on floats, antialiased when shrinking), scale to [0, 1], subtract
/// mean, divide by std (per RGB channel). With an encoder card's rule: resize and centre-crop
/// as the model card's transform does (encoder_card.hpp), input_size being the crop.
struct Preprocess {
  int input_size = 224;
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};  // ImageNet
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
  std::optional<ResizeRule> rule;
};

/// The card inside a TorchScript file written by scripts/encoders.py, read without loading
/// the model; nothing for a plain TorchScript file (or one that is not a zip archive, which
/// loading then reports). FormatError for a card that does not follow its schema.
std::optional<EncoderCard> read_encoder_card(const std::string& path);

/// Pillow's resampling of uint8 tiles (Image.resize with BILINEAR or BICUBIC, as
/// torchvision's Resize does it to a PIL image), bit for bit: uint8 N×H×W×3 on any device →
/// uint8 N×size×size×3 there. Fixed-point coefficients as Pillow computes them, accumulated
/// exactly (float64 sums of integers), rounded and clipped after each pass.
torch::Tensor pil_resize(const torch::Tensor& nhwc, int size, bool bicubic);

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

/// How a model is run: its preprocessing, autocast, the card it came with (recorded in
/// describe()), and whether outputs wider than kMaxFeatureWidth are allowed.
struct ModelSettings {
  Preprocess preprocess;
  Amp amp = Amp::none;
  std::optional<EncoderCard> card;
  bool allow_wide = false;
};

/// Values a tile above which an output is taken for unpooled tokens (--allow-wide-features).
inline constexpr std::int64_t kMaxFeatureWidth = 16384;

/// Loads `spec` ("builtin:NAME" or a TorchScript file) on `device` for tiles of
/// `tile_size` pixels. A TorchScript model is put in eval mode and probed with a batch of
/// two tiles: an output that is not one tensor with the batch as its first dimension, or (unless
/// allow_wide) one of more than two dimensions or wider than kMaxFeatureWidth, is a UsageError
/// naming the file and the shape, before any tile is read. InputError for a missing or
/// unloadable file.
std::unique_ptr<Extractor> load_extractor(const std::string& spec, torch::Device device,
                                          int tile_size, const ModelSettings& settings);

/// The message of an exception from LibTorch or a TorchScript forward, without the backtrace
/// and the TorchScript stack: its last non-empty line, whole ("Input height (448) doesn't match
/// model (224).").
std::string torch_error_cause(const std::exception& e);

}  // namespace mltool::features
