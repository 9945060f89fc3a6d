// A slide's kept tiles read, resampled and encoded on worker threads (or taken as the slide's
// own JPEG tiles) while the calling thread puts them into the slide's batch (not a public
// header; tiler.cpp's). A bounded queue between the two keeps memory independent of the slide.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mltool/io/tile_store.hpp"
#include "mltool/slide/geometry.hpp"
#include "mltool/slide/region_reader.hpp"
#include "mltool/slide/tiler.hpp"
#include "own_jpeg_tiles.hpp"

namespace mltool::slide {

/// A tile the tissue mask keeps: its grid position, level-0 corner and tissue fraction.
struct KeptTile {
  std::int64_t row, col, x, y;
  double tissue;
  double roi = -1;  ///< tile --roi: its share inside the regions (0–1); -1 without --roi
};

/// What writing a slide's tiles gave.
struct WrittenTiles {
  std::int64_t passthrough = 0;     ///< tiles that are the slide's own JPEG bytes
  std::vector<TileFailure> failed;  ///< the tiles whose DICOMweb frame failed, key order
};

/// Reads `kept` (through `passthrough` where it has the tile), encodes and puts each into
/// `batch`. Returns normally only when every tile is in a (committed or pending) batch or
/// failed because its frame's request failed for good (io::DicomwebError: recorded in
/// WrittenTiles::failed); any other error stops every thread and is rethrown.
WrittenTiles write_tiles(RegionReader& reader, const ReadPlan& plan, const TileJob& job,
                         const std::string& id, const std::vector<KeptTile>& kept,
                         const OwnJpegTiles* passthrough, io::TileStore::SlideWriter& batch);

}  // namespace mltool::slide
