// GPU-only checks (ctest label gpu, run on the lent GPU machine by scripts/device/).
// These fail, not skip, without a GPU: they are only run where one is expected.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "mltool/train/gather.hpp"

TEST(GpuBuild, CudaIsAvailableAndKernelsAreBuiltIn) {
  ASSERT_TRUE(torch::cuda::is_available()) << "libtorch_cuda not linked or no GPU visible";
  ASSERT_TRUE(mltool::train::built_with_cuda_kernels()) << "nvcc was not found at build time";
}

TEST(GpuGather, LargeMatrixMatchesIndexSelect) {
  ASSERT_TRUE(torch::cuda::is_available());
  torch::manual_seed(1);
  // Larger than 2 GiB would be the seed-002 limit; 256 MiB is enough to exercise the grid loop.
  auto matrix = torch::randn({65536, 1024}, torch::TensorOptions().device(torch::kCUDA));
  auto index = torch::randint(65536, {600000},
                              torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA));
  auto got = mltool::train::gather_rows(matrix, index);
  EXPECT_TRUE(torch::equal(got, matrix.index_select(0, index)));
  auto half = matrix.to(torch::kFloat16);
  EXPECT_TRUE(torch::equal(mltool::train::gather_rows(half, index), half.index_select(0, index)));
}
