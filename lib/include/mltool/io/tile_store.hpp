// The tile store of `mltool tile`: an LMDB directory that python-lmdb reads as is.
//
//   tiles  "<slide id>/<row:06>_<col:06>" → encoded tile (JPEG or PNG), sorted by slide,
//          then row, then column
//   meta   "store"        → the settings every slide of the store was tiled with (JSON)
//          "slides/<id>"  → the slide: path, pyramid, µm/px, level read, tile geometry
//          "tiles/<id>"   → per kept tile, in key order: row, col, level-0 x, y, tissue
//          "done/<id>"    → completion marker: committed with the slide's last tiles; a
//                           slide published with tiles whose source failed lists them
//                           ("failed_tiles", tile --keep-going) and is not in "tiles/<id>"
//          "shard"        → of a `tile --shard I/N` store: I, N, the shard's slide list and
//                           whether the run over it finished (checked by --merge)
//          "mask/<id>"    → the tissue mask tiles were chosen by (TissueMask; --tissue otsu,
//                           and absent in stores written before it was kept)
//
// A coordinates store (settings' pixels false, written by `mltool extract SLIDE...`) has every
// meta record and an empty tiles database: its keys come from the "tiles/<id>" records.
//
// Only slides with a done marker are complete. A slide without one was interrupted: its
// tiles are ignored by readers and replaced by the next run (discard_incomplete).
// docs/formats.md#tile-store has the exact JSON of each record.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/io/image_codec.hpp"
#include "mltool/io/lmdb.hpp"
#include "mltool/util/options.hpp"
#include "mltool/util/output_lock.hpp"

namespace mltool::io {

/// The settings that make tiles comparable; every slide of one store shares them.
/// How tissue is found: Otsu's threshold on a thumbnail, none (every tile is kept), or a
/// segmentation model (`--tissue MODEL.pt`; slide/segmenter.hpp).
enum class TissueDetection { otsu, none, model };
extern const util::EnumNames<TissueDetection> kTissueDetections;
/// Whether Otsu tissue detection calls pen ink, black borders and out-of-slide areas
/// background (exclude; slide::ArtifactRules) or judges them by saturation alone (keep).
enum class ArtifactFilter { exclude, keep };
extern const util::EnumNames<ArtifactFilter> kArtifactFilters;

/// tile --roi: what a slide without an ROI file gets (a directory of them): refused, skipped,
/// or tiled whole.
enum class RoiMissing { refuse, skip, all };
extern const util::EnumNames<RoiMissing> kRoiMissing;
/// The --roi settings every slide of a store shares (the files are per slide).
struct RoiSettings {
  std::vector<std::string> classes;  ///< --roi-class, sorted and unique; empty: every region
  double min_roi = 0.5;              ///< smallest share of a kept tile inside the regions
  RoiMissing missing = RoiMissing::refuse;
};

struct TileSettings {
  int tile_size = 256;
  int overlap = 0;
  std::optional<double> mpp;  ///< target µm/px (exclusive with level)
  std::optional<int> level;   ///< pyramid level read as is (exclusive with mpp)
  TileEncoding encoding = TileEncoding::jpeg;
  int quality = 90;  ///< JPEG quality
  TissueDetection tissue = TissueDetection::otsu;
  double min_tissue = 0.5;  ///< keep tiles whose tissue fraction is at least this
  /// A record without "artifacts" (written before the option existed) reads as exclude.
  ArtifactFilter artifacts = ArtifactFilter::exclude;
  /// False in a coordinates store (`mltool extract SLIDE...`): every record of a tile store but
  /// no tiles; their pixels are read from the slide files the "slides" records name
  /// (slide::TilePixels). A record without "pixels" (stores written before) reads as true.
  bool pixels = true;
  /// tissue model: the segmenter, {"file": its name, "sha256": of its bytes, "contract": its
  /// mltool.json}; a store is appended to and merged only with the same sha256.
  nlohmann::json segmenter;
  /// tissue model: drop a tile whose footprint has more than this share in artifact classes.
  double max_artifact = 0.1;
  /// tile --roi: tiles kept by their share inside regions drawn in QuPath; none without
  /// --roi (a record without "roi", as every store before it, reads as none).
  std::optional<RoiSettings> roi;

