// records::pack_dataset: a feature store + labels table → shards + dataset.json.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mltool/io/example.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/io/sha256.hpp"
#include "mltool/io/tfrecord.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/records/pack.hpp"
#include "mltool/records/record.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

namespace mltool::records {
namespace {

using io::Sha256;
using io::sha256_hex;
using mltool::testing::contains;
using mltool::testing::error_of;
using mltool::testing::TempDir;

std::string tile_key(int slide, int i) {
  char name[64];
  std::snprintf(name, sizeof name, "S%d/%06d_%06d", slide, i / 100, i % 100);
  return name;
}

/// A store of `slides` x `tiles` rows; row r holds the value `value(r)` in every column.
void write_store(
    const std::string& dir, int slides, int tiles,
    const std::function<float(int)>& value = [](int r) { return float(r); },
    const std::vector<std::uint64_t>& invalid = {}, const nlohmann::json& source = nullptr) {
  io::FeatureStoreWriter writer(dir, 4, io::DType::float32, {{"name", "test"}}, source);
  int row = 0;
  for (int s = 0; s < slides; ++s) {
    for (int i = 0; i < tiles; ++i, ++row) {
      const std::vector<float> v(4, value(row));
      writer.append(tile_key(s, i), v.data());
    }
  }
  for (const auto r : invalid) writer.mark_invalid(r);
  writer.finish();
}

struct Read {
  std::string split;
  std::string file;
  io::Example example;
};

/// Every record of every shard that dataset.json lists.
std::vector<Read> read_dataset(const std::string& dir) {
  const auto doc = io::read_manifest(util::join_path(dir, kDatasetManifestFile), "dataset");
  std::vector<Read> out;
  for (const auto& [split, info] : doc.at("splits").items()) {
    for (const auto& shard : info.at("shards")) {
      const std::string file = shard.at("file").get<std::string>();
      io::TFRecordReader reader(util::join_path(dir, file));
      std::string_view record;
      while (reader.next(record))
        out.push_back({split, file, io::parse_example(record, reader.where())});
    }
  }
  return out;
}

class PackTest : public ::testing::Test {
 protected:
  TempDir tmp;
  std::string features = tmp / "features";
  std::string labels = tmp / "labels.csv";
  std::string output = tmp / "dataset";

