// The check of a slide id read back from a store (io::slide_id_for makes them; tile_store.hpp).
#pragma once

#include <string>
#include <string_view>

namespace mltool::io {

/// Checks a slide id read back from a store — a tile store's "done/<id>" key, the slide part of
/// its tile keys or of a feature store's keys — by slide_id_for's rules, so that it is safe as a
/// file name wherever it becomes one (export geojson, export h5, predict's heatmaps): not empty,
/// "." or "..", no '/', no control character. FormatError naming `store`, `key` and the rule
/// broken otherwise: the store was not written by mltool, or was altered.
void check_slide_id(std::string_view id, const std::string& store, std::string_view key);

}  // namespace mltool::io
