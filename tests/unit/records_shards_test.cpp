#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "mltool/records/shards.hpp"
#include "mltool/util/error.hpp"

namespace {

using mltool::UsageError;
using mltool::records::assign_shards;
using mltool::records::shard_members;

// Checks every guarantee of assign_shards for `labels` dealt into `n` shards.
void check_balanced(const std::vector<std::uint32_t>& labels, std::uint32_t n,
                    const std::vector<std::uint32_t>& shard_of) {
  ASSERT_EQ(shard_of.size(), labels.size());  // every record exactly once
  const std::uint32_t K = labels.empty() ? 0 : *std::max_element(labels.begin(), labels.end()) + 1;
  std::vector<std::uint64_t> total(n, 0);
  std::vector<std::vector<std::uint64_t>> per_label(K, std::vector<std::uint64_t>(n, 0));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    ASSERT_LT(shard_of[i], n);
    ++total[shard_of[i]];
    ++per_label[labels[i]][shard_of[i]];
  }
  const std::uint64_t M = labels.size();
  for (std::uint32_t j = 0; j < n; ++j) {
    // Exactly ceil((M - j) / n): the first M mod n shards have the extra record.
    EXPECT_EQ(total[j], M / n + (j < M % n ? 1 : 0)) << "shard " << j;
  }
  for (std::uint32_t l = 0; l < K; ++l) {
    const auto [lo, hi] = std::minmax_element(per_label[l].begin(), per_label[l].end());
    EXPECT_LE(*hi - *lo, 1u) << "label " << l;
  }
}

TEST(ShardsBalance, RandomSplitsAreBalancedPerShardAndPerLabel) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const std::size_t M = std::uniform_int_distribution<std::size_t>(0, 3000)(rng);
    const std::uint32_t n = std::uniform_int_distribution<std::uint32_t>(1, 40)(rng);
    const std::uint32_t K = std::uniform_int_distribution<std::uint32_t>(1, 12)(rng);
    // Skewed label frequencies, some labels absent.
    std::vector<double> weight(K);
    for (double& w : weight) w = std::bernoulli_distribution(0.2)(rng) ? 0.0 : rng() % 100 + 1;
    weight[0] += 1;
    std::discrete_distribution<std::uint32_t> pick(weight.begin(), weight.end());
    std::vector<std::uint32_t> labels(M);
    for (auto& l : labels) l = pick(rng);
    const std::uint64_t seed = rng();
    const std::vector<std::uint32_t> shard_of = assign_shards(labels, n, seed);
    check_balanced(labels, n, shard_of);
    EXPECT_EQ(assign_shards(labels, n, seed), shard_of);  // deterministic
  }
}

TEST(ShardsBalance, SeedMovesRecordsNotCounts) {
  std::vector<std::uint32_t> labels;
  for (int i = 0; i < 1000; ++i) labels.push_back(static_cast<std::uint32_t>(i % 7 == 0 ? 1 : 0));
  const auto a = assign_shards(labels, 8, 1);
  const auto b = assign_shards(labels, 8, 2);
  check_balanced(labels, 8, a);
  check_balanced(labels, 8, b);
  EXPECT_NE(a, b);
}

TEST(ShardsBalance, EdgeCases) {
  EXPECT_TRUE(assign_shards({}, 3, 0).empty());
  EXPECT_EQ(assign_shards({5, 5, 5}, 1, 0), (std::vector<std::uint32_t>{0, 0, 0}));
  // More shards than records: allowed, the last shards are empty.
  const std::vector<std::uint32_t> labels = {2, 0, 2};
  const auto few = assign_shards(labels, 5, 11);
  check_balanced(labels, 5, few);
  std::vector<std::uint32_t> sorted = few;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_THROW(assign_shards({1}, 0, 0), UsageError);
}

TEST(ShardsMembers, EveryRecordOnceInAShuffledOrder) {
  std::vector<std::uint32_t> labels;
  for (int i = 0; i < 500; ++i) labels.push_back(static_cast<std::uint32_t>(i % 3));
  const auto shard_of = assign_shards(labels, 4, 5);
  const auto members = shard_members(shard_of, 4, 5);
  ASSERT_EQ(members.size(), 4u);
  std::vector<int> seen(labels.size(), 0);
  bool any_out_of_order = false;
  for (std::uint32_t j = 0; j < 4; ++j) {
    for (const std::uint64_t r : members[j]) {
      EXPECT_EQ(shard_of[r], j);
      ++seen[r];
    }
    any_out_of_order |= !std::is_sorted(members[j].begin(), members[j].end());
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 500);
  EXPECT_TRUE(any_out_of_order);
  EXPECT_EQ(shard_members(shard_of, 4, 5), members);  // deterministic
  EXPECT_NE(shard_members(shard_of, 4, 6), members);
  EXPECT_THROW(shard_members({0, 4}, 4, 0), UsageError);
}

}  // namespace