  void write_labels(const std::string& text) { util::write_file_atomic(labels, text); }
  PackJob job() const {
    PackJob j;
    j.features = features;
    j.labels = labels;
    j.output = output;
    return j;
  }
  bool only_output_left() const {  // no partial directory beside the output
    return !util::exists(output + ".partial-" + std::to_string(::getpid()));
  }
};

TEST(Sha256, StandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 million;  // FIPS 180-2 appendix: one million 'a', fed in uneven pieces
  const std::string chunk(997, 'a');
  std::size_t fed = 0;
  while (fed < 1000000) {
    const std::size_t n = std::min<std::size_t>(chunk.size(), 1000000 - fed);
    million.update(chunk.data(), n);
    fed += n;
  }
  EXPECT_EQ(million.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, AnySplitGivesTheSameDigest) {
  std::string data;
  for (int i = 0; i < 300; ++i) data += static_cast<char>(i * 7);
  const std::string whole = sha256_hex(data);
  for (std::size_t cut : {0, 1, 55, 56, 63, 64, 65, 128, 299}) {
    Sha256 h;
    h.update(data.substr(0, cut));
    h.update(data.substr(cut));
    EXPECT_EQ(h.hex(), whole) << cut;
  }
}

TEST(Sha256, HardwareAndPortableEnginesAgree) {
  // The vectors above run on whichever engine this processor picks; here the portable one
  // is the reference for the other on every length around the block and padding edges.
  std::string data;
  std::uint32_t x = 12345;
  for (int i = 0; i < 70000; ++i) {
    x = x * 1664525u + 1013904223u;
    data += static_cast<char>(x >> 24);
  }
  Sha256 abc(Sha256::Engine::portable);
  abc.update("abc");
  EXPECT_EQ(abc.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  if (!Sha256::hardware_available()) GTEST_SKIP() << "no SHA extensions on this processor";
  for (std::size_t n : {0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 1000, 4096, 65537, 70000}) {
    Sha256 hw, sw(Sha256::Engine::portable);
    hw.update(data.data(), n);
    sw.update(data.data(), n);
    EXPECT_EQ(hw.hex(), sw.hex()) << n;
  }
}

TEST_F(PackTest, TileRecordsCoverEveryKeyLabelPairOnceWithBalancedLeakFreeShards) {
  write_store(features, 12, 10);
  std::string csv = "key,label\n";
  std::multiset<std::pair<std::string, std::string>> expected;
  for (int s = 0; s < 12; ++s) {
    for (int i = 0; i < 10; ++i) {
      const std::string label = (s + i) % 3 == 0 ? "tumor" : "normal";
      csv += tile_key(s, i) + "," + label + "\n";
      expected.insert({tile_key(s, i), label});
      if (i == 4) {  // a second label on the same tile: a second record, the same row
        csv += tile_key(s, i) + ",stroma\n";
        expected.insert({tile_key(s, i), "stroma"});
      }
    }
  }
  write_labels(csv);
  PackJob j = job();
  j.shards = 3;
  j.seed = 7;
  const PackReport report = pack_dataset(j);
  ASSERT_TRUE(only_output_left());
  EXPECT_EQ(report.records, expected.size());
  EXPECT_FALSE(report.coordinates);

  const auto store = io::FeatureStore::open(features);
  const auto doc = io::read_manifest(util::join_path(output, kDatasetManifestFile), "dataset");
  EXPECT_EQ(doc, report.manifest);
  const std::vector<std::string> names = doc.at("labels").at("names");
  EXPECT_EQ(names, (std::vector<std::string>{"normal", "stroma", "tumor"}));

  std::multiset<std::pair<std::string, std::string>> seen;
  std::map<std::string, std::string> split_of_slide;
  std::map<std::string, std::uint64_t> per_shard;
  std::map<std::string, std::vector<std::uint64_t>> histogram_of_shard;
  for (const auto& r : read_dataset(output)) {
    const auto index = static_cast<std::uint64_t>(r.example.int64("index"));
    const std::string key(store.key(index));
    const std::string slide = r.example.bytes("slide").at(0);
    EXPECT_EQ(slide, key.substr(0, key.find('/')));
    EXPECT_FALSE(r.example.has("x"));
    EXPECT_FALSE(r.example.has("key"));
    const auto label = r.example.int64("label");
    seen.insert({key, names.at(label)});
    auto [it, inserted] = split_of_slide.emplace(slide, r.split);
    EXPECT_EQ(it->second, r.split) << "slide " << slide << " is in two splits";
    ++per_shard[r.file];
    auto& h = histogram_of_shard[r.file];
    h.resize(names.size());
    ++h[label];
  }
  EXPECT_EQ(seen, expected);  // every (key, label) pair exactly once

  std::uint64_t total = 0;
  for (const auto& [split, info] : doc.at("splits").items()) {
    std::uint64_t lo = UINT64_MAX, hi = 0, sum = 0;
    EXPECT_EQ(info.at("shards").size(), 3u);
    for (const auto& shard : info.at("shards")) {
      const std::string file = shard.at("file");
      EXPECT_EQ(file.rfind(split + "-", 0), 0u);
      const std::uint64_t n = shard.at("records");
      EXPECT_EQ(n, per_shard[file]) << file;
      EXPECT_EQ(shard.at("bytes").get<std::uint64_t>(),
                util::file_size(util::join_path(output, file)));
      EXPECT_EQ(io::read_index(util::join_path(output, shard.at("index"))).size(), n);
      if (n > 0) {
        EXPECT_EQ(shard.at("label_histogram").get<std::vector<std::uint64_t>>(),
                  histogram_of_shard[file]);
      }
      lo = std::min(lo, n);
      hi = std::max(hi, n);
      sum += n;
    }
    EXPECT_LE(hi - lo, 1u) << split;
    EXPECT_EQ(info.at("records").get<std::uint64_t>(), sum);
    total += sum;
  }
  EXPECT_EQ(total, doc.at("records").get<std::uint64_t>());
  EXPECT_EQ(doc.at("group_split").size(), 12u);
  for (const auto& [slide, split] : split_of_slide)
    EXPECT_EQ(doc.at("group_split").at(slide), split);
  EXPECT_EQ(doc.at("features").at("matrix_sha256"),
            sha256_hex(util::read_file(util::join_path(features, "features.npy"))));
  EXPECT_EQ(doc.at("features").at("matrix_bytes").get<std::uint64_t>(),
            util::file_size(util::join_path(features, "features.npy")));
  EXPECT_EQ(doc.at("features").at("path").get<std::string>().front(), '/');
}

TEST_F(PackTest, SameSeedSameBytes) {
  write_store(features, 6, 5);
  std::string csv = "key,label\n";
  for (int s = 0; s < 6; ++s) {
    for (int i = 0; i < 5; ++i) csv += tile_key(s, i) + "," + std::to_string(i % 2) + "\n";
  }
  write_labels(csv);
  PackJob j = job();
  j.shards = 2;
  const auto first = pack_dataset(j);
  const std::string a = util::read_file(util::join_path(output, "train-00000-of-00002.tfrecord"));
  j.output = tmp / "again";
  pack_dataset(j);
  EXPECT_EQ(util::read_file(util::join_path(j.output, "train-00000-of-00002.tfrecord")), a);
}

TEST_F(PackTest, BagsPerSlideFromSlideLevelLabelsSplitByPatient) {
  write_store(features, 6, 4);
  write_labels("slide,diagnosis,patient\nS0,1,p0\nS1,0,p0\nS2,1,p1\nS3,0,p2\nS4,1,p3\nS5,0,p3\n");
  PackJob j = job();
  j.unit = PackUnit::bag;
  j.columns.key = "slide";
  j.columns.label = "diagnosis";
  j.columns.group = "patient";
  j.splits = {{"train", 0.5}, {"test", 0.5}};
  const auto report = pack_dataset(j);
  EXPECT_EQ(report.records, 6u);
  std::map<std::string, std::string> split_of;
  for (const auto& r : read_dataset(output)) {
    const std::string slide = r.example.bytes("slide").at(0);
    const int s = slide[1] - '0';
    std::vector<std::int64_t> rows;
    for (int i = 0; i < 4; ++i) rows.push_back(s * 4 + i);
    EXPECT_EQ(r.example.int64s("indices"), rows) << slide;
    EXPECT_EQ(r.example.int64("label"), s % 2 == 0 ? 1 : 0);
    EXPECT_FALSE(r.example.has("index"));
    split_of[slide] = r.split;
  }
  EXPECT_EQ(split_of.size(), 6u);
  EXPECT_EQ(split_of["S0"], split_of["S1"]);  // patient p0
  EXPECT_EQ(split_of["S4"], split_of["S5"]);  // patient p3
  EXPECT_EQ(report.manifest.at("group_split").size(), 4u);
  EXPECT_EQ(report.manifest.at("labels").at("group_column"), "patient");
}

TEST_F(PackTest, SlideLevelLabelsExpandToTileRecordsAndImageRecordsCarryKeys) {
  write_store(features, 3, 4);
  write_labels("key,label\nS0,a\nS1,b\nS2/000000_000001,c\n");
  PackJob j = job();
  j.unit = PackUnit::image;
  j.splits = {{"all", 1.0}};
  const auto report = pack_dataset(j);
  EXPECT_EQ(report.records, 9u);
  const auto store = io::FeatureStore::open(features);
  std::set<std::string> keys;
  for (const auto& r : read_dataset(output)) {
    const std::string key = r.example.bytes("key").at(0);
    EXPECT_EQ(key, store.key(r.example.int64("index")));
    keys.insert(key);
  }
  EXPECT_EQ(keys.size(), 9u);
  EXPECT_TRUE(keys.count(tile_key(2, 1)));
}

TEST_F(PackTest, MissingKeysAreListedAndNothingIsWritten) {
  write_store(features, 2, 3);
  std::string csv = "key,label\n" + tile_key(0, 0) + ",a\n";
  for (int i = 0; i < 7; ++i) csv += "nope/" + std::to_string(i) + ",a\n";
  write_labels(csv);
  const std::string message = error_of<InputError>([&] { pack_dataset(job()); });
  EXPECT_TRUE(contains(message, "7 labels rows")) << message;
  EXPECT_TRUE(contains(message, "\"nope/0\" (line 3)")) << message;
  EXPECT_TRUE(contains(message, "\"nope/4\"")) << message;
  EXPECT_FALSE(contains(message, "\"nope/5\"")) << message;
  EXPECT_TRUE(contains(message, "--skip-missing")) << message;
  EXPECT_FALSE(util::exists(output));
  EXPECT_TRUE(only_output_left());

  PackJob j = job();
  j.skip_missing = true;
  const auto report = pack_dataset(j);
  EXPECT_EQ(report.missing_keys, 7u);
  EXPECT_EQ(report.records, 1u);
  EXPECT_EQ(report.manifest.at("excluded").at("missing_keys"), 7);
}

TEST_F(PackTest, DedupePointsRecordsAtTheFirstIdenticalRow) {
  // Rows 0..11; rows 3, 7 and 11 equal row 1 (value 1), every other row is distinct.
  write_store(features, 3, 4, [](int r) { return r % 4 == 3 || r == 1 ? 1.0f : float(r + 100); });
  std::string csv = "key,label\n";
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 4; ++i) csv += tile_key(s, i) + ",x\n";
  }
  write_labels(csv);
  PackJob j = job();
  j.dedupe = true;
  j.splits = {{"all", 1.0}};
  const auto report = pack_dataset(j);
  EXPECT_EQ(report.duplicate_rows, 3u);
  EXPECT_EQ(report.records, 12u);
  std::multiset<std::int64_t> indices;
  for (const auto& r : read_dataset(output)) indices.insert(r.example.int64("index"));
  EXPECT_EQ(indices.count(1), 4u);
  EXPECT_EQ(indices.count(3) + indices.count(7) + indices.count(11), 0u);
  EXPECT_EQ(report.manifest.at("dedupe").at("duplicate_rows"), 3);
}

TEST_F(PackTest, InvalidRowsAreNeverPacked) {
  write_store(features, 2, 4, [](int r) { return float(r); }, {1, 5});
  write_labels("key,label\n" + tile_key(0, 0) + ",a\n" + tile_key(0, 1) + ",a\nS1,b\n");
  PackJob j = job();
  j.splits = {{"all", 1.0}};
  const auto report = pack_dataset(j);
  EXPECT_EQ(report.invalid_rows, 2u);  // row 1 by key, row 5 from the slide-level label
  EXPECT_EQ(report.records, 4u);       // row 0, rows 4, 6, 7
  std::set<std::int64_t> indices;
  for (const auto& r : read_dataset(output)) indices.insert(r.example.int64("index"));
  EXPECT_EQ(indices, (std::set<std::int64_t>{0, 4, 6, 7}));
}

TEST_F(PackTest, AFailedPackLeavesNoOutput) {
  write_store(features, 4, 4);
  std::string csv = "key,label\n";
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < 4; ++i) csv += tile_key(s, i) + ",a\n";
  }
  write_labels(csv);
  PackJob j = job();
  j.shards = 2;
  int shards = 0;
  j.on_shard = [&](const PackShard&) {
    if (++shards == 2) throw ResourceError("disk full (simulated)");
  };
  EXPECT_TRUE(contains(error_of<ResourceError>([&] { pack_dataset(j); }), "simulated"));
  EXPECT_EQ(shards, 2);
  EXPECT_FALSE(util::exists(output));
  EXPECT_TRUE(only_output_left());
}

