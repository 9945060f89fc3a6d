// `--shard I/N`: the part of a list one of N machines takes (tile: of the slide list; extract:
// of a tile store's complete slides). Parsed and applied here only, so every command reads
// and words it alike.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mltool::util {

/// Shard `index` of `count` (0 <= index < count); {0, 1} is the whole list.
struct Shard {
  std::size_t index = 0;
  std::size_t count = 1;

  bool whole() const { return count == 1; }
  /// "I/N".
  std::string text() const;
  /// Whether item `position` of the list belongs to this shard.
  bool takes(std::size_t position) const { return position % count == index; }
};

/// Parses "I/N" (0 <= I < N); "" is the whole list. UsageError naming --shard otherwise.
Shard parse_shard(const std::string& text);

/// The items at positions I, I+N, I+2N, ... of `items`.
template <class T>
std::vector<T> take_shard(const std::vector<T>& items, const Shard& shard) {
  std::vector<T> out;
  for (std::size_t i = shard.index; i < items.size(); i += shard.count) out.push_back(items[i]);
  return out;
}

}  // namespace mltool::util
