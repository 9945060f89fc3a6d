// Boundary following on the pixel-edge grid (crack following). Every unit edge between a
// foreground and a background pixel is a directed boundary edge with the foreground on its
// left-hand normal n = (-dy, dx) in y-down coordinates, which makes exterior rings come out
// with positive shoelace area. Each corner has as many boundary edges leaving as entering;
// at a saddle (two foreground pixels meeting only at the corner) there are two of each, and
// the walk turns towards the foreground, keeping the two pixels apart (4-connectivity). A
// walk may still come back to a saddle it passed (a 4-connected shape that touches itself
// at a corner); splitting it there gives simple rings touching at one point, which OGC
// allows between a hole and its exterior, two holes, or two polygons.
#include "mltool/slide/contours.hpp"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace mltool::slide {
namespace {

struct Step {
  int dx = 0;
  int dy = 0;
  bool operator==(const Step& o) const { return dx == o.dx && dy == o.dy; }
};

Step left_normal(Step d) { return {-d.dy, d.dx}; }

int floor_half(int v) { return v >= 0 ? v / 2 : -((1 - v) / 2); }

class Tracer {
 public:
  Tracer(const std::uint8_t* mask, int width, int height)
      : mask_(mask),
        width_(width),
        height_(height),
        visited_(static_cast<std::size_t>(width) * (height + 1), false) {}

  bool fg(int x, int y) const {
    return x >= 0 && y >= 0 && x < width_ && y < height_ &&
           mask_[static_cast<std::size_t>(y) * width_ + x] != 0;
  }

  // The pixel beside the unit edge that leaves corner `v` along `d`, on side `s`.
  bool beside(GridPoint v, Step d, Step s) const {
    return fg(floor_half(2 * v.x + d.dx + s.dx), floor_half(2 * v.y + d.dy + s.dy));
  }

  // Whether a boundary edge leaves `v` along `d`: foreground on its left, background right.
  bool leaves(GridPoint v, Step d) const {
    const Step n = left_normal(d);
    return beside(v, d, n) && !beside(v, d, {-n.dx, -n.dy});
  }

  // Every ring, as the unit-step walks around each boundary, in raster order of their first
  // horizontal edge.
  template <class Visit>
  void walks(Visit visit) {
    for (int y = 0; y <= height_; ++y)
      for (int x = 0; x < width_; ++x) {
        if (visited_[index(x, y)] || fg(x, y) == fg(x, y - 1)) continue;
        // Foreground below: the edge runs +x from its left end; above: -x from its right end.
        const bool below = fg(x, y);
        visit(
            walk(below ? GridPoint{x, y} : GridPoint{x + 1, y}, below ? Step{1, 0} : Step{-1, 0}));
      }
  }

 private:
  std::size_t index(int x, int y) const { return static_cast<std::size_t>(y) * width_ + x; }

  GridRing walk(GridPoint start, Step first) {
    GridRing out;
    GridPoint v = start;
    Step d = first;
    do {
      out.push_back(v);
      if (d.dy == 0) visited_[index(std::min(v.x, v.x + d.dx), v.y)] = true;
      v = {v.x + d.dx, v.y + d.dy};
      const Step n = left_normal(d);
      if (leaves(v, n))
        d = n;
      else if (!leaves(v, d))
        d = {-n.dx, -n.dy};
    } while (!(v == start && d == first));
    return out;
  }

  const std::uint8_t* mask_;
  int width_;
  int height_;
  std::vector<bool> visited_;  // horizontal edges: every ring has some
};

// Splits a closed walk at every corner it passes twice into simple rings.
std::vector<GridRing> split_at_touches(const GridRing& walk) {
  std::vector<GridRing> rings;
  GridRing open;
  std::unordered_map<std::uint64_t, std::size_t> position;
  auto key = [](GridPoint p) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(p.x)) << 32) |
           static_cast<std::uint32_t>(p.y);
  };
  for (std::size_t i = 0; i <= walk.size(); ++i) {
    const GridPoint p = walk[i % walk.size()];
    const auto found = position.find(key(p));
    if (found == position.end()) {
      position.emplace(key(p), open.size());
      open.push_back(p);
      continue;
    }
    const std::size_t from = found->second;
    rings.emplace_back(open.begin() + static_cast<std::ptrdiff_t>(from), open.end());
    for (std::size_t j = from + 1; j < open.size(); ++j) position.erase(key(open[j]));
    open.resize(from + 1);
  }
  return rings;
}

