// The resumable half of `mltool extract`'s output. Rows go to numbered chunk files in
// DIR/.extract-partial/, each chunk published atomically with its own small manifest as its
// commit point; the committed chunks are the high-water mark a killed run resumes from.
// finish() joins them into the feature store (io::FeatureStoreWriter: features.npy, keys.txt,
// features.json last) and removes the partial directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/io/npy.hpp"

namespace mltool::features {

class ChunkedFeatureWriter {
 public:
  /// Opens DIR for a run described by `fingerprint` (everything that decides the rows: the
  /// source, the model, preprocessing, dtype). A partial run with the same fingerprint is
  /// resumed; one with another fingerprint is a UsageError naming the directory (the user
  /// either repeats the settings or removes DIR/.extract-partial). `chunk_rows` >= 1.
  /// `note` is recorded beside the fingerprint but not compared (e.g. the machine).
  ChunkedFeatureWriter(std::string dir, std::uint64_t dims, nlohmann::json fingerprint,
                       std::uint64_t chunk_rows = 8192, nlohmann::json note = nullptr);

  /// The configuration a partial run in DIR was started with ({"dims", "run": fingerprint,
  /// "note"}), or null when DIR holds no partial run.
  static nlohmann::json partial_config(const std::string& dir);

  /// Removes the feature store and any partial run in DIR (--overwrite), features.json first so
  /// that no moment shows a complete store with missing files.
  static void remove_all(const std::string& dir);

  /// Rows already committed by earlier runs (and by this one): where to resume.
  std::uint64_t committed_rows() const { return committed_; }
  std::uint64_t dims() const { return dims_; }

  /// Appends one row (dims() floats) under `key`; `invalid` marks a row whose tile failed
  /// (its values should be NaN). A chunk is committed whenever chunk_rows rows are pending.
  void append(const std::string& key, const float* row, bool invalid);
  /// Commits the pending rows as a chunk (no-op if none).
  void commit_chunk();

  /// Notes that the next `rows` rows appended were computed in a split batch: `split` is its
  /// {batch, size, oom}; committed with the chunk the first of them goes to, and published in
  /// features.json's split_batches (rows of one batch noted by two runs are joined).
  void note_split(nlohmann::json split, std::uint64_t rows);
  /// The splits noted in the committed chunks (of earlier runs and this one), in order.
  const nlohmann::json& committed_splits() const { return splits_; }

  /// Commits what is pending and publishes the feature store in `dtype` (float32 or
  /// float16), `model`, `source` and `stain_fits` as in io::FeatureStoreWriter; then removes
  /// the chunks. Returns the number of invalid rows in the store (this run's and earlier runs').
  std::uint64_t finish(io::DType dtype, const nlohmann::json& model, const nlohmann::json& source,
                       const nlohmann::json& stain_fits = nullptr);

  /// DIR/.extract-partial
  const std::string& partial_dir() const { return partial_; }

 private:
  std::string chunk_path(std::uint64_t index, const char* ext) const;

  std::string dir_;
  std::string partial_;
  std::uint64_t dims_;
  std::uint64_t chunk_rows_;
  std::uint64_t chunks_ = 0;            // committed chunk files
  std::uint64_t committed_ = 0;         // rows in them
  std::vector<float> rows_;             // pending
  std::string keys_;                    // pending, one per line
  std::vector<std::uint64_t> invalid_;  // pending, chunk-local row numbers
  std::uint64_t pending_ = 0;
  nlohmann::json splits_ = nlohmann::json::array();          // committed
  nlohmann::json pending_splits_ = nlohmann::json::array();  // with the pending rows
};

}  // namespace mltool::features
