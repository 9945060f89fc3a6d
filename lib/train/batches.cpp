#include "mltool/train/batches.hpp"

#include <algorithm>
#include <stdexcept>

namespace mltool::train {

std::vector<std::int64_t> step_sizes(std::int64_t samples, std::int64_t batch, bool keep_last) {
  if (samples < 1 || batch < 1)
    throw std::invalid_argument("step_sizes: needs samples, batch >= 1");
  if (samples <= batch) return {samples};
  std::vector<std::int64_t> out(static_cast<std::size_t>(samples / batch), batch);
  if (keep_last && samples % batch) out.push_back(samples % batch);
  return out;
}

RankSlice rank_slice(std::int64_t batch, std::int64_t world, std::int64_t rank) {
  if (world < 1 || rank < 0 || rank >= world || batch < 0)
    throw std::invalid_argument("rank_slice: needs batch >= 0, world > rank >= 0");
  const std::int64_t base = batch / world, extra = batch % world;
  return {rank * base + std::min(rank, extra), base + (rank < extra ? 1 : 0)};
}

std::vector<std::int64_t> rank_positions(const std::vector<std::int64_t>& steps, std::int64_t world,
                                         std::int64_t rank) {
  std::vector<std::int64_t> out;
  std::int64_t start = 0;
  for (const auto global : steps) {
    const RankSlice s = rank_slice(global, world, rank);
    for (std::int64_t i = 0; i < s.size; ++i) out.push_back(start + s.offset + i);
    start += global;
  }
  return out;
}

std::vector<std::vector<std::size_t>> gradient_buckets(const std::vector<std::int64_t>& bytes,
                                                       std::int64_t cap) {
  std::vector<std::vector<std::size_t>> out;
  std::int64_t filled = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (out.empty() || filled + bytes[i] > cap) {
      if (out.empty() || !out.back().empty()) out.emplace_back();
      filled = 0;
    }
    out.back().push_back(i);
    filled += bytes[i];
  }
  return out;
}

}  // namespace mltool::train
