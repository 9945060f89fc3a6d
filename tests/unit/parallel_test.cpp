#include "mltool/util/parallel.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

using mltool::util::parallel_for;

TEST(ParallelFor, RunsEveryItemOnceOnSeveralThreads) {
  std::vector<std::atomic<int>> hits(1000);
  std::mutex m;
  std::set<std::thread::id> ids;
  parallel_for(hits.size(), 4, [&](std::size_t i) {
    hits[i]++;
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_GE(ids.size(), 1u);
  parallel_for(0, 4, [](std::size_t) { FAIL() << "no items, no calls"; });
}

TEST(ParallelFor, FinishesTheOthersAndRethrowsTheLowestFailure) {
  std::atomic<int> done{0};
  try {
    parallel_for(100, 3, [&](std::size_t i) {
      if (i == 70) throw std::runtime_error("seventy");
      if (i == 20) throw std::runtime_error("twenty");
      done++;
    });
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "twenty");
  }
  EXPECT_EQ(done.load(), 98);
}
