// The tile store's "mask/<id>" record (TissueMask in tile_store.hpp). The meta database
// holds JSON only (python-lmdb readers json.loads every record they know), so the mask's
// PNG travels base64-encoded inside a JSON object: a 4096² mask is some tens of KiB.
#include <algorithm>
#include <iterator>
#include <optional>

#include "mltool/io/tile_store.hpp"
#include "mltool/util/error.hpp"

namespace mltool::io {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t v = 0;
    for (std::size_t j = 0; j < 3; ++j)
      v = (v << 8) | (j < n ? static_cast<std::uint8_t>(bytes[i + j]) : 0u);
    for (std::size_t j = 0; j < 4; ++j)
      out.push_back(j <= n ? kAlphabet[(v >> (18 - 6 * j)) & 63] : '=');
  }
  return out;
}

// Nothing for text that is not padded base64.
std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  int value[256];
  std::fill(std::begin(value), std::end(value), -1);
  for (int i = 0; i < 64; ++i) value[static_cast<unsigned char>(kAlphabet[i])] = i;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  std::uint32_t bits = 0;
  int held = 0;
  for (std::size_t i = 0; i + pad < text.size(); ++i) {
    const int v = value[static_cast<unsigned char>(text[i])];
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    held += 6;
    if (held >= 8) {
      held -= 8;
      out.push_back(static_cast<char>((bits >> held) & 255));
    }
  }
  return out;
}

}  // namespace

std::string TissueMask::to_record() const {
  const std::string png = encode_png_grey(mask.pixels.data(), mask.width, mask.height);
  nlohmann::json doc = {{"width", mask.width},
                        {"height", mask.height},
                        {"downsample", {downsample_x, downsample_y}},
                        {"encoding", "png"},
                        {"png", base64_encode(png)}};
  if (!class_names.empty())
    doc["classes"] = {{"names", class_names},
                      {"tissue", tissue_classes},
                      {"artifacts", artifact_classes},
                      {"png", base64_encode(encode_png_grey(classes.pixels.data(), classes.width,
                                                            classes.height))}};
  return doc.dump();
}

namespace {

// The "classes" object of a mask record into `out` (its size must be the mask's).
void read_classes(const nlohmann::json& doc, const std::string& where, TissueMask& out) {
  auto bad = [&](const std::string& what) { return FormatError(where + ": 'classes': " + what); };
  const auto names = [&](const char* key) {
    const auto& v = doc.value(key, nlohmann::json());
    if (!v.is_array()) throw bad(std::string("'") + key + "' must be a list of names");
    std::vector<std::string> out_names;
    for (const auto& n : v) {
      if (!n.is_string()) throw bad(std::string("'") + key + "' holds " + n.dump());
      out_names.push_back(n.get<std::string>());
    }
    return out_names;
  };
  if (!doc.is_object() || !doc.value("png", nlohmann::json()).is_string())
    throw bad("expected {\"names\", \"tissue\", \"artifacts\", \"png\"}");
  out.class_names = names("names");
  out.tissue_classes = names("tissue");
  out.artifact_classes = names("artifacts");
  const auto png = base64_decode(doc.at("png").get<std::string>());
  if (!png) throw bad("'png' is not base64");
  out.classes = decode_png_grey(png->data(), png->size(), where);
  if (out.classes.width != out.mask.width || out.classes.height != out.mask.height)
    throw bad("the class map is not the mask's size");
  for (auto v : out.classes.pixels)
    if (v >= out.class_names.size())
      throw bad("a pixel names class " + std::to_string(v) + " of " +
                std::to_string(out.class_names.size()));
}

}  // namespace

TissueMask TissueMask::from_record(const nlohmann::json& doc, const std::string& where) {
  auto bad = [&](const std::string& what) { return FormatError(where + ": " + what); };
  if (!doc.is_object() || !doc.value("width", nlohmann::json()).is_number_integer() ||
      !doc.value("height", nlohmann::json()).is_number_integer() ||
      !doc.value("png", nlohmann::json()).is_string() ||
      doc.value("encoding", std::string()) != "png")
    throw bad("expected {\"width\", \"height\", \"downsample\", \"encoding\": \"png\", \"png\"}");
  const auto& scale = doc.value("downsample", nlohmann::json());
  if (!scale.is_array() || scale.size() != 2 || !scale[0].is_number() || !scale[1].is_number() ||
      !(scale[0].get<double>() > 0) || !(scale[1].get<double>() > 0))
    throw bad("'downsample' must be two positive numbers");
  const auto png = base64_decode(doc.at("png").get<std::string>());
  if (!png) throw bad("'png' is not base64");
  TissueMask out;
  out.mask = decode_png_grey(png->data(), png->size(), where);
  out.downsample_x = scale[0].get<double>();
  out.downsample_y = scale[1].get<double>();
  if (out.mask.width != doc.at("width").get<int>() ||
      out.mask.height != doc.at("height").get<int>())
    throw bad("the PNG is " + std::to_string(out.mask.width) + "x" +
              std::to_string(out.mask.height) + ", the record says " +
              std::to_string(doc.at("width").get<int>()) + "x" +
              std::to_string(doc.at("height").get<int>()));
  if (doc.contains("classes")) read_classes(doc.at("classes"), where, out);
  return out;
}

const std::uint8_t* class_colour(const std::string& name, const std::vector<std::string>& tissue,
                                 const std::vector<std::string>& artifacts) {
  static constexpr std::uint8_t kTissue[][3] = {
      {0, 170, 80}, {0, 150, 220}, {60, 200, 200}, {200, 200, 40}};
  static constexpr std::uint8_t kArtifacts[][3] = {{230, 60, 40},  {250, 170, 0},  {160, 40, 200},
                                                   {240, 90, 170}, {130, 110, 60}, {110, 110, 110}};
  static constexpr std::uint8_t kOther[3] = {160, 160, 160};
  const auto rank = [&](const std::vector<std::string>& v) {
    return static_cast<std::size_t>(std::find(v.begin(), v.end(), name) - v.begin());
  };
  if (const auto t = rank(tissue); t < tissue.size()) return kTissue[t % 4];
  if (const auto a = rank(artifacts); a < artifacts.size()) return kArtifacts[a % 6];
  return kOther;
}

std::optional<TissueMask> TileStore::tissue_mask(const std::string& id) const {
  const auto doc = record("mask", id);
  if (!doc) return std::nullopt;
  return TissueMask::from_record(*doc, path() + ": meta 'mask/" + id + "'");
}

}  // namespace mltool::io