  /// The "store" record (format mltool.tile-store, schemas/tile-store.schema.json).
  nlohmann::json to_json() const;
  /// Parses and validates a "store" record; FormatError naming `where` if it is invalid.
  static TileSettings from_json(const nlohmann::json& doc, const std::string& where);
  /// Throws UsageError if any setting differs, naming it, both values and `store`.
  void require_same(const TileSettings& other, const std::string& store) const;
};

/// "<slide id>/<row:06>_<col:06>".
std::string tile_key(const std::string& slide_id, std::int64_t row, std::int64_t col);

/// The slide id of tile key `key` (the text before its last '/').
std::string_view slide_of_key(std::string_view key);

/// Whether slide `a`'s tiles come before slide `b`'s in the store: key order is by "<id>/",
/// which differs from id order ("a-b/" < "a/" though "a" < "a-b").
bool before_in_key_order(const std::string& a, const std::string& b);

/// The id of a slide file: its basename without the last extension ("/a/S1.svs" → "S1").
/// InputError if that is empty or holds a control character.
std::string slide_id_for(const std::string& path);

/// A slide's tissue mask as the store keeps it (meta "mask/<id>", committed with its done
/// marker): the thumbnail-sized mask `mltool tile` kept tiles by, after small objects and
/// holes were cleaned, and its scale. The record is JSON like every meta record:
/// {"width", "height", "downsample": [x, y] (level-0 pixels per mask pixel), "encoding":
/// "png", "png": base64 of an 8-bit grey PNG, 255 tissue, 0 background}.
struct TissueMask {
  GreyImage mask;  ///< nonzero: tissue
  double downsample_x = 1;
  double downsample_y = 1;
  /// --tissue MODEL.pt: the segmenter's classes (record "classes": {"names", "tissue",
  /// "artifacts", "png"}): each pixel of `classes` is its class's index in class_names (the most
  /// frequent class of the model's pixels it covers); `mask` is then the pixels of tissue classes.
  /// Empty otherwise.
  GreyImage classes;
  std::vector<std::string> class_names, tissue_classes, artifact_classes;

  std::string to_record() const;
  /// FormatError naming `where` if the record is malformed or its PNG does not decode.
  static TissueMask from_record(const nlohmann::json& doc, const std::string& where);
};

/// The colour of a segmenter's class `name` wherever mltool draws classes (the QC pictures' tint
/// and legend, export geojson's annotations): the n-th class of `tissue` takes the n-th of green,
/// blue, cyan, olive; the n-th of `artifacts` the n-th of red, orange, purple, pink, brown, grey
/// (then again); any other class grey (docs/tile.md#tissue-found-by-a-model).
const std::uint8_t* class_colour(const std::string& name, const std::vector<std::string>& tissue,
                                 const std::vector<std::string>& artifacts);

/// An open tile store.
class TileStore {
 public:
  /// Opens (writable: creating) the LMDB directory `path` with its two databases. Writable,
  /// it also takes the store's output lock (util::OutputLock): one writer per store, a second
  /// is a ResourceError naming the process that holds it.
  static TileStore open(const std::string& path, bool writable);
  /// Whether `path` is an LMDB directory (holds data.mdb), as a tile store is; nothing is
  /// opened.
  static bool is_store(const std::string& path);

  const std::string& path() const { return env_.path(); }
  lmdb::Env& env() { return env_; }
  lmdb::Dbi tiles() const { return tiles_; }
  lmdb::Dbi meta() const { return meta_; }

  /// The store's settings, or nothing for a new store (or one no slide was finished in).
  std::optional<TileSettings> settings() const;
  /// Checks `settings` equal the recorded ones; in a store without settings they are recorded
  /// with the first slide this writer finishes (SlideWriter::commit, merge_store), so a run that
  /// finished no slide — refused, failed or killed first — leaves nothing that refuses a
  /// corrected rerun.
  void adopt_settings(const TileSettings& settings);
  /// A store-wide meta record ("store", "shard"), parsed; nothing if absent. FormatError if it
  /// is not JSON.
  std::optional<nlohmann::json> store_record(const std::string& key) const;
  /// Records store-wide meta `key` with the first slide this writer finishes, as the settings
  /// are (a later call for the same key replaces the pending text).
  void adopt_record(const std::string& key, std::string text);
  /// Writes store-wide meta `key` now, in its own transaction.
  void put_store_record(const std::string& key, const std::string& text);
  /// In a write transaction that finishes a slide: the adopted records (settings, shard).
  void put_pending_records(lmdb::Txn& txn);

