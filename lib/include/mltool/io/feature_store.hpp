// The feature store: a directory holding features.npy (rows x dims, float32 or
// float16, C order, numpy-readable), keys.txt (line i = tile key of row i) and
// features.json (schemas/features.schema.json). features.json is written last
// and is the commit point: a directory without it is not a store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mltool/io/npy.hpp"
#include "mltool/util/file.hpp"

namespace mltool::io {

inline constexpr const char* kFeaturesManifestFile = "features.json";
inline constexpr const char* kFeaturesMatrixFile = "features.npy";
inline constexpr const char* kFeaturesKeysFile = "keys.txt";
inline constexpr const char* kFeaturesFormat = "mltool.features";
/// The features.json format_version this build writes and the newest it reads.
inline constexpr int kFeaturesFormatVersion = 1;

/// Throws InputError "<where>: ..." unless `key` can be a keys.txt line: not
/// empty, no '\n' or '\r'.
void check_feature_key(std::string_view key, const std::string& where);

/// Writes a feature store row by row with bounded memory: rows stream into a
/// temporary features.npy, keys into a temporary keys.txt. Nothing is published
/// until finish(); destroyed without it, the temporaries are removed and any
/// store already in `dir` is left as it was.
class FeatureStoreWriter {
 public:
  /// `dims` >= 1; `dtype` float32 or float16 (rows are given as float and rounded
  /// to nearest-even for float16); `model` a JSON object describing the extractor;
  /// `source` a JSON object or null (omitted); `created_by` e.g. "mltool 0.1.0"
  /// (empty: this build's name and version). Creates `dir` if needed.
  /// Throws UsageError for invalid arguments.
  FeatureStoreWriter(std::string dir, std::uint64_t dims, DType dtype, nlohmann::json model,
                     nlohmann::json source = nullptr, std::string created_by = {});

  /// Appends one row of dims() floats under `key` (see check_feature_key; an
  /// invalid key throws InputError and leaves the writer usable).
  void append(std::string_view key, const float* row);
  /// Appends one row already in dtype() (dims() values, little-endian), copied as is: a
  /// float16 row is not widened and rounded again.
  void append_stored(std::string_view key, const void* row);
  /// Appends `count` rows (row-major, count * dims() floats) under `keys`.
  void append_rows(const std::string* keys, std::size_t count, const float* rows);
  void append_rows(const std::vector<std::string>& keys, const float* rows) {
    append_rows(keys.data(), keys.size(), rows);
  }
  /// Records that an already appended row holds no valid features (its tile
  /// failed); listed in the manifest's invalid_rows.
  void mark_invalid(std::uint64_t row);
  /// Records the rows computed in batches split after an out-of-memory error (extract):
  /// the manifest's split_batches, each {batch, size, oom, first_row, rows}; empty: omitted.
  void set_split_batches(nlohmann::json splits) { split_batches_ = std::move(splits); }
  /// Records each slide's source stain (extract --stain-fit slide): the manifest's
  /// stain_fits, {slide id: estimate or null}; null or empty: omitted.
  void set_stain_fits(nlohmann::json fits) { stain_fits_ = std::move(fits); }

  std::uint64_t rows() const { return rows_; }
  std::uint64_t dims() const { return dims_; }
  DType dtype() const { return dtype_; }

  /// Publishes the store: patches the row count into the npy header, renames
  /// features.npy and keys.txt into place, then writes features.json. An older
  /// features.json in `dir` is removed first, so a reader never pairs an old
  /// manifest with new data. Throws UsageError if called twice or after a
  /// failed write.
  void finish();

 private:
  void write_row(const float* row);

  std::string dir_;
  std::uint64_t dims_;
  DType dtype_;
  nlohmann::json model_;
  nlohmann::json source_;
  std::string created_by_;
  NpyWriter matrix_;
  util::AtomicFile keys_;
  std::vector<std::uint16_t> half_row_;
  std::vector<std::uint64_t> invalid_rows_;
  nlohmann::json split_batches_;
  nlohmann::json stain_fits_;
  std::uint64_t rows_ = 0;
  bool failed_ = false;
  bool finished_ = false;
};

/// A published feature store, read-only: the matrix is memory-mapped (never read
/// into memory), keys are loaded, the key -> row index is built on first find().
/// Safe to share between threads once opened. Movable, not copyable.
class FeatureStore {
 public:
  /// Opens `dir`: validates features.json, maps features.npy and checks its
  /// dtype and shape against the manifest, loads keys.txt and checks its line
  /// count. Throws InputError if a file is missing, FormatError on any mismatch
  /// (naming both files and the field).
  static FeatureStore open(const std::string& dir);

  FeatureStore(FeatureStore&&) noexcept;
  FeatureStore& operator=(FeatureStore&&) noexcept;
  ~FeatureStore();

  std::uint64_t rows() const { return rows_; }
  std::uint64_t dims() const { return dims_; }
  DType dtype() const { return dtype_; }
  /// Bytes per row in the file (dims * itemsize).
  std::uint64_t row_bytes() const { return dims_ * itemsize(dtype_); }
  const std::string& dir() const { return dir_; }
  /// The validated features.json.
  const nlohmann::json& manifest() const { return manifest_; }
  /// The tile store the features were extracted from, as features.json's source.tile_store
  /// names it, or "" when it names none.
  std::string tile_store() const;
  /// Rows listed as invalid in the manifest, sorted.
  const std::vector<std::uint64_t>& invalid_rows() const { return invalid_rows_; }

  /// Row 0 of the matrix in the file's dtype, row-major.
  const void* data() const { return mapping_->data() + data_offset_; }
  /// The mapping of features.npy, for views that must outlive this object
  /// (e.g. a tensor aliasing the matrix); data() == mapping()->data() + data_offset().
  std::shared_ptr<const util::MappedFile> mapping() const { return mapping_; }
  /// Byte offset of row 0 inside features.npy.
  std::uint64_t data_offset() const { return data_offset_; }

  /// Copies row `row` into `out` (dims() floats), widening float16. Throws
  /// InputError if the row is out of range.
  void row_f32(std::uint64_t row, float* out) const;
  /// Copies `count` rows (any order, repeats allowed) into `out`, row-major.
  void gather_f32(const std::uint64_t* rows, std::size_t count, float* out) const;

  /// The tile key of `row`; InputError if out of range.
  std::string_view key(std::uint64_t row) const;
  /// The row of `key`, or nullopt. The first call builds a hash index of all
  /// keys and throws FormatError if keys.txt holds a key twice.
  std::optional<std::uint64_t> find(std::string_view key) const;

 private:
  FeatureStore();
  void check_row(std::uint64_t row) const;
  struct Keys;

  std::string dir_;
  nlohmann::json manifest_;
  std::uint64_t rows_ = 0;
  std::uint64_t dims_ = 0;
  DType dtype_ = DType::float32;
  std::vector<std::uint64_t> invalid_rows_;
  std::shared_ptr<const util::MappedFile> mapping_;
  std::uint64_t data_offset_ = 0;
  std::unique_ptr<Keys> keys_;  // on the heap: views into it survive moves
};

}  // namespace mltool::io
