// records::RecordCodec: the record layout of each unit, as pack writes it and train reads it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mltool/io/example.hpp"
#include "mltool/records/record.hpp"
#include "mltool/util/error.hpp"
#include "support/errors.hpp"

namespace mltool::records {
namespace {

using mltool::testing::error_of;
using nlohmann::json;

const RecordLimits kLimits{3, 100, "ds/dataset.json"};

io::Example encoded(const RecordCodec& codec, const Record& r) {
  io::ExampleBuilder b;
  codec.encode(r, b);
  return io::parse_example(b.serialize(), "s.tfrecord: record 0 (byte 0)");
}

TEST(RecordCodec, FeaturesOfEachUnit) {
  EXPECT_EQ(RecordCodec(PackUnit::tile).features(),
            json({{"index", "int64"}, {"label", "int64"}, {"slide", "bytes"}}));
  EXPECT_EQ(RecordCodec(PackUnit::tile, true).features(), json({{"index", "int64"},
                                                                {"label", "int64"},
                                                                {"slide", "bytes"},
                                                                {"x", "int64"},
                                                                {"y", "int64"}}));
  EXPECT_EQ(RecordCodec(PackUnit::image).features(),
            json({{"index", "int64"}, {"key", "bytes"}, {"label", "int64"}, {"slide", "bytes"}}));
  // Bags have no coordinates, whatever the store has.
  EXPECT_EQ(RecordCodec(PackUnit::bag, true).features(),
            json({{"indices", "int64_list"}, {"label", "int64"}, {"slide", "bytes"}}));
}

TEST(RecordCodec, EncodesInTheOrderPackAlwaysWrote) {
  Record r;
  r.label = 2;
  r.slide = "S1";
  r.rows = {7};
  r.key = "S1/000001_000002";
  r.xy = {{512, 768}};
  io::ExampleBuilder codec, by_hand;
  RecordCodec(PackUnit::image, true).encode(r, codec);
  by_hand.add_int64("label", 2).add_bytes("slide", "S1").add_int64("index", 7);
  by_hand.add_bytes("key", "S1/000001_000002").add_int64("x", 512).add_int64("y", 768);
  EXPECT_EQ(codec.serialize(), by_hand.serialize());
}

TEST(RecordCodec, DecodesWhatTrainingUses) {
  Record r;
  r.label = 1;
  r.slide = "S0";
  r.rows = {3, 4, 4, 9};
  Record out;
  const RecordCodec bag(PackUnit::bag);
  bag.decode(encoded(bag, r), kLimits, out);
  EXPECT_EQ(out.label, 1);
  EXPECT_EQ(out.rows, r.rows);
  EXPECT_EQ(out.slide, "S0");

  r.rows = {5};
  r.key = "S0/k";
  r.xy = {{1, 2}};
  const RecordCodec image(PackUnit::image, true);
  image.decode(encoded(image, r), kLimits, out);
  EXPECT_EQ(out.rows, std::vector<std::int64_t>{5});
  EXPECT_EQ(out.key, "S0/k");
  EXPECT_EQ(out.slide, "");  // not read: training identifies images by key
  EXPECT_FALSE(out.xy);

  const RecordCodec tile(PackUnit::tile, true);
  tile.decode(encoded(tile, r), kLimits, out);
  EXPECT_EQ(out.rows, std::vector<std::int64_t>{5});
  EXPECT_EQ(out.key, "");
}

TEST(RecordCodec, DecodeNamesTheRecordAndTheLimit) {
  const RecordCodec tile(PackUnit::tile);
  Record r, out;
  r.label = 3;
  r.rows = {0};
  EXPECT_EQ(error_of<FormatError>([&] { tile.decode(encoded(tile, r), kLimits, out); }),
            "s.tfrecord: record 0 (byte 0): label 3 is not in the label map of ds/dataset.json "
            "(3 labels)");
  r.label = 0;
  r.rows = {100};
  EXPECT_EQ(error_of<FormatError>([&] { tile.decode(encoded(tile, r), kLimits, out); }),
            "s.tfrecord: record 0 (byte 0): row 100 is outside the feature matrix (100 rows)");
  const RecordCodec bag(PackUnit::bag);
  r.rows = {};
  EXPECT_EQ(error_of<FormatError>([&] { bag.decode(encoded(bag, r), kLimits, out); }),
            "s.tfrecord: record 0 (byte 0): an empty bag (no indices)");
  // A tile record read as an image record: no key.
  r.rows = {1};
  const std::string message = error_of<FormatError>(
      [&] { RecordCodec(PackUnit::image).decode(encoded(tile, r), kLimits, out); });
  EXPECT_TRUE(mltool::testing::contains(message, "s.tfrecord: record 0 (byte 0)")) << message;
  EXPECT_TRUE(mltool::testing::contains(message, "key")) << message;
}

TEST(RecordCodec, RecordFeaturesOfDatasetJson) {
  const auto features = parse_record_features(RecordCodec(PackUnit::image, true).features());
  ASSERT_EQ(features.size(), 6u);
  for (const auto& f : features) {
    EXPECT_EQ(f.rows, f.name == "index") << f.name;
    EXPECT_FALSE(f.list) << f.name;
    EXPECT_EQ(f.kind, f.name == "key" || f.name == "slide" ? io::FeatureKind::bytes_list
                                                           : io::FeatureKind::int64_list)
        << f.name;
  }
  const auto bag = parse_record_features(RecordCodec(PackUnit::bag).features());
  ASSERT_EQ(bag.front().name, "indices");
  EXPECT_TRUE(bag.front().list);
  EXPECT_TRUE(bag.front().rows);
}

TEST(RecordCodec, OutcomesOfEachTask) {
  EXPECT_EQ(RecordCodec(PackUnit::bag, false, PackTask::regression).features(),
            json({{"indices", "int64_list"}, {"slide", "bytes"}, {"target", "float"}}));
  EXPECT_EQ(RecordCodec(PackUnit::tile, false, PackTask::survival).features(),
            json({{"event", "float"}, {"index", "int64"}, {"slide", "bytes"}, {"time", "float"}}));
  Record r, out;
  r.slide = "P1";
  r.rows = {2, 3};
  r.target = 2.5f;
  r.time = 13.25f;
  r.event = 1;
  const RecordCodec regression(PackUnit::bag, false, PackTask::regression);
  regression.decode(encoded(regression, r), kLimits, out);
  EXPECT_EQ(out.target, 2.5f);
  EXPECT_EQ(out.slide, "P1");
  const RecordCodec survival(PackUnit::bag, false, PackTask::survival);
  survival.decode(encoded(survival, r), kLimits, out);
  EXPECT_EQ(out.time, 13.25f);
  EXPECT_EQ(out.event, 1.0f);
  io::ExampleBuilder by_hand;
  by_hand.add_float("time", 13.25f).add_float("event", 1).add_bytes("slide", "P1");
  by_hand.add_int64s("indices", {2, 3});
  io::ExampleBuilder codec;
  survival.encode(r, codec);
  EXPECT_EQ(codec.serialize(), by_hand.serialize());
  const auto parsed = parse_record_features(survival.features());
  for (const auto& f : parsed) {
    if (f.name == "time") {
      EXPECT_EQ(f.kind, io::FeatureKind::float_list);
    }
  }
}

TEST(RecordCodec, MultilabelValuesAndMask) {
  const RecordCodec codec(PackUnit::bag, false, PackTask::multilabel);
  EXPECT_EQ(codec.features(), json({{"indices", "int64_list"},
                                    {"label_mask", "int64_list"},
                                    {"labels", "float_list"},
                                    {"slide", "bytes"}}));
  Record r, out;
  r.slide = "P1";
  r.rows = {2, 3};
  r.values = {1, NAN, 0};
  io::ExampleBuilder by_hand;
  by_hand.add_floats("labels", {1, 0, 0}).add_int64s("label_mask", {1, 0, 1});
  by_hand.add_bytes("slide", "P1").add_int64s("indices", {2, 3});
  io::ExampleBuilder encoded_here;
  codec.encode(r, encoded_here);
  EXPECT_EQ(encoded_here.serialize(), by_hand.serialize());
  codec.decode(encoded(codec, r), kLimits, out);
  ASSERT_EQ(out.values.size(), 3u);
  EXPECT_EQ(out.values[0], 1.0f);
  EXPECT_TRUE(std::isnan(out.values[1]));  // masked: training leaves it out
  EXPECT_EQ(out.values[2], 0.0f);
  std::vector<float> targets;
  codec.append_targets(out, targets);
  EXPECT_EQ(targets.size(), 3u);
  // Another number of labels than dataset.json names, a label that is not 0 or 1.
  const RecordLimits two{2, 100, "ds/dataset.json"};
  EXPECT_EQ(error_of<FormatError>([&] { codec.decode(encoded(codec, r), two, out); }),
            "s.tfrecord: record 0 (byte 0): 3 labels and 3 mask values, but ds/dataset.json "
            "names 2 label columns");
  r.values = {1, 0.5f, 0};
  EXPECT_NE(error_of<FormatError>([&] {
              codec.decode(encoded(codec, r), kLimits, out);
            }).find("label 1 is 0.500000 with mask 1"),
            std::string::npos);
  const auto parsed = parse_record_features(codec.features());
  for (const auto& f : parsed)
    if (f.name == "labels") {
      EXPECT_EQ(f.kind, io::FeatureKind::float_list);
      EXPECT_TRUE(f.list);
    }
}

TEST(RecordCodec, DecodeRefusesOutcomesOutsideTheirRange) {
  const RecordCodec survival(PackUnit::tile, false, PackTask::survival);
  Record r, out;
  r.rows = {0};
  r.time = 0;
  r.event = 1;
  EXPECT_EQ(error_of<FormatError>([&] { survival.decode(encoded(survival, r), kLimits, out); }),
            "s.tfrecord: record 0 (byte 0): time 0.000000 is not a finite number > 0");
  r.time = 1;
  r.event = 0.5f;
  EXPECT_EQ(error_of<FormatError>([&] { survival.decode(encoded(survival, r), kLimits, out); }),
            "s.tfrecord: record 0 (byte 0): event 0.500000 is neither 0 nor 1");
  const RecordCodec regression(PackUnit::tile, false, PackTask::regression);
  // A classification record read as a regression record: no target.
  const std::string message = error_of<FormatError>(
      [&] { regression.decode(encoded(RecordCodec(PackUnit::tile), r), kLimits, out); });
  EXPECT_EQ(message,
            "s.tfrecord: record 0 (byte 0): missing feature 'target' (the record has 'index', "
            "'label', 'slide')");
}

}  // namespace
}  // namespace mltool::records
