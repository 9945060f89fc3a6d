// A packed dataset (mltool pack) as training needs it: dataset.json, and per split every
// record's label and rows, read into memory (a record is a few dozen bytes). Internal to
// lib/train.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/io/npy.hpp"
#include "mltool/records/pack.hpp"

namespace mltool::train {

/// The samples of one split, in shard order (shard by shard, records in file order).
struct SplitSamples {
  std::string name;
  std::vector<std::int64_t> labels;  ///< one per sample: the label id (0 unless classification)
  /// Regression: the target of each sample; survival: time and event of each, interleaved;
  /// multilabel: each sample's value per label (1, 0, NaN where masked), back to back.
  std::vector<float> targets;
  std::vector<std::int64_t>
      rows;  ///< tile, image: one row per sample; bag: the bags' rows back to back
  std::vector<std::int64_t> offsets;  ///< bag: sample i has rows[offsets[i], offsets[i + 1])
  std::vector<std::string> ids;       ///< bag: the slide; image: the tile key; tile: none (the row)
  std::size_t size() const { return labels.size(); }
  /// Rows of sample i (1 for tiles and images).
  std::int64_t length(std::size_t i) const {
    return offsets.empty() ? 1 : offsets[i + 1] - offsets[i];
  }
};

struct DatasetInfo {
  std::string dir;
  std::string manifest_path;
  std::string manifest_sha256;  ///< of dataset.json's bytes
  nlohmann::json manifest;
  records::PackUnit unit = records::PackUnit::tile;
  std::string features;  ///< the feature store directory
  std::int64_t rows = 0;
  std::int64_t dims = 0;
  io::DType dtype = io::DType::float32;
  std::uint64_t matrix_bytes = 0;
  std::string matrix_sha256;
  /// names[id] (classification), the label columns (multilabel); empty otherwise.
  std::vector<std::string> labels;
  records::PackTask task = records::PackTask::classification;
  std::vector<std::string> fold_splits;  ///< pack --folds: fold-0, ..., fold-{K-1}; else empty
  std::string tile_store;                ///< dataset.json's tile_store, or ""
};

/// Reads and validates dataset.json in `dir`.
DatasetInfo read_dataset_info(const std::string& dir);

/// The samples of several splits, one after the other, as one (named by them joined with '+').
SplitSamples read_splits(const DatasetInfo& dataset, const std::vector<std::string>& splits);

/// Reads every record of `split`. InputError for a split the dataset does not have (naming
/// those it has) or one without records; FormatError naming the shard and record for a
/// record without the unit's features, a label id outside the label map, a row outside the
/// feature matrix, an empty bag, or a shard whose record count differs from dataset.json.
SplitSamples read_split(const DatasetInfo& dataset, const std::string& split);

}  // namespace mltool::train
