// `mltool extract --shard I/N` and `mltool extract --merge`: which rows of a tile store a
// shard extracts, what its feature store records about that (features.json's source.shard,
// docs/formats.md#feature-store), and joining the shards' stores into the store one run over
// the whole tile store would have written: the same keys in the same order and the same
// bytes of features.npy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/util/shard.hpp"

namespace mltool::features {

/// One complete slide's rows: its tiles are rows [first, first + rows) of the whole store.
struct SlideRows {
  std::string id;
  std::uint64_t first = 0;
  std::uint64_t rows = 0;
};

/// The rows one shard extracts: the store's complete slides at positions I, I+N, I+2N, ... in
/// slide-id order, listed in store (key) order. The whole store for shard 0/1.
struct ShardPlan {
  util::Shard shard;
  std::vector<SlideRows> slides;        ///< this shard's, in store order
  std::vector<std::uint64_t> starts;    ///< this shard's row of each slide's first tile
  std::uint64_t rows = 0;               ///< this shard's rows: its slides' tiles
  std::size_t store_slides = 0;         ///< complete slides of the store
  std::uint64_t store_rows = 0;         ///< tiles of the store's complete slides
  std::uint32_t store_keys_crc32c = 0;  ///< CRC-32C of every key of the store, each + '\n'

  /// The store row of this shard's row `k` (k < rows).
  std::uint64_t store_row(std::uint64_t k) const;
  /// Whether store row `row` is one of this shard's.
  bool takes_row(std::uint64_t row) const;
  /// The batches of `batch` rows, counted from row 0 of the whole store, that hold this
  /// shard's rows from its row `from` on: what a run that resumes after `from` rows computes.
  /// A row is thus computed in the batch, and at the place in it, where one run over the
  /// whole store computes it, so its bits are that run's (docs/extract.md#resume).
  std::vector<std::uint64_t> batches(std::uint64_t from, std::uint64_t batch) const;
  /// features.json's source.shard; `run` holds the settings a merge must find equal
  /// (batch, device, math threads).
  nlohmann::json to_json(const nlohmann::json& run) const;
};

/// Plans `shard` over `keys`, the store's complete tile keys in store order
/// (io::TileStore::complete_tile_keys: each slide's tiles together).
ShardPlan plan_shard(const std::vector<std::string>& keys, const util::Shard& shard);

/// CRC-32C of `keys`, each followed by '\n' (keys.txt's bytes).
std::uint32_t keys_crc32c(const std::vector<std::string>& keys);

/// One input of a merge.
struct MergedShard {
  std::string path;
  std::string shard;  ///< "I/N"
  std::size_t slides = 0;
  std::uint64_t rows = 0;
};

struct ShardMergeReport {
  std::string output;
  std::uint64_t rows = 0;
  std::uint64_t dims = 0;
  std::uint64_t invalid = 0;
  std::vector<MergedShard> shards;  ///< by shard index
  nlohmann::json model;
  double seconds = 0;
};

/// Joins the feature stores of `mltool extract --shard I/N` runs into `output`: every shard of
/// one N, each once, of the same tile store (its keys' CRC-32C), model, dtype and --batch,
/// device and math threads; UsageError naming the store and what differs or is missing
/// otherwise. Rows are copied as stored (no rounding) in the whole store's order, so the
/// result does not depend on the order of `inputs`. Published atomically (features.json
/// last) under the output's lock; its source lists the inputs (merged_from).
ShardMergeReport merge_shards(const std::vector<std::string>& inputs, const std::string& output);

/// The summary `mltool extract --merge --json` prints.
nlohmann::json to_json(const ShardMergeReport& report);

}  // namespace mltool::features
