// Pieces export_h5.cpp and import_h5.cpp share (not part of the public API).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mltool::io {
class FeatureStore;
class TileStore;
}  // namespace mltool::io

namespace mltool::features::detail {

/// The slide of a key: the part before its last '/' (the whole key if it has none), as pack
/// reads it.
std::string slide_of(std::string_view key);

/// "<slide>/x<X>_y<Y>": the key import gives a row.
std::string xy_key(const std::string& slide, std::int64_t x, std::int64_t y);
/// The (x, y) of a key "<slide>/x<X>_y<Y>", or nullopt.
std::optional<std::pair<std::int64_t, std::int64_t>> parse_xy_key(std::string_view key);

/// The level-0 top-left corners (x, y interleaved) of rows `rows` of `store`, whose keys are
/// tile keys of slide `id` in tile store `tiles`, and that slide's "slides/<id>" record: where
/// export h5 and extract --slide-encoder take coordinates from. InputError naming both stores
/// when the slide or one of the tiles is not in the tile store.
std::pair<std::vector<std::int64_t>, nlohmann::json> tile_coords(
    const io::TileStore& tiles, const io::FeatureStore& store, const std::string& id,
    const std::vector<std::uint64_t>& rows);

/// Whether a store holds one row per slide (or per group of slides) written by extract
/// --slide-encoder: features.json's model.kind is "slide-encoder".
bool slide_level(const io::FeatureStore& store);

/// The encoder a store's features.json names: model.encoder (the card's name, or an imported
/// file's), model.name, the model file's stem, or "unknown".
std::string encoder_name(const io::FeatureStore& store);

/// fsyncs `temp`, renames it to `path` and fsyncs the directory (best effort).
void publish(const std::string& temp, const std::string& path);

}  // namespace mltool::features::detail
