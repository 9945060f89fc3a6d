#include "mltool/features/shard.hpp"

#include <algorithm>

#include "mltool/io/crc32c.hpp"
#include "mltool/io/tile_store.hpp"

namespace mltool::features {

std::uint32_t keys_crc32c(const std::vector<std::string>& keys) {
  std::uint32_t crc = 0;
  for (const auto& key : keys) {
    crc = io::crc32c_extend(crc, key.data(), key.size());
    crc = io::crc32c_extend(crc, "\n", 1);
  }
  return crc;
}

namespace {

// The store's slides in store order, each with its rows: keys of a slide are together.
std::vector<SlideRows> slides_of(const std::vector<std::string>& keys) {
  std::vector<SlideRows> slides;
  for (std::uint64_t row = 0; row < keys.size(); ++row) {
    const std::string_view id = io::slide_of_key(keys[row]);
    if (slides.empty() || slides.back().id != id) slides.push_back({std::string(id), row, 0});
    ++slides.back().rows;
  }
  return slides;
}

}  // namespace

ShardPlan plan_shard(const std::vector<std::string>& keys, const util::Shard& shard) {
  ShardPlan plan;
  plan.shard = shard;
  const std::vector<SlideRows> all = slides_of(keys);
  plan.store_slides = all.size();
  plan.store_rows = keys.size();
  plan.store_keys_crc32c = keys_crc32c(keys);
  // Shards take slides by their position in id order, as `tile --shard` takes a sorted list.
  std::vector<std::string> ids;
  for (const auto& s : all) ids.push_back(s.id);
  std::sort(ids.begin(), ids.end());
  std::vector<std::string> mine = util::take_shard(ids, shard);
  std::sort(mine.begin(), mine.end());
  for (const auto& s : all) {
    if (!std::binary_search(mine.begin(), mine.end(), s.id)) continue;
    plan.slides.push_back(s);
    plan.starts.push_back(plan.rows);
    plan.rows += s.rows;
  }
  return plan;
}

std::uint64_t ShardPlan::store_row(std::uint64_t k) const {
  const auto it = std::upper_bound(starts.begin(), starts.end(), k);
  const std::size_t s = static_cast<std::size_t>(it - starts.begin()) - 1;
  return slides[s].first + (k - starts[s]);
}

bool ShardPlan::takes_row(std::uint64_t row) const {
  const auto it = std::upper_bound(slides.begin(), slides.end(), row,
                                   [](std::uint64_t r, const SlideRows& s) { return r < s.first; });
  return it != slides.begin() && row < std::prev(it)->first + std::prev(it)->rows;
}

std::vector<std::uint64_t> ShardPlan::batches(std::uint64_t from, std::uint64_t batch) const {
  std::vector<std::uint64_t> out;
  if (from >= rows) return out;
  const std::uint64_t first_row = store_row(from);
  for (const auto& s : slides) {
    const std::uint64_t begin = std::max(s.first, first_row);
    const std::uint64_t end = s.first + s.rows;
    if (begin >= end) continue;
    for (std::uint64_t b = begin / batch; b <= (end - 1) / batch; ++b)
      if (out.empty() || out.back() < b) out.push_back(b);
  }
  return out;
}

nlohmann::json ShardPlan::to_json(const nlohmann::json& run) const {
  nlohmann::json slide_list = nlohmann::json::array();
  for (const auto& s : slides) slide_list.push_back({{"id", s.id}, {"rows", s.rows}});
  return {{"index", shard.index},
          {"count", shard.count},
          {"slides", slide_list},
          {"store_slides", store_slides},
          {"store_rows", store_rows},
          {"store_keys_crc32c", store_keys_crc32c},
          {"run", run}};
}

}  // namespace mltool::features
