// Tests of the tile store of `mltool tile` (lib/io/tile_store.cpp): the key format and
// its sort order, slide ids from paths, the "store" settings record, and the completion
// bookkeeping (done markers, discarding an interrupted slide).
#include "mltool/io/tile_store.hpp"
#include "mltool/io/slide_id.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mltool/util/error.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

namespace lmdb = mltool::io::lmdb;
using mltool::Error;
using mltool::FormatError;
using mltool::InputError;
using mltool::UsageError;
using mltool::io::merge_store;
using mltool::io::slide_id_for;
using mltool::io::tile_key;
using mltool::io::TileEncoding;
using mltool::io::TileSettings;
using mltool::io::TileStore;
using mltool::io::TissueMask;
using mltool::testing::contains;
using mltool::testing::error_of;

namespace {

// Settings that differ from the defaults in every field.
TileSettings unusual_settings() {
  TileSettings s;
  s.tile_size = 512;
  s.overlap = 16;
  s.mpp = 0.5;
  s.level.reset();
  s.encoding = TileEncoding::png;
  s.quality = 75;
  s.tissue = mltool::io::TissueDetection::none;
  s.min_tissue = 0.25;
  s.artifacts = mltool::io::ArtifactFilter::keep;
  return s;
}

void expect_same(const TileSettings& a, const TileSettings& b) {
  EXPECT_EQ(a.tile_size, b.tile_size);
  EXPECT_EQ(a.overlap, b.overlap);
  EXPECT_EQ(a.mpp, b.mpp);
  EXPECT_EQ(a.level, b.level);
  EXPECT_EQ(a.encoding, b.encoding);
  EXPECT_EQ(a.quality, b.quality);
  EXPECT_EQ(a.tissue, b.tissue);
  EXPECT_EQ(a.min_tissue, b.min_tissue);
  EXPECT_EQ(a.artifacts, b.artifacts);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// tile_key

TEST(TileStoreKey, Format) {
  EXPECT_EQ(tile_key("S1", 0, 0), "S1/000000_000000");
  EXPECT_EQ(tile_key("S1", 3, 12), "S1/000003_000012");
  EXPECT_EQ(tile_key("slide.ome", 123456, 7), "slide.ome/123456_000007");
}

TEST(TileStoreKey, KeysOfOneSlideAreContiguousAndSortByRowThenCol) {
  // Ids that share a prefix with "a" and sort on either side of "a/": '-' < '/' < '0'.
  const std::vector<std::string> ids = {"a", "a-b", "a0", "a.b", "ab", "b", "A"};
  struct Tile {
    std::string id;
    std::int64_t row, col;
  };
  std::vector<Tile> tiles;
  std::map<std::string, Tile> by_key;
  for (const auto& id : ids)
    for (std::int64_t row : {0, 1, 9, 10, 11, 100, 999})
      for (std::int64_t col : {0, 2, 10, 99, 100, 12345}) {
        const Tile t{id, row, col};
        ASSERT_TRUE(by_key.emplace(tile_key(id, row, col), t).second) << "duplicate key";
      }
  // std::map orders keys bytewise, as LMDB's default comparator does.
  std::map<std::string, int> first_seen, last_seen;
  int i = 0;
  const Tile* previous = nullptr;
  for (const auto& [key, tile] : by_key) {
    if (!first_seen.count(tile.id)) first_seen[tile.id] = i;
    last_seen[tile.id] = i;
    if (previous && previous->id == tile.id) {
      const bool ordered =
          previous->row < tile.row || (previous->row == tile.row && previous->col < tile.col);
      EXPECT_TRUE(ordered) << key << " after "
                           << tile_key(previous->id, previous->row, previous->col);
    }
    previous = &tile;
    ++i;
  }
  const int per_slide = 7 * 6;
  for (const auto& id : ids)
    EXPECT_EQ(last_seen[id] - first_seen[id] + 1, per_slide) << "slide " << id;
}

// ---------------------------------------------------------------------------------------
// slide_id_for

TEST(TileStoreSlideId, BasenameWithoutLastExtension) {
  EXPECT_EQ(slide_id_for("/a/b/S1.svs"), "S1");
  EXPECT_EQ(slide_id_for("x.ome.tiff"), "x.ome");
  EXPECT_EQ(slide_id_for("relative/dir/no_extension"), "no_extension");
  EXPECT_EQ(slide_id_for("plain"), "plain");
  EXPECT_EQ(slide_id_for("/data/slides/S2.mrxs/"), "S2");
  EXPECT_EQ(slide_id_for("/data/slides/S3.ndpi//"), "S3");
  EXPECT_EQ(slide_id_for("dir.with.dots/S4"), "S4");
  EXPECT_EQ(slide_id_for("with space.svs"), "with space");
}

TEST(TileStoreSlideId, RejectsControlCharactersAndEmptyIds) {
  for (const std::string& path : {std::string("bad\nname.svs"), std::string("/d/tab\there.tif"),
                                  std::string("del\x7f.svs"), std::string("/d/esc\x1b.svs")}) {
    const std::string msg = error_of<InputError>([&] { slide_id_for(path); });
    EXPECT_TRUE(contains(msg, "control character")) << msg;
  }
  for (const std::string path : {".", "..", "/", "/a/b/.", ""}) {
    EXPECT_THROW(slide_id_for(path), InputError) << "'" << path << "'";
  }
  const std::string msg = error_of<InputError>([] { slide_id_for("/a/b/.."); });
  EXPECT_TRUE(contains(msg, "/a/b/..")) << msg;
  // A DICOMweb series UID of dots alone is no file name either: the URL given is refused as
  // no series URL (UID grammar), a usage error like any malformed URL.
  EXPECT_EQ(slide_id_for("https://pacs/dicom-web/studies/1.2/series/1.2.3"), "1.2.3");
  EXPECT_THROW(slide_id_for("https://pacs/dicom-web/studies/1.2/series/.."), UsageError);
}

// ---------------------------------------------------------------------------------------
// TileSettings

TEST(TileStoreSettings, JsonRoundTrip) {
  const TileSettings mpp = unusual_settings();
  const nlohmann::json doc = mpp.to_json();
  EXPECT_EQ(doc.at("format"), "mltool.tile-store");
  EXPECT_EQ(doc.at("format_version"), 1);
  EXPECT_EQ(doc.at("tile_size"), 512);
  EXPECT_TRUE(doc.at("level").is_null());
  EXPECT_EQ(doc.at("mpp"), 0.5);
  expect_same(TileSettings::from_json(doc, "doc"), mpp);
  // Through text, as the store keeps it.
  expect_same(TileSettings::from_json(nlohmann::json::parse(doc.dump()), "doc"), mpp);

  TileSettings level;
  level.mpp.reset();
  level.level = 2;
  const nlohmann::json level_doc = level.to_json();
  EXPECT_TRUE(level_doc.at("mpp").is_null());
  EXPECT_EQ(level_doc.at("level"), 2);
  const TileSettings back = TileSettings::from_json(level_doc, "doc");
  expect_same(back, level);
  EXPECT_FALSE(back.mpp.has_value());
  EXPECT_EQ(back.level, 2);
}

// Stores written before --artifacts existed have no "artifacts": they read as exclude (the
// default, which also calls dark pixels background as those stores did), so a default run
// still appends to them.
TEST(TileStoreSettings, RecordWithoutArtifactsReadsAsExclude) {
  nlohmann::json old = unusual_settings().to_json();
  old.erase("artifacts");
  const TileSettings back = TileSettings::from_json(old, "old");
  EXPECT_EQ(back.artifacts, mltool::io::ArtifactFilter::exclude);
  TileSettings now = unusual_settings();
  now.artifacts = mltool::io::ArtifactFilter::exclude;
  EXPECT_NO_THROW(back.require_same(now, "old.lmdb"));
}

TEST(TileStoreSettings, FromJsonRejectsInvalidRecordsNamingThePlace) {
  const std::string where = "/stores/t.lmdb: meta 'store'";
  const nlohmann::json good = unusual_settings().to_json();
  struct Case {
    const char* what;
    nlohmann::json doc;
    const char* names;  // a part of the message that points at the problem
  };
  // `good` with `field` set to `value`.
  const auto with = [&](const char* field, nlohmann::json value) {
    auto d = good;
    d[field] = std::move(value);
    return d;
  };
  auto without_tissue = good;
  without_tissue.erase("tissue");
  const std::vector<Case> cases = {
      {"tile_size 0", with("tile_size", 0), "/tile_size"},
      {"unknown encoding", with("encoding", "webp"), "/encoding"},
      {"quality 101", with("quality", 101), "/quality"},
      {"min_tissue 1.5", with("min_tissue", 1.5), "/min_tissue"},
      {"mpp as a string", with("mpp", "0.5"), "/mpp"},
      {"missing tissue", without_tissue, "/tissue"},
      {"other format", with("format", "mltool.features"), "/format"},
      {"unknown property", with("extra", 1), "/extra"},
      {"unknown artifacts", with("artifacts", "drop"), "/artifacts"},
      {"not an object", nlohmann::json::array({1, 2}), "(root)"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of<FormatError>([&] { TileSettings::from_json(c.doc, where); });
    EXPECT_TRUE(contains(msg, where)) << c.what << ": " << msg;
    EXPECT_TRUE(contains(msg, c.names)) << c.what << ": " << msg;
  }
}

TEST(TileStoreSettings, RequireSameNamesTheSettingAndBothValues) {
  const TileSettings a = unusual_settings();
  EXPECT_NO_THROW(a.require_same(unusual_settings(), "s.lmdb"));

  TileSettings b = a;
  b.quality = 80;
  std::string msg = error_of<UsageError>([&] { a.require_same(b, "/x/s.lmdb"); });
  EXPECT_TRUE(contains(msg, "/x/s.lmdb")) << msg;
  EXPECT_TRUE(contains(msg, "quality 75")) << msg;
  EXPECT_TRUE(contains(msg, "80")) << msg;

  b = a;
  b.mpp.reset();
  msg = error_of<UsageError>([&] { a.require_same(b, "s.lmdb"); });
  EXPECT_TRUE(contains(msg, "mpp 0.5")) << msg;
  EXPECT_TRUE(contains(msg, "not none")) << msg;

  // Settings that differ in several fields: one of them is named, with both its values.
  b = a;
  b.mpp.reset();
  b.level = 1;
  msg = error_of<UsageError>([&] { a.require_same(b, "s.lmdb"); });
  EXPECT_TRUE(contains(msg, "mpp 0.5, not none") || contains(msg, "level none, not 1")) << msg;

  b = a;
  b.encoding = TileEncoding::jpeg;
  msg = error_of<UsageError>([&] { a.require_same(b, "s.lmdb"); });
  EXPECT_TRUE(contains(msg, "encoding")) << msg;
  EXPECT_TRUE(contains(msg, "png")) << msg;
  EXPECT_TRUE(contains(msg, "jpeg")) << msg;

  b = a;
  b.min_tissue = 0.5;
  msg = error_of<UsageError>([&] { a.require_same(b, "s.lmdb"); });
  EXPECT_TRUE(contains(msg, "min_tissue")) << msg;
  EXPECT_TRUE(contains(msg, "0.25")) << msg;
  EXPECT_TRUE(contains(msg, "0.5")) << msg;

  b = a;
  b.artifacts = mltool::io::ArtifactFilter::exclude;
  msg = error_of<UsageError>([&] { a.require_same(b, "s.lmdb"); });
  EXPECT_TRUE(contains(msg, "artifacts \"keep\", not \"exclude\"")) << msg;

  b = a;
  b.overlap = 0;
  msg = error_of<UsageError>([&] { a.require_same(b, "s.lmdb"); });
  EXPECT_TRUE(contains(msg, "overlap 16")) << msg;
  EXPECT_TRUE(contains(msg, "0")) << msg;
}

// ---------------------------------------------------------------------------------------
// TileStore

namespace {

class TileStoreTest : public ::testing::Test {
 protected:
  mltool::testing::TempDir tmp_;
  std::string path_ = tmp_ / "tiles.lmdb";

  static void put_tiles(TileStore& store, const std::string& id, int rows, int cols) {
    store.env().write([&](lmdb::Txn& txn) {
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) txn.put(store.tiles(), tile_key(id, r, c), "jpeg:" + id);
    });
  }
  static void put_meta(TileStore& store, const std::string& key, const std::string& value) {
    store.env().write([&](lmdb::Txn& txn) { txn.put(store.meta(), key, value); });
  }
  static std::uint64_t count_tiles(TileStore& store, const std::string& id) {
    auto txn = store.env().begin_read();
    std::uint64_t n = 0;
    for (const auto& e : txn.prefix(store.tiles(), id + "/")) {
      (void)e;
      ++n;
    }
    return n;
  }
  static bool has_meta(TileStore& store, const std::string& key) {
    auto txn = store.env().begin_read();
    return txn.get(store.meta(), key).has_value();
  }
};

}  // namespace

// Finishes slide `id` (one tile) in `store`.
void finish_slide(TileStore& store, const std::string& id) {
  auto writer = store.write_slide(id, "{}", 16);
  writer.put_tile(id + "/000000_000000", "jpeg");
  writer.commit("{\"id\": \"" + id + "\"}", R"({"row": [0]})", R"({"tiles": 1})");
}

TEST_F(TileStoreTest, NewStoreHasNoSettingsAndAdoptRecordsThemWithTheFirstSlide) {
  {
    TileStore store = TileStore::open(path_, true);
    EXPECT_EQ(store.path(), path_);
    EXPECT_FALSE(store.settings().has_value());
    EXPECT_TRUE(store.completed_slides().empty());
    store.adopt_settings(unusual_settings());
    // Not yet: a run that finishes no slide must leave nothing a corrected run trips on.
    EXPECT_FALSE(store.settings().has_value());
    finish_slide(store, "S1");
    ASSERT_TRUE(store.settings().has_value());
    expect_same(*store.settings(), unusual_settings());
    // Adopting the same settings again is fine.
    EXPECT_NO_THROW(store.adopt_settings(unusual_settings()));
  }
  // Persisted: a read-only open sees them.
  TileStore again = TileStore::open(path_, false);
  ASSERT_TRUE(again.settings().has_value());
  expect_same(*again.settings(), unusual_settings());
}

TEST_F(TileStoreTest, AdoptingOtherSettingsThrowsAndLeavesTheRecord) {
  TileStore store = TileStore::open(path_, true);
  store.adopt_settings(unusual_settings());
  finish_slide(store, "S1");
  std::string before;
  {
    auto txn = store.env().begin_read();
    before = std::string(txn.at(store.meta(), "store"));
  }
  TileSettings other = unusual_settings();
  other.tile_size = 224;
  const std::string msg = error_of<UsageError>([&] { store.adopt_settings(other); });
  EXPECT_TRUE(contains(msg, path_)) << msg;
  EXPECT_TRUE(contains(msg, "tile_size 512")) << msg;
  EXPECT_TRUE(contains(msg, "224")) << msg;
  auto txn = store.env().begin_read();
  EXPECT_EQ(std::string(txn.at(store.meta(), "store")), before);
  txn.abort();
  EXPECT_EQ(store.settings()->tile_size, 512);
}

TEST_F(TileStoreTest, InvalidStoreRecordIsAFormatErrorNamingTheStore) {
  TileStore store = TileStore::open(path_, true);
  put_meta(store, "store", "{not json");
  std::string msg = error_of<FormatError>([&] { store.settings(); });
  EXPECT_TRUE(contains(msg, path_)) << msg;
  EXPECT_TRUE(contains(msg, "store")) << msg;

  auto doc = unusual_settings().to_json();
  doc["overlap"] = -1;
  put_meta(store, "store", doc.dump());
  msg = error_of<FormatError>([&] { store.settings(); });
  EXPECT_TRUE(contains(msg, path_)) << msg;
  EXPECT_TRUE(contains(msg, "overlap")) << msg;
}

TEST_F(TileStoreTest, CompletedSlidesIsCompleteAndRecord) {
  TileStore store = TileStore::open(path_, true);
  for (const std::string id : {"zz", "a", "a-b", "m"})
    put_meta(store, TileStore::meta_key("done", id), "{}");
  put_meta(store, TileStore::meta_key("slides", "m"), R"({"path": "/d/m.svs", "levels": 3})");
  put_meta(store, TileStore::meta_key("slides", "q"), R"({"path": "/d/q.svs"})");  // not done
  put_meta(store, TileStore::meta_key("tiles", "bad"), "[1, 2");
  // Keys next to the done/ range must not leak into it.
  put_meta(store, "done", "x");
  put_meta(store, "donf/x", "x");

  EXPECT_EQ(store.completed_slides(), (std::vector<std::string>{"a", "a-b", "m", "zz"}));
  EXPECT_TRUE(store.is_complete("a"));
  EXPECT_TRUE(store.is_complete("m"));
  EXPECT_FALSE(store.is_complete("q"));
  EXPECT_FALSE(store.is_complete("z"));

  const auto rec = store.record("slides", "m");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->at("path"), "/d/m.svs");
  EXPECT_EQ(rec->at("levels"), 3);
  EXPECT_FALSE(store.record("slides", "zz").has_value());
  EXPECT_FALSE(store.record("tiles", "m").has_value());
  const std::string msg = error_of<FormatError>([&] { store.record("tiles", "bad"); });
  EXPECT_TRUE(contains(msg, path_)) << msg;
  EXPECT_TRUE(contains(msg, "tiles/bad")) << msg;
}

TEST(TileStoreSlideId, CheckRefusesWhatSlideIdForNeverMakes) {
  mltool::io::check_slide_id("S1 #?%<\"'", "/s/t.lmdb", "done/S1");  // a file name may hold these
  for (const std::string id :
       {std::string("../../x"), std::string("a/b"), std::string(".."), std::string("."),
        std::string(), std::string("x\0y", 3), std::string("x\ny")}) {
    const std::string msg =
        error_of<FormatError>([&] { mltool::io::check_slide_id(id, "/s/t.lmdb", "done/" + id); });
    EXPECT_TRUE(contains(msg, "/s/t.lmdb") && contains(msg, "not written by mltool")) << msg;
  }
  const std::string msg = error_of<FormatError>(
      [] { mltool::io::check_slide_id("../../x", "/s/t.lmdb", "done/../../x"); });
  EXPECT_TRUE(contains(msg, "\"done/../../x\"") && contains(msg, "holds '/'")) << msg;
}

TEST_F(TileStoreTest, CraftedSlideIdsAreRefusedOnEveryRead) {
  {
    TileStore store = TileStore::open(path_, true);
    finish_slide(store, "S1");
    put_meta(store, TileStore::meta_key("done", "../../x"), R"({"failed_tiles": [1]})");
  }
  TileStore store = TileStore::open(path_, false);
  for (const auto& read : std::vector<std::function<void()>>{[&] { store.completed_slides(); },
                                                             [&] { store.incomplete_slides(); },
                                                             [&] { store.complete_tile_keys(); }}) {
    const std::string msg = error_of<FormatError>(read);
    EXPECT_TRUE(contains(msg, path_) && contains(msg, "\"done/../../x\"")) << msg;
  }
}

TEST_F(TileStoreTest, ATileKeyWithAnotherSlashIsNoTileOfItsSlide) {
  TileStore store = TileStore::open(path_, true);
  auto writer = store.write_slide("S1", "{}", 16);
  writer.put_tile("S1/../../x/000000_000000", "jpeg");
  writer.commit(R"({"id": "S1"})", R"({"row": [0]})", R"({"tiles": 1})");
  const std::string msg = error_of<FormatError>([&] { store.complete_tile_keys(); });
  EXPECT_TRUE(contains(msg, "\"S1/../../x/000000_000000\"")) << msg;
}

TEST_F(TileStoreTest, DiscardIncompleteRemovesOnlyThatSlide) {
  TileStore store = TileStore::open(path_, true);
  put_tiles(store, "a", 20, 17);  // 340 tiles, interrupted
  put_tiles(store, "a-b", 3, 4);  // neighbours in key order, on both sides of "a/"
  put_tiles(store, "a0", 2, 5);
  put_tiles(store, "b", 4, 4);  // complete
  for (const std::string id : {"a", "a0", "b"}) {
    put_meta(store, TileStore::meta_key("slides", id), R"({"id": ")" + id + R"("})");
    put_meta(store, TileStore::meta_key("tiles", id), "[]");
  }
  put_meta(store, TileStore::meta_key("done", "b"), "{}");

  EXPECT_EQ(store.discard_incomplete("a"), 340u);
  EXPECT_EQ(count_tiles(store, "a"), 0u);
  EXPECT_FALSE(has_meta(store, "slides/a"));
  EXPECT_FALSE(has_meta(store, "tiles/a"));
  EXPECT_EQ(count_tiles(store, "a-b"), 12u);
  EXPECT_EQ(count_tiles(store, "a0"), 10u);
  EXPECT_EQ(count_tiles(store, "b"), 16u);
  EXPECT_TRUE(has_meta(store, "slides/a0"));
  EXPECT_TRUE(has_meta(store, "tiles/a0"));
  {
    auto txn = store.env().begin_read();
    EXPECT_EQ(txn.stat(store.tiles()).entries, 12u + 10u + 16u);
  }

  // A complete slide is left as it is.
  EXPECT_EQ(store.discard_incomplete("b"), 0u);
  EXPECT_EQ(count_tiles(store, "b"), 16u);
  EXPECT_TRUE(has_meta(store, "slides/b"));
  EXPECT_TRUE(has_meta(store, "tiles/b"));
  EXPECT_TRUE(store.is_complete("b"));

  // Records without tiles go too; a second discard finds nothing.
  EXPECT_EQ(store.discard_incomplete("a0"), 10u);
  EXPECT_FALSE(has_meta(store, "slides/a0"));
  EXPECT_EQ(store.discard_incomplete("a0"), 0u);
  EXPECT_EQ(count_tiles(store, "a-b"), 12u);
  put_meta(store, TileStore::meta_key("slides", "c"), "{}");
  EXPECT_EQ(store.discard_incomplete("c"), 0u);
  EXPECT_FALSE(has_meta(store, "slides/c"));
}

TEST_F(TileStoreTest, ReadOnlyOpenOfAMissingPathNamesIt) {
  const std::string missing = tmp_ / "nope.lmdb";
  const std::string msg = error_of<Error>([&] { TileStore::open(missing, false); });
  EXPECT_TRUE(contains(msg, missing)) << msg;
  EXPECT_FALSE(mltool::util::exists(missing)) << "a read-only open must not create the store";
}

TEST_F(TileStoreTest, ReadOnlyStoreWithoutTileDatabasesIsAnError) {
  // An LMDB directory that is not a tile store (no "tiles"/"meta" databases).
  {
    lmdb::Env::open(path_).write([](lmdb::Txn&) {});
  }
  const std::string msg = error_of<Error>([&] { TileStore::open(path_, false); });
  EXPECT_TRUE(contains(msg, path_)) << msg;
}

// ---------------------------------------------------------------------------------------
// The "mask/<id>" record

TEST(TileStoreMask, RecordRoundTripsThroughJsonAndPng) {
  TissueMask m;
  m.mask.width = 7, m.mask.height = 3;
  m.mask.pixels = {0,   255, 255, 0, 0, 0, 255,  // 7 × 3
                   255, 255, 255, 0, 0, 0, 0,   0, 0, 255, 0, 0, 255, 255};
  m.downsample_x = 31.5, m.downsample_y = 32.25;
  const auto doc = nlohmann::json::parse(m.to_record());
  EXPECT_EQ(doc.at("width"), 7);
  EXPECT_EQ(doc.at("height"), 3);
  EXPECT_EQ(doc.at("encoding"), "png");
  const TissueMask back = TissueMask::from_record(doc, "here");
  EXPECT_EQ(back.mask.width, 7);
  EXPECT_EQ(back.mask.height, 3);
  EXPECT_EQ(back.mask.pixels, m.mask.pixels);
  EXPECT_EQ(back.downsample_x, 31.5);
  EXPECT_EQ(back.downsample_y, 32.25);
}

TEST(TileStoreMask, MalformedRecordsAreFormatErrorsNamingThePlace) {
  TissueMask m;
  m.mask.width = 2, m.mask.height = 2;
  m.mask.pixels = {0, 255, 255, 0};
  const auto good = nlohmann::json::parse(m.to_record());
  auto expect_bad = [](nlohmann::json doc, const std::string& what) {
    const std::string msg =
        error_of<FormatError>([&] { TissueMask::from_record(doc, "s.lmdb: meta 'mask/S1'"); });
    EXPECT_TRUE(contains(msg, "mask/S1")) << msg;
    EXPECT_TRUE(contains(msg, what)) << msg;
  };
  auto doc = good;
  doc["png"] = "not base64!";
  expect_bad(doc, "base64");
  doc = good;
  doc["png"] = "AAAA";
  expect_bad(doc, "PNG");
  doc = good;
  doc["width"] = 3;
  expect_bad(doc, "2x2");
  doc = good;
  doc["downsample"] = {0, 1};
  expect_bad(doc, "downsample");
  doc = good;
  doc.erase("encoding");
  expect_bad(doc, "encoding");
}

TEST_F(TileStoreTest, PutRecordCommitsWithTheMarkerAndDiscardOrMergeHandlesIt) {
  TissueMask m;
  m.mask.width = 2, m.mask.height = 1;
  m.mask.pixels = {255, 0};
  const std::string record = m.to_record();
  {
    TileStore store = TileStore::open(path_, true);
    store.adopt_settings(unusual_settings());
    auto writer = store.write_slide("S1", "{}", 16);
    writer.put_tile(tile_key("S1", 0, 0), "jpeg");
    writer.put_record("mask", record);
    EXPECT_FALSE(has_meta(store, "mask/S1"));  // not before the marker
    writer.commit("{\"id\": \"S1\"}", R"({"row": [0]})", R"({"tiles": 1})");
    EXPECT_TRUE(has_meta(store, "mask/S1"));
    ASSERT_TRUE(store.tissue_mask("S1").has_value());
    EXPECT_EQ(store.tissue_mask("S1")->mask.pixels, m.mask.pixels);
    EXPECT_FALSE(store.tissue_mask("S2").has_value());
    // An interrupted slide's mask goes with its other records.
    put_meta(store, "slides/S2", "{}");
    put_meta(store, "mask/S2", record);
    store.discard_incomplete("S2");
    EXPECT_FALSE(has_meta(store, "mask/S2"));
  }
  const std::string merged = tmp_ / "merged.lmdb";
  TileStore out = TileStore::open(merged, true);
  merge_store(out, path_);
  ASSERT_TRUE(out.tissue_mask("S1").has_value());
  EXPECT_EQ(out.tissue_mask("S1")->mask.pixels, m.mask.pixels);
}

TEST_F(TileStoreTest, AddToSlideCommitsTilesOnlyWithTheRecordsAndKeepsTheSlideComplete) {
  TileStore store = TileStore::open(path_, true);
  store.adopt_settings(unusual_settings());
  auto first = store.write_slide("S1", "{}", 16);
  first.put_tile(tile_key("S1", 0, 0), "jpeg");
  first.commit("{}", R"({"row": [0], "col": [0]})",
               R"({"tiles": 1, "failed_tiles": [{"row": 0, "col": 1}, {"row": 0, "col": 2}]})");
  EXPECT_EQ(store.complete_tile_keys().size(), 1u);

  // Tiles added to a complete slide land only with its rewritten records, however many.
  auto more = store.add_to_slide("S1");
  for (int i = 0; i < 300; ++i) more.put_tile(tile_key("S1", 0, 1), "jpeg 2");
  EXPECT_EQ(count_tiles(store, "S1"), 1u);
  EXPECT_EQ(store.complete_tile_keys().size(), 1u);
  more.commit("{}", R"({"row": [0, 0], "col": [0, 1]})",
              R"({"tiles": 2, "failed_tiles": [{"row": 0, "col": 2}]})");
  EXPECT_EQ(store.complete_tile_keys().size(), 2u);
  more.put_tile(tile_key("S1", 0, 2), "jpeg 3");
  more.drop();  // a failed run: what was committed stays, complete
  EXPECT_EQ(store.complete_tile_keys().size(), 2u);
  more.put_tile(tile_key("S1", 0, 2), "jpeg 3");
  more.commit("{}", R"({"row": [0, 0, 0], "col": [0, 1, 2]})", R"({"tiles": 3})");
  EXPECT_EQ(
      store.complete_tile_keys(),
      (std::vector<std::string>{tile_key("S1", 0, 0), tile_key("S1", 0, 1), tile_key("S1", 0, 2)}));
  EXPECT_FALSE(store.record("done", "S1")->contains("failed_tiles"));
}
