// `mltool tile` over a list of slides as a library call: the shard of the list this machine
// takes, each slide tiled into one store (tile_slide), --keep-going past a bad slide, and the
// reports; and joining stores tiled on several machines. apps/cmd_tile.cpp only parses options
// and prints the summary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/slide/tiler.hpp"
#include "mltool/util/options.hpp"

namespace mltool::slide {

/// The slides shard `shard` ("I/N", 0 <= I < N) takes of `slides`: I, I+N, I+2N, ...; all of
/// them for "". UsageError naming --shard for anything else.
std::vector<std::string> shard_slides(const std::vector<std::string>& slides,
                                      const std::string& shard);

struct CohortJob {
  TileJob tile;
  std::string store;        ///< the tile store (created or appended to)
  std::string shard;        ///< "I/N" or "" (shard_slides)
  bool keep_going = false;  ///< a slide that fails is reported (status "failed") and skipped
};

struct CohortReport {
  std::vector<SlideReport> slides;  ///< in list order; failed ones carry `error`
  std::int64_t tiles = 0;           ///< tiles of every slide, skipped ones included
  int failed = 0;                   ///< slides that failed (keep_going)
  int empty = 0;                    ///< slides complete with zero tiles
};

/// The options of the run over a list (lib/slide/tile_options.cpp).
const util::Options<CohortJob>& cohort_options();

/// The summaries `mltool tile --json` prints: of a run over slides, and of --merge.
nlohmann::json to_json(const CohortReport& report, const std::string& store);
nlohmann::json to_json(const std::vector<io::MergeReport>& merged, const std::string& store);

/// Validates the job, opens the store (taking its lock), adopts the settings and tiles the
/// shard's slides in order, logging each. Without keep_going the first failing slide's
/// error is rethrown (the slides before it are complete in the store).
CohortReport tile_slides(const std::vector<std::string>& slides, const CohortJob& job);

/// Merges every store of `inputs` into the store at `output` (io::merge_store), logging each.
std::vector<io::MergeReport> merge_stores(const std::string& output,
                                          const std::vector<std::string>& inputs,
                                          std::size_t commit_every);

}  // namespace mltool::slide
