#include "mltool/records/shards.hpp"

#include <algorithm>
#include <string>

#include "mltool/util/error.hpp"
#include "random.hpp"

namespace mltool::records {

std::vector<std::uint32_t> assign_shards(const std::vector<std::uint32_t>& labels,
                                         std::uint32_t shards, std::uint64_t seed) {
  if (shards == 0) throw UsageError("the number of shards must be at least 1");
  // Record indexes by label (a stable sort keeps index order before the shuffle, so
  // the result does not depend on the sort's implementation).
  std::vector<std::uint64_t> sequence(labels.size());
  for (std::uint64_t i = 0; i < sequence.size(); ++i) sequence[i] = i;
  std::stable_sort(sequence.begin(), sequence.end(),
                   [&](std::uint64_t a, std::uint64_t b) { return labels[a] < labels[b]; });
  detail::Rng rng(seed);
  std::vector<std::uint64_t> run;
  for (std::size_t begin = 0; begin < sequence.size();) {
    std::size_t end = begin;
    while (end < sequence.size() && labels[sequence[end]] == labels[sequence[begin]]) ++end;
    run.assign(sequence.begin() + static_cast<std::ptrdiff_t>(begin),
               sequence.begin() + static_cast<std::ptrdiff_t>(end));
    detail::shuffle(run, rng);
    std::copy(run.begin(), run.end(), sequence.begin() + static_cast<std::ptrdiff_t>(begin));
    begin = end;
  }
  // One cursor over the whole sequence: see the proof in shards.hpp.
  std::vector<std::uint32_t> shard_of(labels.size());
  for (std::uint64_t i = 0; i < sequence.size(); ++i) {
    shard_of[sequence[i]] = static_cast<std::uint32_t>(i % shards);
  }
  return shard_of;
}

std::vector<std::vector<std::uint64_t>> shard_members(const std::vector<std::uint32_t>& shard_of,
                                                      std::uint32_t shards, std::uint64_t seed) {
  std::vector<std::vector<std::uint64_t>> members(shards);
  for (std::uint64_t i = 0; i < shard_of.size(); ++i) {
    if (shard_of[i] >= shards) {
      throw UsageError("record " + std::to_string(i) + " is in shard " +
                       std::to_string(shard_of[i]) + ", but there are " + std::to_string(shards) +
                       " shards");
    }
    members[shard_of[i]].push_back(i);
  }
  // A generator per shard, so shard j's order does not depend on the other shards.
  for (std::uint32_t j = 0; j < shards; ++j) {
    detail::Rng rng(detail::mix64(seed) ^ j);
    detail::shuffle(members[j], rng);
  }
  return members;
}

}  // namespace mltool::records
