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

struct CohortJob {
  TileJob tile;
  std::string store;        ///< the tile store (created or appended to)
  std::string shard;        ///< "I/N", "auto" or "" (util::resolve_shard)
  std::size_t shards = 0;   ///< --shards N for --shard auto; 0: not given
  bool keep_going = false;  ///< a slide that fails is reported (status "failed") and skipped,
                            ///< as is one published "incomplete"; the others go on
  bool allow_missing_tiles = false;  ///< a slide whose failed tiles are recorded counts as done
  bool overwrite = false;            ///< empty the store first instead of resuming or adding to it
  bool allow_partial = false;        ///< merge: join the shards there are, naming the missing ones
};

struct CohortReport {
  std::vector<SlideReport> slides;  ///< in list order; failed ones carry `error`
  std::int64_t tiles = 0;           ///< tiles of every slide, skipped ones included
  int failed = 0;                   ///< slides that failed (keep_going)
  int incomplete = 0;               ///< slides published without failed tiles (keep_going)
  int empty = 0;                    ///< slides complete with zero tiles
  int threads = 0;                  ///< the workers used (--threads, else the allowed CPUs)
  std::string shard;                ///< "I/N" of a --shard run, else ""
};

/// The options of the run over a list (lib/slide/tile_options.cpp).
const util::Options<CohortJob>& cohort_options();

/// The summaries `mltool tile --json` prints: of a run over slides, and of --merge.
nlohmann::json to_json(const CohortReport& report, const std::string& store);
nlohmann::json to_json(const std::vector<io::MergeReport>& merged, const std::string& store);

/// Validates the job, opens the store (taking its lock), adopts the settings and tiles the
/// shard's slides in order, logging each. Without keep_going the first failing slide's
/// error is rethrown (the slides before it are complete in the store), and the first slide
/// published "incomplete" stops the run with an InputError naming its failed tiles (they are
/// recorded: the next run fetches only them), unless allow_missing_tiles.
CohortReport tile_slides(const std::vector<std::string>& slides, const CohortJob& job);

/// Merges every store of `inputs` into the store `job.store` (io::merge_store), logging each.
/// Stores of a `--shard I/N` run must be all there and finished: UsageError naming the missing
/// or unfinished shards, unless job.allow_partial (then logged).
std::vector<io::MergeReport> merge_stores(const CohortJob& job,
                                          const std::vector<std::string>& inputs);

}  // namespace mltool::slide
