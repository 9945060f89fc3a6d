// The pinned-feed gather runs on whichever device this machine has: mltool's CUDA kernel
// on a GPU, the CPU loop otherwise. Reference: torch::index_select on the same data.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "mltool/train/gather.hpp"
#include "mltool/util/error.hpp"

namespace {

torch::Device test_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
}

void expect_matches_index_select(torch::ScalarType dtype, std::int64_t rows, std::int64_t dims,
                                 std::int64_t n) {
  torch::manual_seed(7);
  const auto device = test_device();
  auto matrix = torch::randn({rows, dims}).to(dtype).to(device);
  auto index = torch::randint(rows, {n}, torch::kInt64).to(device);
  auto got = mltool::train::gather_rows(matrix, index);
  auto want = matrix.index_select(0, index);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(got.device(), device);
  EXPECT_TRUE(torch::equal(got.cpu(), want.cpu())) << "dtype " << dtype << " dims " << dims;
}

TEST(GatherRows, MatchesIndexSelectOnThisMachinesDevice) {
  expect_matches_index_select(torch::kFloat32, 1000, 128, 257);
  expect_matches_index_select(torch::kFloat16, 1000, 128, 257);
  // Rows that are not a multiple of 16 bytes take the narrower copy paths.
  expect_matches_index_select(torch::kFloat32, 50, 3, 64);
  expect_matches_index_select(torch::kFloat16, 50, 7, 64);
  expect_matches_index_select(torch::kFloat32, 10, 5, 0);
}

TEST(GatherRows, RejectsOutOfRangeIndices) {
  const auto device = test_device();
  auto matrix = torch::zeros({4, 2}, torch::TensorOptions().device(device));
  auto bad = torch::tensor({0, 4}, torch::kInt64).to(device);
  EXPECT_THROW(mltool::train::gather_rows(matrix, bad), mltool::InputError);
  auto negative = torch::tensor({-1}, torch::kInt64).to(device);
  EXPECT_THROW(mltool::train::gather_rows(matrix, negative), mltool::InputError);
}

TEST(GatherRows, RejectsWrongShapesAndTypes) {
  auto matrix = torch::zeros({4, 2});
  EXPECT_THROW(mltool::train::gather_rows(matrix, torch::zeros({2}, torch::kInt32)),
               mltool::InputError);
  EXPECT_THROW(mltool::train::gather_rows(torch::zeros({4}), torch::zeros({2}, torch::kInt64)),
               mltool::InputError);
}

}  // namespace
