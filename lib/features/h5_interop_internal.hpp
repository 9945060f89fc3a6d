// Pieces export_h5.cpp and import_h5.cpp share (not part of the public API).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mltool::io {
class FeatureStore;
}

namespace mltool::features::detail {

/// The slide of a key: the part before its last '/' (the whole key if it has none), as pack
/// reads it.
std::string slide_of(std::string_view key);

/// "<slide>/x<X>_y<Y>": the key import gives a row.
std::string xy_key(const std::string& slide, std::int64_t x, std::int64_t y);
/// The (x, y) of a key "<slide>/x<X>_y<Y>", or nullopt.
std::optional<std::pair<std::int64_t, std::int64_t>> parse_xy_key(std::string_view key);

/// The attributes CLAM and TRIDENT put on `coords`, from a tile store's slides/<id> record.
nlohmann::json coords_attributes(const nlohmann::json& slide, const std::string& id,
                                 const std::string& outdir);

/// The encoder a store's features.json names: model.encoder, model.name, the model file's
/// name, or "unknown".
std::string encoder_name(const io::FeatureStore& store);

/// fsyncs `temp`, renames it to `path` and fsyncs the directory (best effort).
void publish(const std::string& temp, const std::string& path);

}  // namespace mltool::features::detail