TEST_F(PackTest, AnExistingOutputIsRefusedUnlessOverwriting) {
  write_store(features, 2, 2);
  write_labels("key,label\nS0,a\nS1,b\n");
  util::make_directories(output);
  util::write_file_atomic(util::join_path(output, "old.txt"), "old");
  EXPECT_TRUE(contains(error_of<UsageError>([&] { pack_dataset(job()); }), "already exists"));
  EXPECT_TRUE(util::exists(util::join_path(output, "old.txt")));
  PackJob j = job();
  j.overwrite = true;
  pack_dataset(j);
  EXPECT_FALSE(util::exists(util::join_path(output, "old.txt")));
  EXPECT_TRUE(util::exists(util::join_path(output, kDatasetManifestFile)));
  EXPECT_FALSE(util::exists(output + ".old-" + std::to_string(::getpid())));
}

TEST_F(PackTest, CoordinatesComeFromTheTileStoreWhenEveryTileIsThere) {
  const std::string tiles = tmp / "tiles.lmdb";
  auto write_tiles = [&](int listed) {  // slides S0, S1 with their first `listed` tiles
    auto store = io::TileStore::open(tiles, true);
    const auto meta = store.meta();
    store.env().write([&](io::lmdb::Txn& txn) {
      for (int s = 0; s < 2; ++s) {
        nlohmann::json doc = {{"row", nlohmann::json::array()},
                              {"col", nlohmann::json::array()},
                              {"x", nlohmann::json::array()},
                              {"y", nlohmann::json::array()},
                              {"tissue", nlohmann::json::array()}};
        for (int i = 0; i < listed; ++i) {
          doc["row"].push_back(0);
          doc["col"].push_back(i);
          doc["x"].push_back(1000 * s + 256 * i);
          doc["y"].push_back(7);
          doc["tissue"].push_back(1.0);
        }
        txn.put(meta, "tiles/S" + std::to_string(s), doc.dump());
      }
    });
  };
  write_tiles(3);
  write_store(features, 2, 3, [](int r) { return float(r); }, {}, {{"tile_store", tiles}});
  write_labels("key,label\nS0,a\nS1,b\n");
  PackJob j = job();
  j.splits = {{"all", 1.0}};
  const auto report = pack_dataset(j);
  EXPECT_TRUE(report.coordinates);
  EXPECT_EQ(report.manifest.at("tile_store"), tiles);
  const auto store = io::FeatureStore::open(features);
  for (const auto& r : read_dataset(output)) {
    const std::string key(store.key(r.example.int64("index")));
    const int s = key[1] - '0', i = key.back() - '0';
    EXPECT_EQ(r.example.int64("x"), 1000 * s + 256 * i) << key;
    EXPECT_EQ(r.example.int64("y"), 7) << key;
  }

  util::remove_tree(tiles);
  write_tiles(2);  // one tile per slide is not in the tile store: no record gets x, y
  j.output = tmp / "without";
  const auto without = pack_dataset(j);
  EXPECT_FALSE(without.coordinates);
  EXPECT_TRUE(without.manifest.at("tile_store").is_null());
  for (const auto& r : read_dataset(j.output)) EXPECT_FALSE(r.example.has("x"));
}

