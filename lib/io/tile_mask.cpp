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
  return nlohmann::json{{"width", mask.width},
                        {"height", mask.height},
                        {"downsample", {downsample_x, downsample_y}},
                        {"encoding", "png"},
                        {"png", base64_encode(png)}}
      .dump();
}

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
  return out;
}

std::optional<TissueMask> TileStore::tissue_mask(const std::string& id) const {
  const auto doc = record("mask", id);
  if (!doc) return std::nullopt;
  return TissueMask::from_record(*doc, path() + ": meta 'mask/" + id + "'");
}

}  // namespace mltool::io
