// The core of `mltool pack`: a feature store plus a labels table → a dataset directory of
// index-based tf.train.Example TFRecord shards (with DALI indexes) and dataset.json
// (schemas/dataset.schema.json). Records carry row indices into features.npy, never
// vectors or pixels, so one row shared by many labels is stored once.
//
// Record features, by unit (all int64 unless noted):
//   tile   index (row of features.npy), label (id in the label map), slide (bytes),
//          x, y (level-0 corner; only when coordinates are known, see below)
//   image  as tile, plus key (bytes: the tile-store key, for training on pixels)
//   bag    indices (int64 list: the rows of the bag), label, slide (bytes)
//
// Decisions (docs/formats.md should say the same when the command lands):
// - A labels key is first looked up as a tile key (keys.txt). If it is none, but some
//   keys start with "<key>/", it is a slide-level label: it applies to every row of that
//   slide. The slide of a tile key is the part before its last '/' (the key itself if
//   it has none). Anything else is a missing key.
// - tile/image: one record per distinct (row, label); a slide-level label expands to one
//   record per row. bag: one record per distinct (slide, label), holding every row that
//   label reaches in that slide (tile-level labels gather, a slide-level label brings all
//   rows), in row order. A (row, label) pair reached twice (a repeated labels row, or a
//   tile label that its slide's label repeats) makes one record; the extra ones are
//   counted in duplicate_labels.
// - Rows listed in features.json invalid_rows are never packed: a tile-level label on one
//   is counted in invalid_rows; a slide-level expansion skips them (also counted); a bag
//   left empty is dropped (counted in empty_bags).
// - Groups: the group column if given, else the slide; no group is in two splits. In bag
//   mode a slide's bags must all lie in one group (InputError otherwise).
// - The label map (records::LabelMap) is built from every label of the table, so ids do
//   not depend on which keys the store happens to hold.
// - --dedupe: rows that packed records use are hashed (and byte-compared, so a hash
//   collision can never merge different rows); a record points at the lowest-numbered
//   row with the same bytes. duplicate_rows counts rows replaced so. Bags keep their
//   length (a duplicated row appears twice in the bag's indices).
// - x, y: written iff features.json has source.tile_store naming a directory that is a
//   tile store, and every packed tile key is "<slide>/<row:06d>_<col:06d>" with that tile
//   listed in the store's meta "tiles/<slide>". Otherwise no record has them
//   (dataset.json "coordinates": false) — all or none, so a reader's parse spec holds for
//   every record.
// - Publication: everything is written into "<output>.partial-<pid>/" beside the output
//   and renamed to the output at the end, dataset.json being written last inside it. An
//   existing output is refused (UsageError) unless `overwrite`; then the old directory is
//   renamed aside, the new one renamed in, and the old one removed. A failed pack removes
//   its partial directory, so nothing appears under the output name.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/records/labels.hpp"
#include "mltool/records/split.hpp"

namespace mltool::records {

enum class PackUnit { tile, bag, image };

/// "tile", "bag", "image".
const char* to_string(PackUnit unit);
/// Parses a unit name; UsageError for anything else.
PackUnit parse_unit(const std::string& text);

/// One shard as written.
struct PackShard {
  std::string split;
  std::string file;  ///< file name inside the dataset directory
  std::uint64_t records = 0;
  std::uint64_t bytes = 0;
};

struct PackJob {
  std::string features;  ///< feature store directory
  std::string labels;    ///< labels table (.csv, .tsv, .jsonl)
  /// Key and label columns; `group` empty → the slide of each key is its group.
  LabelColumns columns;
  std::string output;  ///< dataset directory to create
  PackUnit unit = PackUnit::tile;
  std::vector<SplitSpec> splits = {{"train", 0.8}, {"val", 0.1}, {"test", 0.1}};
  std::uint32_t shards = 1;  ///< shards per split (>= 1)
  std::uint64_t seed = 0;
  bool dedupe = false;
  bool skip_missing = false;  ///< count labels keys absent from the store instead of failing
  bool overwrite = false;     ///< replace an existing output directory
  int threads = 0;            ///< shards written at once (0 = one per core)
  std::string created_by;     ///< empty: "mltool <version>"
  /// Called after each shard file is committed (inside the partial directory): progress.
  /// An exception thrown here aborts the pack like any other failure.
  std::function<void(const PackShard&)> on_shard;
};

struct PackReport {
  std::string output;                  ///< the published directory
  std::uint64_t records = 0;           ///< records written, all splits
  std::uint64_t missing_keys = 0;      ///< labels rows whose key is not in the store (skipped)
  std::uint64_t invalid_rows = 0;      ///< (row, label) pairs dropped for an invalid row
  std::uint64_t duplicate_labels = 0;  ///< (row, label) pairs reached more than once
  std::uint64_t duplicate_rows = 0;    ///< with dedupe: rows replaced by an identical earlier row
  std::uint64_t empty_bags = 0;        ///< bag unit: bags dropped for having no valid row
  bool coordinates = false;            ///< x, y written
  std::vector<PackShard> shards;       ///< every shard, split by split
  nlohmann::json manifest;             ///< dataset.json as written
};

inline constexpr const char* kDatasetManifestFile = "dataset.json";
inline constexpr const char* kDatasetFormat = "mltool.dataset";
inline constexpr int kDatasetFormatVersion = 1;

/// Packs a dataset (see the decisions above). Everything is validated before the first
/// shard is written. Throws UsageError for a bad job (no shards, bad splits, existing
/// output without overwrite), InputError for labels rows whose keys are in the store
/// neither as tile keys nor as slides ("LABELS: N labels rows name keys that are neither
/// tile keys nor slides of the feature store FEATURES: "a" (line 2), ... (skip them with
/// --skip-missing)", naming up to 5) or unreadable inputs, FormatError for malformed
/// inputs, ResourceError for I/O failures.
PackReport pack_dataset(const PackJob& job);

/// "{split}-{i:05d}-of-{n:05d}.tfrecord".
std::string shard_file_name(const std::string& split, std::uint32_t index, std::uint32_t count);

}  // namespace mltool::records
