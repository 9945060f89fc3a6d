// The core of `mltool pack`: a feature store plus a labels table → a dataset directory of
// index-based tf.train.Example TFRecord shards (with DALI indexes) and dataset.json
// (schemas/dataset.schema.json). Records carry row indices into features.npy, never
// vectors or pixels, so one row shared by many labels is stored once.
//
// What the records hold, how labels reach rows (tile- and slide-level keys, bags, duplicates,
// invalid rows, groups, the label map, --dedupe, x/y) and how the dataset is published are
// specified once, in docs/pack.md (units, labels, dedupe, publication) and docs/formats.md
// (dataset.json, record features); pack_plan.cpp and pack.cpp implement them, the record
// features through RecordCodec (record.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/records/labels.hpp"
#include "mltool/records/split.hpp"
#include "mltool/util/options.hpp"

namespace mltool::records {

enum class PackUnit { tile, bag, image };
extern const util::EnumNames<PackUnit> kPackUnits;

/// The names of PackTask (labels.hpp).
extern const util::EnumNames<PackTask> kPackTasks;

/// "classification", "regression", "survival".
const char* to_string(PackTask task);
/// Parses a task name; UsageError for anything else.
PackTask parse_task(const std::string& text);
/// The task of a manifest: dataset.json's "task" (a name), or run.json's and cv.json's (an
/// object, its "kind"). A manifest without one is classification: it was written before
/// tasks were recorded. UsageError for a name that is no task.
PackTask manifest_task(const nlohmann::json& manifest);

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
  /// Key, outcome, group and bag columns; `group` empty → the bag column's value with
  /// `bag` set, else the slide of each key, is its group.
  LabelColumns columns;
  PackTask task = PackTask::classification;
  std::string output;  ///< dataset directory to create
  PackUnit unit = PackUnit::tile;
  std::vector<SplitSpec> splits = {{"train", 0.8}, {"val", 0.1}, {"test", 0.1}};
  /// Set when `splits` was given (--split): with `folds`, `splits` are then the held-out
  /// splits (fractions summing below 1); without, there is none.
  bool splits_given = false;
  /// K >= 2: the records outside the held-out splits are divided among K folds, splits
  /// "fold-0" .. "fold-{K-1}" (docs/pack.md#folds); 0: no folds.
  std::uint32_t folds = 0;
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

/// The table of PackJob's options (lib/records/pack_options.cpp).
const util::Options<PackJob>& pack_options();

struct PackReport {
  std::string output;                  ///< the published directory
  std::uint64_t records = 0;           ///< records written, all splits
  std::uint64_t missing_keys = 0;      ///< labels rows whose key is not in the store (skipped)
  std::uint64_t invalid_rows = 0;      ///< (row, label) pairs dropped for an invalid row
  std::uint64_t duplicate_labels = 0;  ///< (row, label) pairs reached more than once
  std::uint64_t duplicate_rows = 0;    ///< with dedupe: rows replaced by an identical earlier row
  std::uint64_t empty_bags = 0;        ///< bag unit: bags dropped for having no valid row
  std::uint64_t incomplete_bags = 0;   ///< --bag-by, skip_missing: bags dropped for a missing key
  bool coordinates = false;            ///< x, y written
  std::vector<PackShard> shards;       ///< every shard, split by split
  nlohmann::json manifest;             ///< dataset.json as written
};

/// The summary `mltool pack --json` prints.
nlohmann::json to_json(const PackReport& report);

/// Multilabel: pack's summary of dataset.json `manifest`'s label_counts, one line per split
/// and one for all records: "fold-0: KRAS 5+ 6− 1?, ..." in --label-columns' order; empty
/// for a task without label counts.
std::vector<std::string> label_count_lines(const nlohmann::json& manifest);

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
