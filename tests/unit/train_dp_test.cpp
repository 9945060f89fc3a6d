// Data parallel arithmetic (lib/train/data_parallel.cpp): each global batch split among the
// ranks, the ranks' positions per epoch, the gradient buckets.
#include <gtest/gtest.h>

#include <stdexcept>

#include "mltool/train/batches.hpp"

namespace mltool::train {
namespace {

TEST(RankSlice, SplitsEvenlyWithTheRemainderFirst) {
  EXPECT_EQ(rank_slice(16, 2, 0).offset, 0);
  EXPECT_EQ(rank_slice(16, 2, 1).offset, 8);
  EXPECT_EQ(rank_slice(16, 2, 1).size, 8);
  // 15 among 2: 8 then 7; 10 among 3: 4, 3, 3.
  EXPECT_EQ(rank_slice(15, 2, 0).size, 8);
  EXPECT_EQ(rank_slice(15, 2, 1).offset, 8);
  EXPECT_EQ(rank_slice(15, 2, 1).size, 7);
  std::int64_t at = 0;
  for (int r = 0; r < 3; ++r) {
    const auto s = rank_slice(10, 3, r);
    EXPECT_EQ(s.offset, at);
    EXPECT_EQ(s.size, r == 0 ? 4 : 3);
    at += s.size;
  }
  EXPECT_EQ(at, 10);
  // A batch smaller than the world (an epoch's last): the last ranks get nothing.
  EXPECT_EQ(rank_slice(1, 2, 0).size, 1);
  EXPECT_EQ(rank_slice(1, 2, 1).size, 0);
  EXPECT_EQ(rank_slice(1, 2, 1).offset, 1);
  EXPECT_EQ(rank_slice(3, 4, 3).size, 0);
  EXPECT_THROW(rank_slice(4, 2, 2), std::invalid_argument);
  EXPECT_THROW(rank_slice(-1, 2, 0), std::invalid_argument);
}

TEST(StepSizes, FullBatchesThenTheRemainderIfKept) {
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(step_sizes(17, 5, true), (V{5, 5, 5, 2}));
  EXPECT_EQ(step_sizes(17, 5, false), (V{5, 5, 5}));
  EXPECT_EQ(step_sizes(15, 5, true), (V{5, 5, 5}));
  EXPECT_EQ(step_sizes(3, 5, false), (V{3}));  // smaller than a batch: one step of all
  EXPECT_EQ(step_sizes(5, 5, false), (V{5}));
  EXPECT_THROW(step_sizes(0, 5, true), std::invalid_argument);
}

TEST(RankPositions, CoverEveryBatchExactlyOnce) {
  // 3 global batches of 5 among 2 ranks: rank 0 gets 3 of each, rank 1 gets 2.
  const std::vector<std::int64_t> steps{5, 5, 5};
  const auto r0 = rank_positions(steps, 2, 0), r1 = rank_positions(steps, 2, 1);
  EXPECT_EQ(r0, (std::vector<std::int64_t>{0, 1, 2, 5, 6, 7, 10, 11, 12}));
  EXPECT_EQ(r1, (std::vector<std::int64_t>{3, 4, 8, 9, 13, 14}));
  EXPECT_EQ(rank_positions({15}, 1, 0).size(), 15u);
  // A last step of 1 among 2 ranks: rank 1 has nothing in it.
  EXPECT_EQ(rank_positions({4, 1}, 2, 0), (std::vector<std::int64_t>{0, 1, 4}));
  EXPECT_EQ(rank_positions({4, 1}, 2, 1), (std::vector<std::int64_t>{2, 3}));
}

TEST(GradientBuckets, FillUpToTheCapInOrder) {
  using B = std::vector<std::vector<std::size_t>>;
  EXPECT_EQ(gradient_buckets({10, 10, 10, 10}, 25), (B{{0, 1}, {2, 3}}));
  EXPECT_EQ(gradient_buckets({10, 40, 10}, 25), (B{{0}, {1}, {2}}));  // too large: alone
  EXPECT_EQ(gradient_buckets({5, 5, 5}, 100), (B{{0, 1, 2}}));
  EXPECT_EQ(gradient_buckets({}, 100), B{});
  EXPECT_EQ(gradient_buckets({25, 1}, 25), (B{{0}, {1}}));
}

}  // namespace
}  // namespace mltool::train