// Issue 27: what pack writes, the codec train reads with decodes: patient bags of survival
// records in folds, each bag all of its patient's slides' rows, with its patient's outcome.
TEST_F(PackTest, SurvivalPatientBagsInFoldsDecodeWithTheRecordCodec) {
  write_store(features, 12, 3);
  std::string text = "key,patient,os,dead\n";
  for (int s = 0; s < 12; ++s)
    text += "S" + std::to_string(s) + ",P" + std::to_string(s / 2) + "," +
            std::to_string(2 + s / 2) + ".5," + (s / 2 % 2 ? "yes" : "no") + "\n";
  write_labels(text);
  PackJob j = job();
  j.task = PackTask::survival;
  j.columns.time = "os";
  j.columns.event = "dead";
  j.columns.bag = "patient";
  j.unit = PackUnit::bag;
  j.folds = 3;
  j.splits_given = false;
  const PackReport r = pack_dataset(j);
  EXPECT_EQ(r.records, 6u);
  const auto& m = r.manifest;
  EXPECT_EQ(m.at("task"), "survival");
  EXPECT_EQ(m.at("folds").at("splits"), nlohmann::json({"fold-0", "fold-1", "fold-2"}));
  EXPECT_EQ(m.at("folds").at("group_column"), "patient");
  const RecordCodec codec(PackUnit::bag, false, PackTask::survival);
  const RecordLimits limits{0, 36, "dataset.json"};
  std::map<std::string, int> events_in;
  for (const Read& rec : read_dataset(output)) {
    Record out;
    codec.decode(rec.example, limits, out);
    const int p = std::stoi(out.slide.substr(1));
    EXPECT_EQ(out.time, 2.5f + static_cast<float>(p)) << out.slide;
    EXPECT_EQ(out.event, p % 2 ? 1.0f : 0.0f) << out.slide;
    std::vector<std::int64_t> rows;  // slides 2p and 2p + 1, three tiles each
    for (int row = 6 * p; row < 6 * p + 6; ++row) rows.push_back(row);
    EXPECT_EQ(out.rows, rows) << out.slide;
    EXPECT_EQ(m.at("group_split").at(out.slide), rec.split);
    events_in[rec.split] += static_cast<int>(out.event);
  }
  EXPECT_EQ(events_in, (std::map<std::string, int>{{"fold-0", 1}, {"fold-1", 1}, {"fold-2", 1}}));
}

