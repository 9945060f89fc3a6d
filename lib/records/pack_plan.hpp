// Internal to lib/records: what pack_dataset writes, decided before anything is written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mltool/io/feature_store.hpp"
#include "mltool/records/labels.hpp"
#include "mltool/records/pack.hpp"
#include "outcome.hpp"

namespace mltool::records::detail {

/// One record: rows [first, first + count) of PackPlan::rows (one row for tile/image).
struct PlannedRecord {
  std::uint64_t first = 0;
  std::uint64_t count = 0;
  std::uint32_t label = 0;  ///< classification: into PackPlan::labels; else PackPlan::outcomes
  std::uint32_t slide = 0;  ///< into PackPlan::slides (the bag's id with --bag-by)
  std::uint32_t group = 0;  ///< into PackPlan::groups
};

struct PackPlan {
  LabelMap labels;                ///< classification
  std::vector<Outcome> outcomes;  ///< regression, survival: the distinct outcomes
  std::vector<std::string> slides;
  std::vector<std::string> groups;
  std::vector<std::uint64_t> rows;  ///< the rows records name (keys, coordinates)
  std::vector<std::uint64_t>
      index;  ///< rows as written: rows, or after dedupe the first identical row
  std::vector<PlannedRecord> records;
  /// x, y of each entry of `rows`, when known for all (tile and image units only).
  std::optional<std::vector<std::pair<std::int64_t, std::int64_t>>> coordinates;
  std::optional<std::string> tile_store;  ///< the tile store that gave the coordinates
};

/// Resolves labels against the store: missing keys (error or counted; with --bag-by, the
/// bags they belong to dropped under skip_missing), invalid rows, duplicates, groups, one
/// outcome per bag; fills the counters of `report`.
PackPlan plan_records(const io::FeatureStore& store, const Labels& labels, const PackJob& job,
                      PackReport& report);

/// Sets plan.index: each row replaced by the lowest-numbered used row with identical bytes
/// (hash, then byte compare). Returns how many distinct used rows were replaced.
std::uint64_t dedupe_rows(const io::FeatureStore& store, PackPlan& plan);

/// Fills plan.coordinates from the tile store named by the store's source.tile_store, when
/// every used tile is found there (see pack.hpp).
void find_coordinates(const io::FeatureStore& store, PackPlan& plan);

}  // namespace mltool::records::detail
