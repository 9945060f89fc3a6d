// Feature stores as tensors: zero-copy on the CPU (the tensor aliases the memory map and
// keeps it alive), one copy to a GPU when there is one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "mltool/io/feature_tensor.hpp"
#include "unit/feature_store_fixture.hpp"

namespace {

using mltool::io::DType;
using mltool::io::FeatureStore;
using mltool::io::load_feature_tensor;
using mltool::testing::TempDir;
using mltool::testing::write_formula_store;

TEST(FeatureTensor, CpuTensorAliasesTheMapAndOutlivesTheStore) {
  TempDir tmp;
  write_formula_store(tmp.path(), 300, 17, DType::float32);
  torch::Tensor t;
  {
    auto store = FeatureStore::open(tmp.path());
    t = load_feature_tensor(store);
    EXPECT_EQ(t.data_ptr(), store.data()) << "the CPU tensor must not copy the matrix";
  }
  ASSERT_EQ(t.sizes(), (std::vector<std::int64_t>{300, 17}));
  ASSERT_EQ(t.scalar_type(), torch::kFloat32);
  for (std::int64_t i : {0, 1, 150, 299})
    for (std::int64_t j : {0, 5, 16})
      EXPECT_EQ(t[i][j].item<float>(), mltool::testing::formula_value(i, j));
}

TEST(FeatureTensor, Float16StoreGivesHalfTensorEqualToTheStoreRows) {
  TempDir tmp;
  write_formula_store(tmp.path(), 64, 8, DType::float16);
  auto store = FeatureStore::open(tmp.path());
  auto t = load_feature_tensor(store);
  ASSERT_EQ(t.scalar_type(), torch::kFloat16);
  std::vector<float> row(8);
  for (std::int64_t i = 0; i < 64; ++i) {
    store.row_f32(i, row.data());
    auto want = torch::from_blob(row.data(), {8}, torch::kFloat32);
    EXPECT_TRUE(torch::equal(t[i].to(torch::kFloat32), want)) << "row " << i;
  }
}

TEST(FeatureTensor, CopiesToTheGpuWhenThereIsOne) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no GPU on this machine (covered by the gpu label run)";
  TempDir tmp;
  write_formula_store(tmp.path(), 128, 32, DType::float32);
  auto store = FeatureStore::open(tmp.path());
  auto cpu = load_feature_tensor(store);
  auto gpu = load_feature_tensor(store, torch::Device(torch::kCUDA, 0));
  EXPECT_TRUE(gpu.is_cuda());
  EXPECT_TRUE(torch::equal(gpu.cpu(), cpu));
}

}  // namespace
