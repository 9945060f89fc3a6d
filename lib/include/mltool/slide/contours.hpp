// The outline of a binary mask as polygons with holes, exactly: each polygon is the union
// of the squares of one 4-connected set of foreground pixels, its rings running along pixel
// edges (vertices on the pixel-corner grid, collinear points dropped). Used to export a
// slide's tissue mask as vector outlines (mltool export geojson, slide/geojson_export.hpp).
//
// The polygons are valid in the OGC / GEOS sense (what shapely's is_valid checks): rings are
// simple and closed; a ring that would touch itself where two foreground pixels meet only at
// a corner is split there, so a hole may touch its exterior, or two polygons each other, at
// a single point, but never along an edge. Exterior rings have positive signed (shoelace)
// area in x-right, y-down pixel coordinates, holes negative — counter-clockwise and
// clockwise in the sense of RFC 7946 §3.1.6 when x, y are read as a right-handed plane.
#pragma once

#include <cstdint>
#include <vector>

namespace mltool::slide {

/// A pixel-corner position: pixel (x, y) covers [x, x + 1] × [y, y + 1].
struct GridPoint {
  int x = 0;
  int y = 0;
  bool operator==(const GridPoint& o) const { return x == o.x && y == o.y; }
};

/// A closed ring, listed without repeating its first point at the end.
using GridRing = std::vector<GridPoint>;

/// One polygon: its exterior ring and the holes inside it.
struct Polygon {
  GridRing exterior;
  std::vector<GridRing> holes;
};

/// Twice the signed area of `ring` (the shoelace sum), exact.
std::int64_t twice_signed_area(const GridRing& ring);

/// The polygons of `mask` (width × height bytes, row-major, nonzero = foreground), in the
/// raster order of their exterior rings' top-left edges. Memory: the rings, plus one bit
/// per horizontal pixel edge.
std::vector<Polygon> trace_polygons(const std::uint8_t* mask, int width, int height);

}  // namespace mltool::slide
