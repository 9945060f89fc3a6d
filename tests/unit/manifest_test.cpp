#include "mltool/io/manifest.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "mltool/io/feature_store.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "unit/feature_store_fixture.hpp"

namespace {

using mltool::FormatError;
using nlohmann::json;

json valid_features() {
  return json{{"format", "mltool.features"},
              {"format_version", 1},
              {"rows", 10},
              {"dims", 4},
              {"dtype", "float16"},
              {"files", {{"matrix", "features.npy"}, {"keys", "keys.txt"}}},
              {"model", {{"name", "resnet18"}}},
              {"created_by", "mltool 0.1.0"}};
}

// The FormatError read_manifest throws for `text` as features.json, or "".
std::string read_error(const std::string& text) {
  mltool::testing::TempDir dir;
  const std::string path = dir / "features.json";
  mltool::util::write_file_atomic(path, text);
  try {
    mltool::io::read_manifest(path, "features");
  } catch (const FormatError& e) {
    std::string m = e.what();
    return m.substr(m.find("features.json"));  // drop the temporary directory
  }
  return "";
}

TEST(Manifest, FeaturesSchemaIsEmbedded) {
  const auto names = mltool::io::schema_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "features"), names.end());
  EXPECT_FALSE(mltool::io::schema_text("features").empty());
  EXPECT_TRUE(mltool::io::schema_text("nope").empty());
  EXPECT_EQ(mltool::io::embedded_schema("features").name(), "features.schema.json");
  EXPECT_EQ(&mltool::io::embedded_schema("features"), &mltool::io::embedded_schema("features"));
  EXPECT_THROW(mltool::io::embedded_schema("nope"), mltool::UsageError);
  EXPECT_EQ(mltool::io::supported_format_version("features"), mltool::io::kFeaturesFormatVersion);
}

TEST(Manifest, EmbeddedSchemaMatchesTheSourceFile) {
  // The build compiles schemas/*.schema.json in; the docs link to the same files.
  const std::string file =
      std::string(MLTOOL_TEST_DATA_DIR) + "/../../schemas/features.schema.json";
  EXPECT_EQ(mltool::util::read_file(file), mltool::io::schema_text("features"));
}

TEST(Manifest, WriteThenReadRoundTrips) {
  mltool::testing::TempDir dir;
  const std::string path = dir / "features.json";
  json doc = valid_features();
  doc["invalid_rows"] = {3, 7};
  doc["source"] = {{"tiles", "/data/tiles.lmdb"}};
  mltool::io::write_manifest(path, doc, "features");
  const std::string text = mltool::util::read_file(path);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_NE(text.find("\n  \"created_by\": \"mltool 0.1.0\",\n"), std::string::npos) << text;
  EXPECT_EQ(mltool::io::read_manifest(path, "features"), doc);
}

TEST(Manifest, WriteRefusesInvalidDocumentsAndPublishesNothing) {
  mltool::testing::TempDir dir;
  json doc = valid_features();
  doc["dims"] = 0;
  try {
    mltool::io::write_manifest(dir / "features.json", doc, "features");
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()), dir / "features.json: /dims: expected integer >= 1, got 0");
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Manifest, WriteRefusesInvalidUtf8) {
  mltool::testing::TempDir dir;
  json doc = valid_features();
  doc["model"]["name"] = "bad \xff";
  EXPECT_THROW(mltool::io::write_manifest(dir / "features.json", doc, "features"),
               mltool::InputError);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Manifest, ReadReportsParseErrorsWithByteOffset) {
  EXPECT_EQ(read_error("{\"rows\": 1,\n \"dims\": x}").substr(0, 37),
            "features.json: byte 21: invalid JSON:");
  EXPECT_NE(read_error("").find("invalid JSON"), std::string::npos);
}

// Found by fuzz_json (the same nlohmann behaviour fuzz_labels hit): a number beyond a double's
// range is an out_of_range exception, not a parse_error, and escaped read_manifest.
TEST(Manifest, ReadReportsNumberOverflowAsInvalidJson) {
  EXPECT_EQ(read_error("{\"rows\": 1e999}"),
            "features.json: invalid JSON: number overflow parsing '1e999'");
}

TEST(Manifest, ReadNamesMissingAndMistypedFields) {
  json doc = valid_features();
  doc.erase("rows");
  EXPECT_EQ(read_error(doc.dump()), "features.json: /rows: required field is missing");
  doc = valid_features();
  doc["dims"] = "4";
  EXPECT_EQ(read_error(doc.dump()), "features.json: /dims: expected integer, got \"4\"");
  doc = valid_features();
  doc["dims"] = -3;
  EXPECT_EQ(read_error(doc.dump()), "features.json: /dims: expected integer >= 1, got -3");
  doc = valid_features();
  doc["files"]["matrix"] = "other.npy";
  EXPECT_EQ(read_error(doc.dump()),
            "features.json: /files/matrix: expected \"features.npy\", got \"other.npy\"");
  doc = valid_features();
  doc["model"] = "resnet";
  EXPECT_EQ(read_error(doc.dump()), "features.json: /model: expected object, got \"resnet\"");
  doc = valid_features();
  doc["extra"] = true;
  EXPECT_EQ(read_error(doc.dump()).substr(0, 43), "features.json: /extra: unexpected field (al");
  doc = valid_features();
  doc["invalid_rows"] = {1, -2};
  EXPECT_EQ(read_error(doc.dump()),
            "features.json: /invalid_rows/1: expected integer >= 0, got -2");
}

TEST(Manifest, ReadExplainsOtherFormatsAndNewerVersions) {
  json doc = valid_features();
  doc["format_version"] = 2;
  EXPECT_EQ(
      read_error(doc.dump()),
      "features.json: /format_version: version 2 is newer than this build of mltool supports (1); "
      "upgrade mltool");
  doc = valid_features();
  doc["format_version"] = 0;
  EXPECT_EQ(read_error(doc.dump()),
            "features.json: /format_version: expected integer between 1 and 1, got 0");
  EXPECT_EQ(read_error(R"({"format": "mltool.dataset", "splits": {}})"),
            "features.json: /format: expected \"mltool.features\", got \"mltool.dataset\" "
            "(this is not a features manifest)");
}

TEST(Manifest, ReadReportsMissingFileAsInputError) {
  EXPECT_THROW(mltool::io::read_manifest("/nonexistent/features.json", "features"),
               mltool::InputError);
}

}  // namespace
