// A `tile --shard I/N` store's "shard" record, and --merge's check that every shard of the
// whole is there and finished (as extract --merge checks its feature stores).
//
//   meta "shard" → {"index": I, "count": N, "slides": [ids of the shard's slides, in list
//                   order], "finished": false until the run over them ended, "failed": [ids
//                   of slides that failed under --keep-going]}
#pragma once

#include <string>
#include <vector>

#include "mltool/io/tile_store.hpp"
#include "mltool/util/shard.hpp"

namespace mltool::slide {

/// Checks a store's recorded shard (if any) is `part` (UsageError naming --shard, --shards
/// and --overwrite otherwise), and has the record written with the first finished slide.
void adopt_shard(io::TileStore& store, const util::Shard& part,
                 const std::vector<std::string>& slides);

/// Records that the run over the shard's `slides` ended, with the ids of those that failed and
/// of those published incomplete (tiles failed).
void finish_shard(io::TileStore& store, const util::Shard& part,
                  const std::vector<std::string>& slides, const std::vector<std::string>& failed,
                  const std::vector<std::string>& incomplete);

/// Checks that the shard stores among `inputs` (those with a "shard" record) make a whole: one
/// count N, every index 0..N-1 once, each finished. UsageError naming what is missing unless
/// `allow_partial` (then a warning). Stores without a record (not tiled with --shard) pass.
void check_shards(const std::vector<std::string>& inputs, bool allow_partial);

/// Whether the store at `path` is a finished shard without one complete slide (its slides all
/// failed, or it had none: more shards than slides). It has nothing to merge, and no settings.
bool finished_without_slides(const std::string& path);

}  // namespace mltool::slide
