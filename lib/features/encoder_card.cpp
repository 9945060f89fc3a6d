// Reading the encoder card (schemas/encoder.schema.json) that scripts/encoders.py puts in a
// TorchScript file.
#include "mltool/features/encoder_card.hpp"

#include "mltool/util/error.hpp"

namespace mltool::features {

// The names of --amp's and --dtype's values: here, in the core library, because cards name
// them too (extract's option table lives in the LibTorch half).
const util::EnumNames<Amp> kAmps = {{Amp::none, "none"}, {Amp::f16, "f16"}, {Amp::bf16, "bf16"}};
const util::EnumNames<io::DType> kFeatureDTypes = {{io::DType::float32, "f32"},
                                                   {io::DType::float16, "f16"}};

namespace {

using json = nlohmann::json;

class CardReader {
 public:
  CardReader(const json& doc, std::string file) : doc_(doc), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw FormatError(at_file(file_, std::string(kEncoderCardFile) + ": '" + field + "' " + what +
                                         " (schemas/encoder.schema.json; export it again with "
                                         "scripts/encoders.py)"));
  }
  const json& at(const json& object, const std::string& field, const std::string& path) const {
    if (!object.is_object() || !object.contains(field)) fail(path, "is missing");
    return object.at(field);
  }
  std::string text(const json& object, const std::string& field, const std::string& path) const {
    const json& v = at(object, field, path);
    if (!v.is_string() || v.get<std::string>().empty()) fail(path, "must be a non-empty string");
    return v.get<std::string>();
  }
  std::int64_t positive(const json& object, const std::string& field,
                        const std::string& path) const {
    const json& v = at(object, field, path);
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1) fail(path, "must be an integer >= 1");
    return v.get<std::int64_t>();
  }
  std::array<float, 3> triple(const json& object, const std::string& field,
                              const std::string& path, bool positive_only) const {
    const json& v = at(object, field, path);
    if (!v.is_array() || v.size() != 3) fail(path, "must be three numbers R, G, B");
    std::array<float, 3> out{};
    for (std::size_t i = 0; i < 3; ++i) {
      if (!v[i].is_number()) fail(path, "must be three numbers R, G, B");
      out[i] = v[i].get<float>();
      if (positive_only && !(out[i] > 0)) fail(path, "must be positive");
    }
    return out;
  }
  template <class E>
  std::optional<E> optional_enum(const util::EnumNames<E>& names, const std::string& field) const {
    if (!doc_.contains(field)) return std::nullopt;
    const std::string name = text(doc_, field, field);
    for (const auto& [value, n] : names)
      if (name == n) return value;
    fail(field, "is not one of the known values ('" + name + "')");
  }

  void read_preprocess(EncoderCard& card) const {
    const json& p = at(doc_, "preprocess", "preprocess");
    card.resize.resize = static_cast<int>(positive(p, "resize", "preprocess.resize"));
    card.resize.crop = static_cast<int>(positive(p, "crop", "preprocess.crop"));
    if (card.resize.crop > card.resize.resize)
      fail("preprocess.crop", "is larger than preprocess.resize");
    const std::string mode = text(p, "interpolation", "preprocess.interpolation");
    if (mode != "bilinear" && mode != "bicubic")
      fail("preprocess.interpolation", "must be bilinear or bicubic, not '" + mode + "'");
    card.resize.bicubic = mode == "bicubic";
    const json& antialias = at(p, "antialias", "preprocess.antialias");
    if (!antialias.is_boolean()) fail("preprocess.antialias", "must be true or false");
    card.resize.antialias = antialias.get<bool>();
    card.mean = triple(p, "mean", "preprocess.mean", false);
    card.std = triple(p, "std", "preprocess.std", true);
  }

  EncoderCard read() const {
    if (!doc_.is_object()) fail("(document)", "is not a JSON object");
    if (doc_.value("format", json()) != "mltool.encoder") fail("format", "must be mltool.encoder");
    if (doc_.value("format_version", json()) != 1)
      fail("format_version", "must be 1 (this mltool reads version 1)");
    EncoderCard card;
    card.file = file_;
    card.doc = doc_;
    const std::string kind = text(doc_, "kind", "kind");
    if (kind != "patch" && kind != "slide") fail("kind", "must be patch or slide");
    card.slide = kind == "slide";
    card.name = text(doc_, "name", "name");
    card.version = doc_.value("version", json("")).is_string() ? doc_.value("version", "") : "";
    card.dims = positive(doc_, "dims", "dims");
    const json& weights = at(doc_, "weights", "weights");
    text(weights, "sha256", "weights.sha256");
    if (!at(weights, "random", "weights.random").is_boolean())
      fail("weights.random", "must be true or false");
    if (card.slide) {
      card.patch_encoder = text(doc_, "patch_encoder", "patch_encoder");
      if (doc_.contains("patch_dims")) card.patch_dims = positive(doc_, "patch_dims", "patch_dims");
    } else {
      read_preprocess(card);
      card.amp = optional_enum(kAmps, "amp");
      card.dtype = optional_enum(kFeatureDTypes, "dtype");
    }
    return card;
  }

 private:
  const json& doc_;
  std::string file_;
};

}  // namespace

std::string EncoderCard::label() const {
  const bool random = doc.at("weights").at("random").get<bool>();
  return name + (version.empty() ? "" : " " + version) + (random ? " (random weights)" : "");
}

json EncoderCard::identity() const {
  const json& weights = doc.at("weights");
  json id = {{"name", name},
             {"version", version},
             {"kind", slide ? "slide" : "patch"},
             {"weights_sha256", weights.at("sha256")},
             {"random_weights", weights.at("random")},
             {"license", doc.value("license", "")}};
  if (slide) {
    id["patch_encoder"] = patch_encoder;
  } else {
    id["preprocess"] = doc.at("preprocess");
  }
  return id;
}

EncoderCard parse_encoder_card(const std::string& text, const std::string& file) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(at_file(file, std::string(kEncoderCardFile) + " is not JSON: " + e.what()));
  }
  return CardReader(doc, file).read();
}

std::string encoder_name_of(const json& features_model) {
  if (!features_model.is_object()) return "";
  const json encoder = features_model.value("encoder", json());
  if (encoder.is_string()) return encoder.get<std::string>();  // imported from TRIDENT's h5
  return encoder.is_object() ? encoder.value("name", "") : "";
}

}  // namespace mltool::features
