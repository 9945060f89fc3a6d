#include "mltool/io/feature_store.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "mltool/io/half.hpp"
#include "mltool/io/manifest.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "unit/feature_store_fixture.hpp"

namespace {

using mltool::FormatError;
using mltool::InputError;
using mltool::io::DType;
using mltool::io::FeatureStore;
using mltool::io::FeatureStoreWriter;
using mltool::testing::formula_key;
using mltool::testing::formula_value;
using mltool::testing::TempDir;
using nlohmann::json;

// The message FeatureStore::open throws for `dir`, with the directory cut to "D".
template <typename E = FormatError>
std::string open_error(const std::string& dir) {
  try {
    FeatureStore::open(dir);
  } catch (const E& e) {
    std::string m = e.what();
    for (std::size_t p; (p = m.find(dir)) != std::string::npos;) m.replace(p, dir.size(), "D");
    return m;
  }
  return "";
}

void edit_manifest(const std::string& dir, const std::function<void(json&)>& edit) {
  json doc = json::parse(mltool::util::read_file(dir + "/features.json"));
  edit(doc);
  mltool::util::write_file_atomic(dir + "/features.json", doc.dump(2));
}

class FeatureStoreRoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(FeatureStoreRoundTrip, ValuesKeysAndManifestSurvive) {
  TempDir dir;
  mltool::testing::write_formula_store(dir.path(), 257, 13, GetParam());
  const FeatureStore s = FeatureStore::open(dir.path());
  EXPECT_EQ(s.rows(), 257u);
  EXPECT_EQ(s.dims(), 13u);
  EXPECT_EQ(s.dtype(), GetParam());
  EXPECT_EQ(s.row_bytes(), 13 * mltool::io::itemsize(GetParam()));
  EXPECT_EQ(s.data_offset(), mltool::io::kNpyStreamingHeaderSize);
  EXPECT_EQ(s.data(), s.mapping()->data() + s.data_offset());
  std::vector<float> row(13);
  for (std::uint64_t i = 0; i < s.rows(); ++i) {
    s.row_f32(i, row.data());
    for (std::uint64_t j = 0; j < 13; ++j) {
      float want = formula_value(i, j);
      if (GetParam() == DType::float16)
        want = mltool::io::half_to_float(mltool::io::float_to_half(want));
      ASSERT_EQ(row[j], want) << i << "," << j;
    }
    ASSERT_EQ(s.key(i), formula_key(i));
  }
  EXPECT_EQ(s.find(formula_key(200)), 200u);
  EXPECT_EQ(s.find("slide-0/tile-999"), std::nullopt);
  EXPECT_EQ(s.manifest()["model"]["name"], "formula");
  EXPECT_EQ(s.manifest()["source"]["generator"], "write_formula_store");
  EXPECT_EQ(s.manifest()["created_by"].get<std::string>().rfind("mltool", 0), 0u);
  EXPECT_FALSE(s.manifest().contains("invalid_rows"));
  EXPECT_TRUE(s.invalid_rows().empty());
}

INSTANTIATE_TEST_SUITE_P(BothDTypes, FeatureStoreRoundTrip,
                         ::testing::Values(DType::float32, DType::float16), [](const auto& info) {
                           return std::string(mltool::io::name(info.param));
                         });

TEST(FeatureStore, GatherAndMappingOutliveTheStore) {
  TempDir dir;
  mltool::testing::write_formula_store(dir.path(), 20, 3, DType::float32);
  std::shared_ptr<const mltool::util::MappedFile> mapping;
  {
    FeatureStore moved = FeatureStore::open(dir.path());
    const FeatureStore s = std::move(moved);
    const std::uint64_t rows[] = {5, 0, 5};
    std::vector<float> out(9);
    s.gather_f32(rows, 3, out.data());
    EXPECT_EQ(out[0], formula_value(5, 0));
    EXPECT_EQ(out[5], formula_value(0, 2));
    EXPECT_EQ(out[8], formula_value(5, 2));
    EXPECT_EQ(s.find(formula_key(7)), 7u);  // keys survive the move
    EXPECT_THROW(s.row_f32(20, out.data()), InputError);
    EXPECT_THROW(s.key(99), InputError);
    mapping = s.mapping();
  }
  float first;
  std::memcpy(&first, mapping->data() + mltool::io::kNpyStreamingHeaderSize, 4);
  EXPECT_EQ(first, formula_value(0, 0));
}

TEST(FeatureStore, EmptyStoreOpens) {
  TempDir dir;
  mltool::testing::write_formula_store(dir.path(), 0, 8, DType::float16);
  const FeatureStore s = FeatureStore::open(dir.path());
  EXPECT_EQ(s.rows(), 0u);
  EXPECT_EQ(s.find("x"), std::nullopt);
}

TEST(FeatureStoreWriter, AbandonedWriterPublishesNothingAndKeepsTheOldStore) {
  TempDir dir;
  {
    FeatureStoreWriter w(dir.path(), 4, DType::float32, json::object());
    const float row[4] = {1, 2, 3, 4};
    w.append("a", row);
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  mltool::testing::write_formula_store(dir.path(), 5, 4, DType::float32);
  {
    FeatureStoreWriter w(dir.path(), 4, DType::float16, json::object());
    const float row[4] = {1, 2, 3, 4};
    w.append("a", row);
  }
  const FeatureStore s = FeatureStore::open(dir.path());
  EXPECT_EQ(s.rows(), 5u);
  EXPECT_EQ(s.dtype(), DType::float32);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 3);
}

TEST(FeatureStoreWriter, FinishReplacesAnOlderStore) {
  TempDir dir;
  mltool::testing::write_formula_store(dir.path(), 5, 4, DType::float32);
  mltool::testing::write_formula_store(dir.path(), 9, 2, DType::float16);
  const FeatureStore s = FeatureStore::open(dir.path());
  EXPECT_EQ(s.rows(), 9u);
  EXPECT_EQ(s.dims(), 2u);
}

TEST(FeatureStoreWriter, RejectsBadKeysButStaysUsable) {
  TempDir dir;
  FeatureStoreWriter w(dir.path(), 2, DType::float32, json::object(), nullptr, "test 1.0");
  const float row[2] = {1, 2};
  EXPECT_THROW(w.append("", row), InputError);
  EXPECT_THROW(w.append("a\nb", row), InputError);
  EXPECT_THROW(w.append("a\r", row), InputError);
  const std::vector<std::string> keys = {"x", "y\n"};
  const float rows[4] = {1, 2, 3, 4};
  EXPECT_THROW(w.append_rows(keys, rows), InputError);
  EXPECT_EQ(w.rows(), 0u);  // the batch was rejected as a whole
  w.append_rows({"x", "y"}, rows);
  w.append("z", row);
  w.mark_invalid(1);
  w.mark_invalid(1);
  EXPECT_THROW(w.mark_invalid(3), mltool::UsageError);
  w.finish();
  EXPECT_THROW(w.finish(), mltool::UsageError);
  EXPECT_THROW(w.append("q", row), mltool::UsageError);
  const FeatureStore s = FeatureStore::open(dir.path());
  EXPECT_EQ(s.rows(), 3u);
  EXPECT_EQ(s.invalid_rows(), std::vector<std::uint64_t>{1});
  EXPECT_EQ(s.manifest()["created_by"], "test 1.0");
  EXPECT_FALSE(s.manifest().contains("source"));
}

TEST(FeatureStoreWriter, UnwritableManifestPublishesNothing) {
  TempDir dir;
  {
    FeatureStoreWriter w(dir.path(), 2, DType::float32, {{"name", "bad \xff"}});
    const float row[2] = {1, 2};
    w.append("a", row);
    EXPECT_THROW(w.finish(), InputError);
    for (const char* name : {"features.npy", "keys.txt", "features.json"})
      EXPECT_FALSE(mltool::util::exists(dir / name)) << name;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(FeatureStoreWriter, RejectsBadArguments) {
  TempDir dir;
  EXPECT_THROW(FeatureStoreWriter(dir.path(), 0, DType::float32, json::object()),
               mltool::UsageError);
  EXPECT_THROW(FeatureStoreWriter(dir.path(), 4, DType::uint8, json::object()), mltool::UsageError);
  EXPECT_THROW(FeatureStoreWriter(dir.path(), 4, DType::float32, json::array()),
               mltool::UsageError);
  EXPECT_THROW(FeatureStoreWriter(dir.path(), 4, DType::float32, json::object(), 3),
               mltool::UsageError);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(FeatureStoreOpen, MissingPieces) {
  TempDir dir;
  EXPECT_EQ(open_error<InputError>(dir / "nope"), "D: not a directory");
  EXPECT_NE(open_error<InputError>(dir.path()).find("features.json is missing"), std::string::npos);
  mltool::testing::write_formula_store(dir.path(), 3, 2, DType::float32);
  std::filesystem::remove(dir / "keys.txt");
  EXPECT_NE(open_error<InputError>(dir.path()).find("D/keys.txt: cannot open"), std::string::npos);
}

TEST(FeatureStoreOpen, ManifestErrorsNameTheField) {
  TempDir dir;
  mltool::testing::write_formula_store(dir.path(), 3, 2, DType::float32);
  edit_manifest(dir.path(), [](json& d) { d.erase("dims"); });
  EXPECT_EQ(open_error(dir.path()), "D/features.json: /dims: required field is missing");
  edit_manifest(dir.path(), [](json& d) { d["dims"] = "2"; });
  EXPECT_EQ(open_error(dir.path()), "D/features.json: /dims: expected integer, got \"2\"");
  edit_manifest(dir.path(), [](json& d) {
    d["dims"] = 2;
    d["invalid_rows"] = {0, 3};
  });
  EXPECT_EQ(open_error(dir.path()),
            "D/features.json: /invalid_rows/1: row 3 is out of range (rows = 3)");
}

TEST(FeatureStoreOpen, MatrixMustMatchTheManifest) {
  TempDir dir;
  mltool::testing::write_formula_store(dir.path(), 3, 2, DType::float32);
  edit_manifest(dir.path(), [](json& d) { d["rows"] = 4; });
  EXPECT_EQ(
      open_error(dir.path()),
      "D/features.npy: shape is (3, 2), but D/features.json says (rows, dims) = (4, 2) [/rows]");
  edit_manifest(dir.path(), [](json& d) {
    d["rows"] = 3;
    d["dims"] = 5;
  });
  EXPECT_EQ(
      open_error(dir.path()),
      "D/features.npy: shape is (3, 2), but D/features.json says (rows, dims) = (3, 5) [/dims]");
  edit_manifest(dir.path(), [](json& d) {
    d["dims"] = 2;
    d["dtype"] = "float16";
  });
  EXPECT_EQ(
      open_error(dir.path()),
      "D/features.npy: dtype is float32 ('<f4'), but D/features.json says /dtype = \"float16\"");
  edit_manifest(dir.path(), [](json& d) { d["dtype"] = "float32"; });
  std::string npy = mltool::util::read_file(dir / "features.npy");
  mltool::util::write_file_atomic(dir / "features.npy", npy.substr(0, npy.size() - 4));
  EXPECT_EQ(open_error(dir.path()),
            "D/features.npy: byte 128: truncated: expected 24 bytes of data for shape (3, 2) "
            "float32, found 20");
}

TEST(FeatureStoreOpen, KeysMustMatchTheManifest) {
  TempDir dir;
  mltool::testing::write_formula_store(dir.path(), 3, 2, DType::float32);
  mltool::util::write_file_atomic(dir / "keys.txt", "a\nb\n");
  EXPECT_EQ(open_error(dir.path()), "D/keys.txt: has 2 keys, but D/features.json says /rows = 3");
  mltool::util::write_file_atomic(dir / "keys.txt", "a\r\nb\r\nc\r\n");
  EXPECT_EQ(open_error(dir.path()),
            "D/keys.txt: line 1: carriage return in key (CRLF line endings?)");
  mltool::util::write_file_atomic(dir / "keys.txt", "a\n\nc\n");
  EXPECT_EQ(open_error(dir.path()), "D/keys.txt: line 2: empty key");
  mltool::util::write_file_atomic(dir / "keys.txt", "a\nb\nc");  // no final newline: accepted
  EXPECT_EQ(FeatureStore::open(dir.path()).key(2), "c");
  mltool::util::write_file_atomic(dir / "keys.txt", "a\nb\na\n");
  const FeatureStore s = FeatureStore::open(dir.path());
  EXPECT_EQ(s.key(2), "a");
  try {
    s.find("a");
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir / "keys.txt: line 3: duplicate key \"a\" (first on line 1)");
  }
  EXPECT_THROW(s.find("b"), FormatError);  // reported again, not half-built
}

}  // namespace