// The ring without the points where it goes straight on.
GridRing drop_collinear(const GridRing& ring) {
  GridRing out;
  const std::size_t n = ring.size();
  for (std::size_t i = 0; i < n; ++i) {
    const GridPoint& a = ring[(i + n - 1) % n];
    const GridPoint& b = ring[i];
    const GridPoint& c = ring[(i + 1) % n];
    const std::int64_t cross = static_cast<std::int64_t>(b.x - a.x) * (c.y - b.y) -
                               static_cast<std::int64_t>(b.y - a.y) * (c.x - b.x);
    if (cross != 0) out.push_back(b);
  }
  return out;
}

// The centre of the background pixel inside hole `walk` beside its first edge, doubled (so
// both coordinates are odd: never on a ring's edge or corner).
GridPoint inside_hole_doubled(const GridRing& walk) {
  const GridPoint a = walk[0];
  const GridPoint b = walk[1];
  const Step d{b.x - a.x, b.y - a.y};
  const Step n = left_normal(d);
  const int px = floor_half(2 * a.x + d.dx - n.dx);
  const int py = floor_half(2 * a.y + d.dy - n.dy);
  return {2 * px + 1, 2 * py + 1};
}

// Whether the doubled point `p` (odd coordinates) is inside `ring` (even-odd rule).
bool contains_doubled(const GridRing& ring, GridPoint p) {
  bool inside = false;
  for (std::size_t i = 0, n = ring.size(); i < n; ++i) {
    const GridPoint& a = ring[i];
    const GridPoint& b = ring[(i + 1) % n];
    if ((2 * a.y > p.y) != (2 * b.y > p.y) && 2 * a.x > p.x) inside = !inside;  // vertical edge
  }
  return inside;
}

struct Box {
  int x0 = std::numeric_limits<int>::max(), y0 = x0;
  int x1 = std::numeric_limits<int>::min(), y1 = x1;
};

Box box_of(const GridRing& ring) {
  Box b;
  for (const auto& p : ring) {
    b.x0 = std::min(b.x0, p.x), b.y0 = std::min(b.y0, p.y);
    b.x1 = std::max(b.x1, p.x), b.y1 = std::max(b.y1, p.y);
  }
  return b;
}

}  // namespace

std::int64_t twice_signed_area(const GridRing& ring) {
  std::int64_t sum = 0;
  for (std::size_t i = 0, n = ring.size(); i < n; ++i) {
    const GridPoint& a = ring[i];
    const GridPoint& b = ring[(i + 1) % n];
    sum += static_cast<std::int64_t>(a.x) * b.y - static_cast<std::int64_t>(b.x) * a.y;
  }
  return sum;
}

std::vector<Polygon> trace_polygons(const std::uint8_t* mask, int width, int height) {
  std::vector<Polygon> polygons;
  std::vector<std::int64_t> areas;
  std::vector<Box> boxes;
  struct Hole {
    GridRing ring;
    GridPoint inside;
  };
  std::vector<Hole> holes;
  Tracer tracer(mask, width, height);
  tracer.walks([&](const GridRing& walk) {
    for (GridRing& ring : split_at_touches(walk)) {
      const std::int64_t area = twice_signed_area(ring);
      if (area < 0) {
        const GridPoint inside = inside_hole_doubled(ring);
        holes.push_back({drop_collinear(ring), inside});
        continue;
      }
      Polygon p;
      p.exterior = drop_collinear(ring);
      boxes.push_back(box_of(p.exterior));
      areas.push_back(area);
      polygons.push_back(std::move(p));
    }
  });
  // A hole belongs to the smallest exterior around it (an island in a lake in an island).
  for (Hole& hole : holes) {
    std::size_t best = polygons.size();
    for (std::size_t i = 0; i < polygons.size(); ++i) {
      const Box& b = boxes[i];
      const GridPoint& p = hole.inside;
      if (p.x < 2 * b.x0 || p.x > 2 * b.x1 || p.y < 2 * b.y0 || p.y > 2 * b.y1) continue;
      if ((best == polygons.size() || areas[i] < areas[best]) &&
          contains_doubled(polygons[i].exterior, p))
        best = i;
    }
    if (best < polygons.size()) polygons[best].holes.push_back(std::move(hole.ring));
  }
  return polygons;
}

}  // namespace mltool::slide
