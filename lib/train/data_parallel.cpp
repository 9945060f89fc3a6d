#include "mltool/train/data_parallel.hpp"

#include <algorithm>
#include <stdexcept>

namespace mltool::train {

RankSlice rank_slice(std::int64_t batch, std::int64_t world, std::int64_t rank) {
  if (world < 1 || rank < 0 || rank >= world || batch < world)
    throw std::invalid_argument("rank_slice: needs batch >= world > rank >= 0");
  const std::int64_t base = batch / world, extra = batch % world;
  return {rank * base + std::min(rank, extra), base + (rank < extra ? 1 : 0)};
}

std::vector<std::int64_t> rank_positions(std::int64_t used, std::int64_t batch, std::int64_t world,
                                         std::int64_t rank) {
  const RankSlice s = rank_slice(batch, world, rank);
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(used / batch * s.size));
  for (std::int64_t start = 0; start + batch <= used; start += batch)
    for (std::int64_t i = 0; i < s.size; ++i) out.push_back(start + s.offset + i);
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
