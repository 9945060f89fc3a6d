// The encoder card: `mltool.json` inside a TorchScript file written by scripts/encoders.py
// (schemas/encoder.schema.json). It says what the module is (a patch or a slide encoder, its
// name, version and weights) and, for a patch encoder, the model card's preprocessing, which
// mltool extract then applies without flags. No LibTorch in this header.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mltool/features/extract.hpp"

namespace mltool::features {

/// The extra file of a TorchScript archive that holds the card.
inline constexpr const char* kEncoderCardFile = "mltool.json";

/// How the model card resizes a tile: the (square) tile to resize × resize, then a centre
/// crop of crop × crop. antialias: Pillow's resampling of uint8 pixels (what
/// torchvision.transforms.Resize does to a PIL image); else interpolate on floats.
struct ResizeRule {
  int resize = 224;
  bool bicubic = false;
  bool antialias = true;
  int crop = 224;
  bool operator==(const ResizeRule& o) const {
    return resize == o.resize && bicubic == o.bicubic && antialias == o.antialias &&
           crop == o.crop;
  }
};

struct EncoderCard {
  std::string file;  ///< the TorchScript file it came from (for messages)
  bool slide = false;  ///< kind "slide" (features + coordinates → one row), else "patch"
  std::string name;
  std::string version;
  std::int64_t dims = 0;
  // Patch encoders:
  ResizeRule resize;
  std::array<float, 3> mean{};
  std::array<float, 3> std{};
  std::optional<Amp> amp;
  std::optional<io::DType> dtype;
  // Slide encoders:
  std::string patch_encoder;  ///< the patch encoder whose features it takes
  std::int64_t patch_dims = 0;
  nlohmann::json doc;  ///< the whole card

  /// "uni2-h v1" (and " (random weights)").
  std::string label() const;
  /// What a feature store records of the encoder (features.json's model.encoder): name,
  /// version, kind, weights (sha256, random), preprocess, license.
  nlohmann::json identity() const;
};

/// Parses a card; FormatError naming `file`, mltool.json and the field for a card that does
/// not follow schemas/encoder.schema.json.
EncoderCard parse_encoder_card(const std::string& text, const std::string& file);

/// The encoder name a feature store was made with (features.json's model.encoder: the card's
/// name, or the name an imported TRIDENT file gave), or "" for a built-in or plain TorchScript
/// extractor.
std::string encoder_name_of(const nlohmann::json& features_model);

}  // namespace mltool::features
