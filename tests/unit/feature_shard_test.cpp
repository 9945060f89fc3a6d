// extract --shard's plan (which store rows a shard takes, in which batches) and --merge
// (features::merge_shards) on feature stores written here the way extract writes them.
#include "mltool/features/shard.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "mltool/io/feature_store.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/shard.hpp"
#include "support/temp_dir.hpp"

namespace {

using mltool::UsageError;
using mltool::features::merge_shards;
using mltool::features::plan_shard;
using mltool::features::ShardPlan;
using mltool::io::DType;
using mltool::io::FeatureStoreWriter;
using mltool::testing::TempDir;
using mltool::util::parse_shard;
using nlohmann::json;

// A store's keys in store order: "a-b/" sorts before "a/" though "a" < "a-b" in id order.
std::vector<std::string> store_keys() {
  std::vector<std::string> keys;
  const std::vector<std::pair<std::string, int>> slides = {
      {"a-b", 5}, {"a", 3}, {"c", 7}, {"d", 1}, {"e", 4}};
  for (const auto& [id, n] : slides)
    for (int i = 0; i < n; ++i) keys.push_back(id + "/00000" + std::to_string(i) + "_000000");
  return keys;
}

std::vector<std::string> ids(const ShardPlan& plan) {
  std::vector<std::string> out;
  for (const auto& s : plan.slides) out.push_back(s.id);
  return out;
}

TEST(FeatureShardPlan, TakesEveryNthSlideInIdOrderListedInStoreOrder) {
  const auto keys = store_keys();
  const ShardPlan whole = plan_shard(keys, parse_shard(""));
  EXPECT_EQ(whole.rows, keys.size());
  EXPECT_EQ(whole.store_slides, 5u);
  // id order: a, a-b, c, d, e → shard 0/2: a, c, e; 1/2: a-b, d
  const ShardPlan s0 = plan_shard(keys, parse_shard("0/2"));
  EXPECT_EQ(ids(s0), (std::vector<std::string>{"a", "c", "e"}));
  EXPECT_EQ(s0.rows, 14u);
  const ShardPlan s1 = plan_shard(keys, parse_shard("1/2"));
  EXPECT_EQ(ids(s1), (std::vector<std::string>{"a-b", "d"}));
  EXPECT_EQ(s1.store_row(0), 0u);
  EXPECT_EQ(s1.store_row(5), 15u);  // d's tile
  EXPECT_TRUE(s1.takes_row(4));
  EXPECT_FALSE(s1.takes_row(5));
  EXPECT_TRUE(s1.takes_row(15));
  EXPECT_FALSE(s1.takes_row(16));
  EXPECT_EQ(s0.store_keys_crc32c, s1.store_keys_crc32c);
}

TEST(FeatureShardPlan, BatchesAreTheWholeStoresBatchesThatHoldItsRows) {
  const auto keys = store_keys();  // 20 rows; batches of 4: [0,4) [4,8) ... [16,20)
  const ShardPlan s1 = plan_shard(keys, parse_shard("1/2"));  // rows 0-4 and 15
  EXPECT_EQ(s1.batches(0, 4), (std::vector<std::uint64_t>{0, 1, 3}));
  EXPECT_EQ(s1.batches(4, 4), (std::vector<std::uint64_t>{1, 3}));  // after 4 rows: row 4 on
  EXPECT_EQ(s1.batches(5, 4), (std::vector<std::uint64_t>{3}));
  EXPECT_TRUE(s1.batches(6, 4).empty());
  const ShardPlan empty = plan_shard(keys, parse_shard("7/9"));
  EXPECT_EQ(empty.rows, 0u);
  EXPECT_TRUE(empty.batches(0, 4).empty());
}

TEST(FeatureShardPlan, ShardTextIsChecked) {
  for (const char* bad : {"2/2", "1/0", "-1/2", "1", "1/2/3", "a/b", " 1/2"})
    EXPECT_THROW(parse_shard(bad), UsageError) << bad;
  EXPECT_EQ(parse_shard("3/8").text(), "3/8");
}

// --shard auto: the index and count a Slurm array or a Kubernetes indexed Job gives.
TEST(FeatureShardPlan, AutoShardFromTheSchedulersEnvironment) {
  using mltool::util::resolve_shard;
  const auto env = [](std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  const std::map<std::string, std::string> stepped = {{"SLURM_ARRAY_TASK_ID", "6"},
                                                      {"SLURM_ARRAY_TASK_MIN", "0"},
                                                      {"SLURM_ARRAY_TASK_MAX", "7"},
                                                      {"SLURM_ARRAY_TASK_STEP", "2"}};
  // --array=0-7:2: tasks 0, 2, 4, 6 are shards 0..3 of 4 (MAX 7 is not a task: (7-0)/2+1 = 4)
  EXPECT_EQ(resolve_shard("auto", 0, env(stepped)).text(), "3/4");
  // a re-submitted --array=3 is a one-task array: with --shards 8 it stays 3/8
  const std::map<std::string, std::string> one = {{"SLURM_ARRAY_TASK_ID", "3"},
                                                  {"SLURM_ARRAY_TASK_MIN", "3"},
                                                  {"SLURM_ARRAY_TASK_MAX", "3"},
                                                  {"SLURM_ARRAY_TASK_STEP", "1"}};
  EXPECT_EQ(resolve_shard("auto", 8, env(one)).text(), "3/8");
  EXPECT_EQ(resolve_shard("auto", 0, env(one)).text(), "0/1");
  EXPECT_THROW(resolve_shard("auto", 3, env(one)), UsageError);  // 3 is not below 3
  EXPECT_EQ(resolve_shard("auto", 5, env({{"JOB_COMPLETION_INDEX", "4"}})).text(), "4/5");
  EXPECT_THROW(resolve_shard("auto", 0, env({{"JOB_COMPLETION_INDEX", "4"}})), UsageError);
  EXPECT_THROW(resolve_shard("auto", 0, env({})), UsageError);
  EXPECT_THROW(resolve_shard("auto", 0, env({{"SLURM_ARRAY_TASK_ID", "x1"}})), UsageError);
  EXPECT_EQ(resolve_shard("1/4", 4, env({})).text(), "1/4");
  EXPECT_THROW(resolve_shard("1/4", 3, env({})), UsageError);   // --shard and --shards disagree
  EXPECT_EQ(resolve_shard("", 0, env(stepped)).text(), "0/1");  // no --shard: the whole list
  EXPECT_EQ(mltool::util::array_index("--fold", env({{"JOB_COMPLETION_INDEX", "2"}})), 2u);
}

// A row's values: a function of its key alone, as extract's are of its tile.
std::vector<float> row_of(const std::string& key, std::size_t dims) {
  std::vector<float> row(dims);
  for (std::size_t j = 0; j < dims; ++j)
    row[j] = static_cast<float>((std::hash<std::string>()(key) + j * 7919) % 10007) / 37.0f;
  return row;
}

const json kModel = {{"kind", "builtin"}, {"name", "test"}};
const json kSource = {{"tile_store", "/t.lmdb"}, {"tiles", 20}, {"tile_size", 64}};

// The store extract writes for `shard` (or the whole store for "").
void write_store(const std::string& dir, const std::string& shard, DType dtype,
                 const json& model = kModel, std::size_t dims = 6) {
  const auto keys = store_keys();
  const ShardPlan plan = plan_shard(keys, parse_shard(shard));
  json source = kSource;
  if (!shard.empty()) source["shard"] = plan.to_json({{"batch", 4}, {"device", "cpu"}});
  FeatureStoreWriter out(dir, dims, dtype, model, source);
  for (std::uint64_t k = 0; k < plan.rows; ++k) {
    const std::string& key = keys[plan.store_row(k)];
    out.append(key, row_of(key, dims).data());
    if (key == "c/000002_000000") out.mark_invalid(out.rows() - 1);
  }
  out.finish();
}

std::string file(const std::string& dir, const char* name) {
  return mltool::util::read_file(mltool::util::join_path(dir, name));
}

class FeatureShardMerge : public ::testing::TestWithParam<DType> {};

TEST_P(FeatureShardMerge, EqualsOneRunInAnyOrder) {
  TempDir dir;
  const std::string one = dir.path() + "/one";
  write_store(one, "", GetParam());
  std::vector<std::string> shards;
  for (const char* s : {"0/3", "1/3", "2/3"}) {
    shards.push_back(dir.path() + "/s" + std::string(1, s[0]));
    write_store(shards.back(), s, GetParam());
  }
  int n = 0;
  std::sort(shards.begin(), shards.end());
  do {
    const std::string merged = dir.path() + "/m" + std::to_string(n++);
    const auto report = merge_shards(shards, merged);
    EXPECT_EQ(report.rows, 20u);
    EXPECT_EQ(report.invalid, 1u);
    EXPECT_EQ(file(merged, "features.npy"), file(one, "features.npy"));
    EXPECT_EQ(file(merged, "keys.txt"), file(one, "keys.txt"));
    const auto store = mltool::io::FeatureStore::open(merged);
    EXPECT_EQ(store.invalid_rows(), std::vector<std::uint64_t>{10});  // c's third tile
    const json& source = store.manifest().at("source");
    EXPECT_EQ(source.at("merged_from").size(), 3u);
    EXPECT_EQ(source.at("merged_from")[1].at("shard"), "1/3");
    EXPECT_FALSE(source.contains("shard"));
    EXPECT_EQ(file(merged, "features.json"), file(dir.path() + "/m0", "features.json"));
  } while (std::next_permutation(shards.begin(), shards.end()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FeatureShardMerge,
                         ::testing::Values(DType::float32, DType::float16));

// The UsageError message of merging `inputs`, or "".
std::string merge_error(const std::vector<std::string>& inputs, const std::string& output) {
  try {
    merge_shards(inputs, output);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(FeatureShardMerge, RefusesMissingDuplicatedAndForeignShards) {
  TempDir dir;
  const std::string d = dir.path();
  write_store(d + "/s0", "0/3", DType::float32);
  write_store(d + "/s1", "1/3", DType::float32);
  write_store(d + "/s2", "2/3", DType::float32);
  write_store(d + "/s1b", "1/3", DType::float32);
  write_store(d + "/other", "2/3", DType::float32, {{"kind", "builtin"}, {"name", "other"}});
  write_store(d + "/f16", "2/3", DType::float16);
  write_store(d + "/two", "1/2", DType::float32);
  write_store(d + "/one", "", DType::float32);

  std::string m = merge_error({d + "/s0", d + "/s2"}, d + "/out");
  EXPECT_NE(m.find("shard(s) 1/3 of 3 missing"), std::string::npos) << m;
  m = merge_error({d + "/s0", d + "/s1", d + "/s1b", d + "/s2"}, d + "/out");
  EXPECT_NE(m.find("holds shard 1/3, as " + d + "/s1 does"), std::string::npos) << m;
  m = merge_error({d + "/s0", d + "/s1", d + "/other"}, d + "/out");
  EXPECT_NE(m.find("--model"), std::string::npos) << m;
  m = merge_error({d + "/s0", d + "/s1", d + "/f16"}, d + "/out");
  EXPECT_NE(m.find("--dtype float16, but " + d + "/s0 with float32"), std::string::npos) << m;
  m = merge_error({d + "/s0", d + "/two"}, d + "/out");
  EXPECT_NE(m.find("--shard 1/2, but " + d + "/s0 with 0/3"), std::string::npos) << m;
  m = merge_error({d + "/s0", d + "/one"}, d + "/out");
  EXPECT_NE(m.find(d + "/one: is not the store of an `mltool extract --shard I/N` run"),
            std::string::npos)
      << m;
  m = merge_error({d + "/s0", d + "/s1", d + "/s2"}, d + "/s1");
  EXPECT_NE(m.find("is both an input and the output"), std::string::npos) << m;
  EXPECT_FALSE(mltool::util::exists(d + "/out"));
}

}  // namespace
