// util::BatchSplitter against a device of fixed capacity: a forward of more rows than fit
// throws the c10::OutOfMemoryError the CUDA allocator throws (not the MLTOOL_DEBUG_OOM seam),
// so the halving, the size kept, the retry of --batch after kRetryFullAfter batches and the
// replay of recorded splits are checked as a real device would drive them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <optional>
#include <vector>

#include "mltool/util/batch_split.hpp"
#include "mltool/util/error.hpp"

namespace mltool::util {
namespace {

struct Device {
  std::int64_t capacity;
  std::vector<std::int64_t> attempts;  // the rows of every forward tried
  torch::Tensor operator()(const torch::Tensor& x) {
    attempts.push_back(x.size(0));
    TORCH_CHECK_WITH(OutOfMemoryError, x.size(0) <= capacity, "CUDA out of memory. Tried to ...");
    return x * 2;
  }
};

// Batches of `rows` rows through `splitter`; their splits by batch number.
std::map<std::uint64_t, BatchSplit> run(BatchSplitter& splitter, Device& device,
                                        std::uint64_t first, std::uint64_t batches,
                                        std::int64_t rows) {
  std::map<std::uint64_t, BatchSplit> splits;
  const auto run_piece = [&](const torch::Tensor& x) { return device(x); };
  for (std::uint64_t b = first; b < first + batches; ++b) {
    const auto input = torch::arange(rows, torch::kFloat32).reshape({rows, 1}) + 100.0 * b;
    std::optional<BatchSplit> split;
    const auto out = splitter.forward(input, b, run_piece, torch::kCPU, "test model", split);
    EXPECT_TRUE(torch::equal(out, input * 2)) << "batch " << b;
    if (split) splits.emplace(b, *split);
  }
  return splits;
}

TEST(BatchSplit, HalvesUntilItFitsKeepsTheSizeThenTriesTheBatchAgain) {
  Device device{3, {}};
  BatchSplitter splitter(8, true, {});
  const auto splits = run(splitter, device, 0, kRetryFullAfter + 3, 8);
  // Batch 0: 8 and 4 run out, 2 fits (four pieces); batches 1..16 keep 2; batch 17 tries 8.
  const std::vector<std::int64_t> first = {8, 4, 2, 2, 2, 2};
  EXPECT_EQ(std::vector<std::int64_t>(device.attempts.begin(), device.attempts.begin() + 6), first);
  ASSERT_EQ(splits.size(), static_cast<std::size_t>(kRetryFullAfter + 3));
  EXPECT_TRUE(splits.at(0).oom);
  EXPECT_EQ(splits.at(0).size, 2);
  for (std::uint64_t b = 1; b <= static_cast<std::uint64_t>(kRetryFullAfter); ++b) {
    EXPECT_FALSE(splits.at(b).oom) << b;
    EXPECT_EQ(splits.at(b).size, 2) << b;
  }
  EXPECT_TRUE(splits.at(kRetryFullAfter + 1).oom);  // --batch again: out of memory again
}

TEST(BatchSplit, AResumedRunReplaysTheRecordedSplits) {
  Device whole{3, {}};
  BatchSplitter uninterrupted(8, true, {});
  const auto all = run(uninterrupted, whole, 0, 30, 8);
  // Killed after batch 9: batches 0..9 recorded; the resumed run starts at 10 on a device
  // that would fit anything, and must still compute every batch as the uninterrupted run did.
  std::map<std::uint64_t, BatchSplit> recorded(all.begin(), all.find(10));
  Device roomy{1000, {}};
  BatchSplitter resumed(8, true, recorded);
  std::vector<std::uint64_t> earlier(10);
  for (std::uint64_t b = 0; b < 10; ++b) earlier[b] = b;
  resumed.replay(earlier);
  const auto later = run(resumed, roomy, 10, 20, 8);
  for (std::uint64_t b = 10; b < 30; ++b) {
    const bool split_before = all.count(b) != 0;
    if (b <= static_cast<std::uint64_t>(kRetryFullAfter)) {  // kept the reduced size
      ASSERT_TRUE(later.count(b)) << b;
      EXPECT_EQ(later.at(b).size, all.at(b).size) << b;
    } else {
      EXPECT_TRUE(split_before) << b;      // the small device ran out again at 17
      EXPECT_EQ(later.count(b), 0u) << b;  // the roomy one did not: another event, not a replay
    }
  }
}

TEST(BatchSplit, OneTileThatDoesNotFitNamesTheModelAndTheFreeMemory) {
  Device device{0, {}};
  BatchSplitter splitter(4, true, {});
  try {
    run(splitter, device, 0, 1, 4);
    FAIL() << "no error";
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("one tile of batch 0 with test model"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("free"), std::string::npos) << e.what();
  }
  EXPECT_EQ(device.attempts, (std::vector<std::int64_t>{4, 2, 1}));
}

TEST(BatchSplit, WithoutRetryTheErrorGoesUpAsItCame) {
  Device device{3, {}};
  BatchSplitter splitter(8, false, {});
  EXPECT_THROW(run(splitter, device, 0, 1, 8), c10::OutOfMemoryError);
}

}  // namespace
}  // namespace mltool::util
