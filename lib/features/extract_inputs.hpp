// What `mltool extract` reads (not a public header): its one tile store, or its slides tiled
// first into the coordinates store OUTPUT/coordinates.lmdb (a tile store without pixels,
// io/tile_store.hpp), whose tiles slide::TilePixels reads from the slide files.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mltool/features/extract.hpp"

namespace mltool::features {

/// The coordinates store's name in the feature store directory.
inline constexpr const char* kCoordinatesStore = "coordinates.lmdb";

/// The cheap checks of what extract reads, made before the output is locked and --overwrite
/// empties it (docs/cli.md#overwrite): --model one of `builtins` ("builtin:NAME") or a file
/// that is there, --stain-reference there, the tile store there, or the slides as
/// slide::check_slides checks them. InputError (exit 2) or UsageError (exit 1) naming the first
/// bad one.
void check_inputs(const ExtractJob& job, const std::vector<std::string>& builtins);

/// Sets job.store: the one input when it names a tile store (an LMDB directory, a path ending
/// in .lmdb, or a directory that is no DICOM series) (UsageError if a tile option was
/// given: they tile slides); otherwise every input is a slide, and all of them — not only a
/// --shard's, so that each row is batched where one run over them all batches it — are tiled
/// into the coordinates store with job.tile's options (resumed, --overwrite emptying it,
/// --keep-going past a bad slide), which must then hold no other slide. Returns that tiling's
/// report; nothing for a tile store. Called with the output's lock held, after check_inputs
/// (which refuses a job without inputs).
std::optional<slide::CohortReport> resolve_inputs(ExtractJob& job);

}  // namespace mltool::features