  /// Ids of complete slides, sorted.
  std::vector<std::string> completed_slides() const;
  bool is_complete(const std::string& id) const;
  /// Ids of the complete slides published without tiles whose source failed (their done
  /// marker lists "failed_tiles"), sorted.
  std::vector<std::string> incomplete_slides() const;
  /// The tile keys of every complete slide, in key order (the store's order): in a coordinates
  /// store, those of the slides' "tiles" records. Throws FormatError naming the slide if its
  /// tile count differs from its done marker.
  std::vector<std::string> complete_tile_keys() const;
  /// A meta record ("slides", "tiles" or "done") of slide `id`, or nothing.
  std::optional<nlohmann::json> record(const std::string& kind, const std::string& id) const;
  /// The tissue mask of slide `id`, or nothing (no "mask" record: --tissue none, or a store
  /// written before masks were kept).
  std::optional<TissueMask> tissue_mask(const std::string& id) const;
  /// Deletes the tiles and records of slide `id` unless it is complete; returns the number
  /// of tiles deleted.
  std::uint64_t discard_incomplete(const std::string& id);
  /// Deletes every tile and record (tile --overwrite): an empty store, still locked by this
  /// writer.
  void clear();

  /// A consistent read view of the tiles (one read transaction), for one thread at a time.
  class Snapshot {
   public:
    /// The encoded tile `key`, or nothing; the view stays valid while the snapshot lives.
    std::optional<std::string_view> find(const std::string& key) const;

   private:
    friend class TileStore;
    Snapshot(lmdb::Txn txn, lmdb::Dbi tiles) : txn_(std::move(txn)), tiles_(tiles) {}
    lmdb::Txn txn_;
    lmdb::Dbi tiles_;
  };
  Snapshot snapshot() const;

  /// Decodes tile `key` of this store, as `find` gave it, into `out`: FormatError "STORE: tile
  /// 'KEY': ..." when it is missing, undecodable, or not `tile_size` square. Needs no
  /// transaction, so any thread may decode what a snapshot found.
  void decode_tile(const std::string& key, const std::optional<std::string_view>& encoded,
                   int tile_size, RgbImage& out) const;

  /// Writes one slide: its "slides" record now, then its tiles in transactions of at most
  /// `commit_every` puts, then commit() writes the last tiles with its "tiles" record and its
  /// "done" marker in one transaction — a slide is complete exactly when its marker is there.
  class SlideWriter {
   public:
    /// Buffers tile `key` (a tile_key of this slide); commits a batch when it is full.
    void put_tile(std::string_view key, std::string_view encoded) { batch_.put(key, encoded); }
    /// Adds meta record "<kind>/<id>" (e.g. "mask") to what commit() writes with the marker.
    void put_record(const std::string& kind, std::string text) {
      records_.emplace_back(kind, std::move(text));
    }
    /// Commits the pending tiles, the tiles record and the done marker together, with the
    /// slide record rewritten as `slide_record` (what tiling learnt: the reader that read it).
    void commit(const std::string& slide_record, const std::string& tiles_record,
                const std::string& done_record);
    /// Drops the pending tiles (after an error); what was committed stays until
    /// discard_incomplete removes it.
    void drop();

   private:
    friend class TileStore;
    SlideWriter(TileStore& store, std::string id, lmdb::BatchOptions options);
    TileStore* store_;
    std::string id_;
    lmdb::BatchOptions options_;
    lmdb::BatchWriter batch_;
    std::vector<std::pair<std::string, std::string>> records_;  // put_record's, until commit
  };
  SlideWriter write_slide(const std::string& id, const std::string& slide_record,
                          std::size_t commit_every);
  /// Adds tiles to complete slide `id` (the tiles its done marker lists as failed): nothing
  /// commits before commit(), which may be called again after more tiles, each time writing
  /// the tiles put since with the slide's records, so the slide stays complete throughout.
  SlideWriter add_to_slide(const std::string& id);

  static std::string meta_key(const std::string& kind, const std::string& id) {
    return kind + "/" + id;
  }

 private:
  TileStore(lmdb::Env env) : env_(std::move(env)) {}
  std::shared_ptr<util::OutputLock> lock_;  // writable stores only; taken before the env opens
  lmdb::Env env_;
  lmdb::Dbi tiles_;
  lmdb::Dbi meta_;
  // adopt_settings' and adopt_record's, on a store without them: recorded with a slide
  std::vector<std::pair<std::string, std::string>> pending_;
};

/// What merging one store contributed.
struct MergeReport {
  std::string path;
  std::int64_t slides = 0;   ///< complete slides copied
  std::int64_t skipped = 0;  ///< complete slides already in the output (same quickhash)
  std::int64_t tiles = 0;    ///< tiles copied
};

/// Copies every complete slide of the store at `input` into `out`, each slide's tiles and
/// records committing with its done marker. The settings must match (UsageError); a slide
/// id present in `out` with another quickhash is an InputError.
MergeReport merge_store(TileStore& out, const std::string& input, std::size_t commit_every = 2048);

}  // namespace mltool::io