TEST_F(PackTest, RegressionTargetsAndOutcomeStats) {
  write_store(features, 4, 2);
  write_labels("key,tmb\nS0,1.5\nS1,-2\nS2,4\nS3,0.25\n");
  PackJob j = job();
  j.task = PackTask::regression;
  j.columns.target = "tmb";
  j.splits = {{"all", 1.0}};
  const PackReport r = pack_dataset(j);
  const auto& stats = r.manifest.at("splits").at("all").at("outcome_stats");
  EXPECT_EQ(stats.at("count"), 8);
  EXPECT_DOUBLE_EQ(stats.at("mean").get<double>(), 0.9375);
  EXPECT_DOUBLE_EQ(stats.at("min").get<double>(), -2);
  EXPECT_DOUBLE_EQ(stats.at("max").get<double>(), 4);
  // Two records of each target: sd (n − 1) of {1.5, −2, 4, 0.25} twice.
  double squares = 0;
  for (double t : {1.5, -2.0, 4.0, 0.25}) squares += 2 * (t - 0.9375) * (t - 0.9375);
  EXPECT_NEAR(stats.at("sd").get<double>(), std::sqrt(squares / 7), 1e-12);
  EXPECT_EQ(r.manifest.at("labels").at("label_column"), nullptr);
  EXPECT_EQ(r.manifest.at("outcome"), nlohmann::json({{"target_column", "tmb"}}));
  const RecordCodec codec(PackUnit::tile, false, PackTask::regression);
  const std::map<std::string, float> want = {{"S0", 1.5f}, {"S1", -2}, {"S2", 4}, {"S3", 0.25f}};
  for (const Read& rec : read_dataset(output)) {
    Record out;
    codec.decode(rec.example, {0, 8, "dataset.json"}, out);
    EXPECT_EQ(out.target, want.at(rec.example.bytes("slide").at(0)));
  }
}

}  // namespace
}  // namespace mltool::records
