// The groups of extract --slide-encoder (slide_encode.hpp): a feature store's valid rows by
// slide, and the slides by group (--group-table). Not part of the public API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mltool/features/slide_encode.hpp"

namespace mltool::io {
class FeatureStore;
}

namespace mltool::features::detail {

// One output row: the slides of a group (one slide without a table), each with its valid
// rows of the store, in store order.
struct Group {
  std::string id;
  std::vector<std::string> slides;
  std::vector<std::vector<std::uint64_t>> rows;
};

struct Plan {
  std::vector<Group> groups;
  std::uint64_t input_rows = 0;
  std::uint64_t dropped_invalid = 0;
  std::uint64_t skipped_slides = 0;
};

/// The store's valid rows by slide (the keys' part before the last '/'), then the slides by
/// the table's group; groups in the order of their first slide in the store. UsageError for a
/// slide the table does not list (unless skip_missing); InputError for a bad table.
Plan plan_groups(const SlideEncodeJob& job, const io::FeatureStore& store);

}  // namespace mltool::features::detail
