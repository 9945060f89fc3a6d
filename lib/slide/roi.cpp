// Regions of interest from QuPath's GeoJSON (roi.hpp), with GEOS's C API (reentrant).
#define GEOS_USE_ONLY_R_API
#include "mltool/slide/roi.hpp"

#include <geos_c.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <set>

#include "mltool/io/dicomweb.hpp"
#include "mltool/io/sha256.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"

namespace mltool::slide {
namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 64;  // JSON nesting: a MultiPolygon is 5 deep in a feature

// A warning or note printed once per process: check_rois and tile_slide read the same file.
void note_once(bool warning, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!said.insert(message).second) return;
  }
  warning ? log::warn(message) : log::info(message);
}

void geos_message(const char* message, void* userdata) {
  *static_cast<std::string*>(userdata) = message ? message : "";
}

// A feature as messages name it: "feature 3 (id ..., class 'Tumor')".
std::string feature_name(std::size_t index, const json& feature, const std::string& cls) {
  std::string out = "feature " + std::to_string(index);
  std::string extra;
  if (feature.is_object() && feature.contains("id") && feature["id"].is_string())
    extra = "id " + feature["id"].get<std::string>();
  if (!cls.empty()) extra += (extra.empty() ? "" : ", ") + std::string("class '") + cls + "'";
  return extra.empty() ? out : out + " (" + extra + ")";
}

// properties.classification.name, or "" (unclassified).
std::string class_of(const json& feature) {
  if (!feature.is_object()) return "";
  const auto p = feature.find("properties");
  if (p == feature.end() || !p->is_object()) return "";
  const auto c = p->find("classification");
  if (c == p->end() || !c->is_object()) return "";
  const auto n = c->find("name");
  return n != c->end() && n->is_string() ? n->get<std::string>() : "";
}

// The features of a FeatureCollection, a bare Feature or a JSON array of features.
const json& feature_list(const json& doc, json& holder, const std::string& file) {
  if (doc.is_array()) return doc;
  const std::string type = doc.is_object() ? doc.value("type", "") : "";
  if (type == "FeatureCollection" && doc.contains("features") && doc["features"].is_array())
    return doc["features"];
  if (type == "Feature") {
    holder = json::array({doc});
    return holder;
  }
  throw InputError(at_file(file,
                           "is not a GeoJSON FeatureCollection, Feature or array of features "
                           "(what QuPath's File > Export objects as GeoJSON writes): give such a "
                           "file with --roi"));
}

// Whether JSON `text` nests arrays and objects deeper than `limit` (strings skipped): checked
// before parsing, which is recursive in places (nlohmann's callback parser, which could
// check it, is quadratic in the length of an array).
bool nested_deeper(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

json parse_json(const std::string& text, const std::string& file) {
  if (nested_deeper(text, kMaxDepth))
    throw InputError(at_file(file, "JSON nested deeper than " + std::to_string(kMaxDepth) +
                                       " levels: not QuPath's GeoJSON; give another --roi"));
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(at_file(file, std::string("is not valid JSON (") + e.what() +
                                       "): export it again from QuPath, or give another --roi"));
  }
}

// One GEOS context with its last error message, and the geometries made in it.
struct Geos {
  GEOSContextHandle_t ctx = GEOS_init_r();
  std::string error;
  Geos() {
    GEOSContext_setErrorMessageHandler_r(ctx, geos_message, &error);
    GEOSContext_setNoticeMessageHandler_r(ctx, nullptr, nullptr);
  }
  ~Geos() { GEOS_finish_r(ctx); }
  Geos(const Geos&) = delete;
  Geos& operator=(const Geos&) = delete;
};

// Owns a geometry of `g`'s context.
struct GeomPtr {
  GEOSContextHandle_t ctx = nullptr;
  GEOSGeometry* g = nullptr;
  GeomPtr(GEOSContextHandle_t c, GEOSGeometry* geom) : ctx(c), g(geom) {}
  GeomPtr(GeomPtr&& o) noexcept : ctx(o.ctx), g(std::exchange(o.g, nullptr)) {}
  GeomPtr(const GeomPtr&) = delete;
  ~GeomPtr() {
    if (g) GEOSGeom_destroy_r(ctx, g);
  }
  GEOSGeometry* release() { return std::exchange(g, nullptr); }
};

// Reads one GeoJSON feature's rings and builds its geometry; counts vertices.
class FeatureReader {
 public:
  FeatureReader(Geos& geos, std::string file) : geos_(geos), file_(std::move(file)) {}
  std::int64_t vertices = 0;

  // A Polygon's (coordinates: rings) or a MultiPolygon's (coordinates: polygons) geometry.
  GeomPtr build(const json& geometry, const std::string& type, const std::string& where) {
    const auto c = geometry.find("coordinates");
    if (c == geometry.end() || !c->is_array())
      fail(where, "its " + type + " has no 'coordinates' array");
    if (type == "Polygon") return GeomPtr(geos_.ctx, polygon(*c, where, ""));
    if (c->empty()) fail(where, "its MultiPolygon has no polygon");
    std::vector<GEOSGeometry*> parts;
    try {
      for (std::size_t i = 0; i < c->size(); ++i)
        parts.push_back(polygon((*c)[i], where, "polygon " + std::to_string(i) + ", "));
    } catch (...) {
      for (auto* p : parts) GEOSGeom_destroy_r(geos_.ctx, p);
      throw;
    }
    return GeomPtr(geos_.ctx,
                   checked(GEOSGeom_createCollection_r(geos_.ctx, GEOS_MULTIPOLYGON, parts.data(),
                                                       static_cast<unsigned>(parts.size())),
                           where));
  }

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw InputError(at_file(file_, where + ": " + what +
                                        "; correct the annotation in QuPath and export again "
                                        "(--roi), or keep other classes only with --roi-class"));
  }

 private:
  GEOSGeometry* checked(GEOSGeometry* g, const std::string& where) const {
    if (!g) fail(where, "GEOS could not build it (" + geos_.error + ")");
    return g;
  }

  GEOSGeometry* polygon(const json& rings, const std::string& where, const std::string& part) {
    if (!rings.is_array() || rings.empty()) fail(where, part + "a polygon without rings");
    std::vector<GEOSGeometry*> made;
    try {
      for (std::size_t r = 0; r < rings.size(); ++r)
        made.push_back(ring(rings[r], where, part + "ring " + std::to_string(r)));
    } catch (...) {
      for (auto* g : made) GEOSGeom_destroy_r(geos_.ctx, g);
      throw;
    }
    return checked(GEOSGeom_createPolygon_r(geos_.ctx, made[0], made.data() + 1,
                                            static_cast<unsigned>(made.size() - 1)),
                   where);
  }

  GEOSGeometry* ring(const json& positions, const std::string& where, const std::string& name) {
    if (!positions.is_array()) fail(where, name + " is not an array of positions");
    std::vector<double> xy;
    xy.reserve(positions.size() * 2 + 2);
    for (std::size_t i = 0; i < positions.size(); ++i) {
      const json& p = positions[i];
      if (!p.is_array() || p.size() < 2 || !p[0].is_number() || !p[1].is_number())
        fail(where, name + ", position " + std::to_string(i) + " is not [x, y]");
      const double x = p[0].get<double>(), y = p[1].get<double>();
      if (!std::isfinite(x) || !std::isfinite(y))
        fail(where, name + ", position " + std::to_string(i) + " is not finite");
      xy.push_back(x), xy.push_back(y);
    }
    if (xy.size() >= 2 && (xy[0] != xy[xy.size() - 2] || xy[1] != xy.back()))
      xy.push_back(xy[0]), xy.push_back(xy[1]);  // an unclosed ring is closed, as shapely does
    const std::size_t n = xy.size() / 2;
    if (n < 4)
      fail(where, name + " has " + std::to_string(n) +
                      " positions (closed); a ring needs at least 4, its first repeated last");
    vertices += static_cast<std::int64_t>(n);
    if (vertices > kMaxRoiVertices)
      throw InputError(at_file(file_, "more than " + std::to_string(kMaxRoiVertices) +
                                          " vertices (at " + where +
                                          "): export the annotations alone from QuPath, "
                                          "simplified, or keep fewer with --roi-class"));
    GEOSCoordSequence* seq =
        GEOSCoordSeq_copyFromBuffer_r(geos_.ctx, xy.data(), static_cast<unsigned>(n), 0, 0);
    if (!seq) fail(where, "GEOS could not take its coordinates (" + geos_.error + ")");
    return checked(GEOSGeom_createLinearRing_r(geos_.ctx, seq), where);
  }

  Geos& geos_;
  std::string file_;
};

// Types that have no area: skipped with a note.
bool without_area(const std::string& type) {
  return type == "Point" || type == "MultiPoint" || type == "LineString" ||
         type == "MultiLineString";
}

}  // namespace

struct Roi::Impl {
  Geos geos;
  GEOSGeometry* geom = nullptr;  // the union; polygonal or empty
  const GEOSPreparedGeometry* prepared = nullptr;
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool empty = true;
  double area = 0;
  std::int64_t regions = 0, skipped = 0;
  std::set<std::string> classes;
  std::string file, sha256;
  // The union clipped to the last row of tiles asked (share): tiles come row by row, and a
  // tile that straddles the boundary is clipped from its row's strip, not the whole union.
  GEOSGeometry* strip = nullptr;
  double strip_y = 0, strip_size = -1;

  ~Impl() {
    if (strip) GEOSGeom_destroy_r(geos.ctx, strip);
    if (prepared) GEOSPreparedGeom_destroy_r(geos.ctx, prepared);
    if (geom) GEOSGeom_destroy_r(geos.ctx, geom);
  }

  // The union clipped to [x0 - 1, x1 + 1] × [y, y + size) (the row of tiles at y).
  const GEOSGeometry* row_strip(double y, double size) {
    if (strip && strip_y == y && strip_size == size) return strip;
    if (strip) GEOSGeom_destroy_r(geos.ctx, strip);
    strip = GEOSClipByRect_r(geos.ctx, geom, x0 - 1, y, x1 + 1, y + size);
    strip_y = y, strip_size = size;
    if (!strip)
      throw ResourceError(file + ": GEOS could not clip the regions (" + geos.error + ")");
    return strip;
  }

  // The polygonal parts of `g` (a repaired geometry may hold lines and points too), cloned.
  void polygons_of(const GEOSGeometry* g, std::vector<GEOSGeometry*>& out) const {
    const int type = GEOSGeomTypeId_r(geos.ctx, g);
    if (type == GEOS_POLYGON) {
      out.push_back(GEOSGeom_clone_r(geos.ctx, g));
    } else if (type == GEOS_MULTIPOLYGON || type == GEOS_GEOMETRYCOLLECTION) {
      const int n = GEOSGetNumGeometries_r(geos.ctx, g);
      for (int i = 0; i < n; ++i) polygons_of(GEOSGetGeometryN_r(geos.ctx, g, i), out);
    }
  }

  // Adds a region's polygons to `parts`, repaired with make-valid (and a warning) if invalid.
  void add(GeomPtr region, const std::string& where, std::vector<GEOSGeometry*>& parts) {
    const char valid = GEOSisValid_r(geos.ctx, region.g);
    if (valid == 1) return polygons_of(region.g, parts);
    char* reason = GEOSisValidReason_r(geos.ctx, region.g);
    const std::string why = reason ? reason : geos.error;
    if (reason) GEOSFree_r(geos.ctx, reason);
    GeomPtr repaired(geos.ctx, GEOSMakeValid_r(geos.ctx, region.g));
    if (!repaired.g)
      throw InputError(at_file(file, where + ": invalid (" + why +
                                         ") and GEOS could not repair it (" + geos.error +
                                         "); correct it in QuPath, or leave it out with "
                                         "--roi-class"));
    note_once(true, file + ": " + where + ": invalid polygon (" + why +
                        "), repaired with GEOS make-valid; correct it in QuPath to silence this");
    polygons_of(repaired.g, parts);
  }

  // Groups of `parts` whose envelopes meet (touching counts), as indices: a sweep in x with
  // union-find. Past kMaxTests envelope tests (a pathological file) everything is one group.
  std::vector<std::vector<std::size_t>> meeting_groups(const std::vector<GEOSGeometry*>& parts) {
    constexpr std::int64_t kMaxTests = 20'000'000;
    const std::size_t n = parts.size();
    std::vector<std::array<double, 4>> env(n);
    for (std::size_t i = 0; i < n; ++i) {
      GEOSGeom_getXMin_r(geos.ctx, parts[i], &env[i][0]);
      GEOSGeom_getYMin_r(geos.ctx, parts[i], &env[i][1]);
      GEOSGeom_getXMax_r(geos.ctx, parts[i], &env[i][2]);
      GEOSGeom_getYMax_r(geos.ctx, parts[i], &env[i][3]);
    }
    std::vector<std::size_t> order(n), parent(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = parent[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return env[a][0] < env[b][0]; });
    const auto root = [&](std::size_t i) {
      while (parent[i] != i) i = parent[i] = parent[parent[i]];
      return i;
    };
    std::vector<std::size_t> active;
    std::int64_t tests = 0;
    for (const std::size_t i : order) {
      active.erase(std::remove_if(active.begin(), active.end(),
                                  [&](std::size_t a) { return env[a][2] < env[i][0]; }),
                   active.end());
      for (const std::size_t a : active)
        if (env[a][1] <= env[i][3] && env[i][1] <= env[a][3]) parent[root(a)] = root(i);
      tests += static_cast<std::int64_t>(active.size());
      if (tests > kMaxTests) return {order};
      active.push_back(i);
    }
    std::map<std::size_t, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < n; ++i) groups[root(i)].push_back(i);
    std::vector<std::vector<std::size_t>> out;
    for (auto& [r, members] : groups) out.push_back(std::move(members));
    return out;
  }

  // The union of `parts` (taken): a polygon whose envelope meets no other's is its own union
  // (they are valid, and their interiors apart), each group of meeting ones is united with
  // GEOS's unary union; then prepared, with its area and envelope.
  void unite(std::vector<GEOSGeometry*>& parts) {
    std::vector<GEOSGeometry*> polygons;
    try {
      for (const auto& group : meeting_groups(parts)) {
        if (group.size() == 1) {
          polygons.push_back(std::exchange(parts[group[0]], nullptr));
          continue;
        }
        std::vector<GEOSGeometry*> members;
        for (const std::size_t i : group) members.push_back(std::exchange(parts[i], nullptr));
        GeomPtr all(geos.ctx,
                    GEOSGeom_createCollection_r(geos.ctx, GEOS_GEOMETRYCOLLECTION, members.data(),
                                                static_cast<unsigned>(members.size())));
        if (!all.g) {
          for (auto* p : members) GEOSGeom_destroy_r(geos.ctx, p);
          throw InputError(
              at_file(file, "GEOS could not collect the regions (" + geos.error + ")"));
        }
        GeomPtr united(geos.ctx, GEOSUnaryUnion_r(geos.ctx, all.g));
        if (!united.g)
          throw InputError(at_file(file, "GEOS could not unite the regions (" + geos.error +
                                             "); correct them in QuPath (--roi)"));
        polygons_of(united.g, polygons);
      }
    } catch (...) {
      for (auto* p : parts)
        if (p) GEOSGeom_destroy_r(geos.ctx, p);
      for (auto* p : polygons) GEOSGeom_destroy_r(geos.ctx, p);
      parts.clear();
      throw;
    }
    parts.clear();
    geom = polygons.size() == 1
               ? polygons[0]
               : GEOSGeom_createCollection_r(geos.ctx, GEOS_MULTIPOLYGON, polygons.data(),
                                             static_cast<unsigned>(polygons.size()));
    if (!geom) throw ResourceError(file + ": GEOS could not collect the regions");
    prepared = GEOSPrepare_r(geos.ctx, geom);
    if (!prepared) throw ResourceError(file + ": GEOS could not prepare the regions");
    GEOSArea_r(geos.ctx, geom, &area);
    empty = GEOSisEmpty_r(geos.ctx, geom) != 0;
    if (!empty) {
      GEOSGeom_getXMin_r(geos.ctx, geom, &x0), GEOSGeom_getYMin_r(geos.ctx, geom, &y0);
      GEOSGeom_getXMax_r(geos.ctx, geom, &x1), GEOSGeom_getYMax_r(geos.ctx, geom, &y1);
    }
  }
};

namespace {

// What parse() found of the file's features, for its notes and the class check.
struct Census {
  std::map<std::string, std::int64_t> regions_by_class;  // every polygonal feature
  std::vector<std::string> no_area;                      // "3 (Point)" of skipped features
};

std::string class_text(const std::string& cls) {
  return cls.empty() ? std::string("unclassified") : "'" + cls + "'";
}

// InputError for a --roi-class that no region of the file has.
void check_classes(const Census& census, const std::vector<std::string>& classes,
                   const std::string& file) {
  std::string present;
  for (const auto& [cls, n] : census.regions_by_class)
    present += (present.empty() ? "" : ", ") + class_text(cls) + " (" + std::to_string(n) + ")";
  for (const auto& cls : classes)
    if (!census.regions_by_class.count(cls))
      throw InputError(at_file(
          file, "no region (Polygon or MultiPolygon) of class '" + cls + "' (--roi-class); " +
                    (present.empty() ? std::string("the file has no region")
                                     : "its regions' classes: " + present) +
                    ": give one of those with --roi-class, or none to keep every region"));
  if (census.regions_by_class.empty())
    throw InputError(
        at_file(file, "holds no region (Polygon or MultiPolygon feature" +
                          std::string(census.no_area.empty() ? "" : "; only points and lines") +
                          "): export the slide's area annotations from QuPath, or "
                          "give another --roi"));
}

bool polygonal(const std::string& type) { return type == "Polygon" || type == "MultiPolygon"; }

// The type of feature `f`'s geometry: "" where it has none (null), "untyped" for an object
// without a type. InputError (through `reader`) for an entry that is not a Feature.
std::string geometry_type(const json& f, const FeatureReader& reader, const std::string& where) {
  if (!f.is_object() || (f.contains("type") && f["type"] != "Feature"))
    reader.fail(where, "not a GeoJSON Feature");
  const auto g = f.find("geometry");
  if (g == f.end() || g->is_null()) return "";
  if (!g->is_object()) reader.fail(where, "its geometry is not a GeoJSON object");
  const auto t = g->find("type");
  return t != g->end() && t->is_string() ? t->get<std::string>() : "untyped";
}

// The note on the features skipped for having no area, naming the first five.
void note_no_area(const std::string& file, const Census& census) {
  if (census.no_area.empty()) return;
  std::string list;
  for (std::size_t i = 0; i < census.no_area.size() && i < 5; ++i)
    list += (i ? ", " : "") + census.no_area[i];
  note_once(false, file + ": " + std::to_string(census.no_area.size()) +
                       " feature(s) without an area skipped (points, lines): feature " + list +
                       (census.no_area.size() > 5 ? ", ..." : ""));
}

}  // namespace

Roi::Roi(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Roi::Roi(Roi&&) noexcept = default;
Roi& Roi::operator=(Roi&&) noexcept = default;
Roi::~Roi() = default;

Roi Roi::parse(const std::string& text, const std::string& file,
               const std::vector<std::string>& classes, bool check_only) {
  auto impl = std::make_unique<Impl>();
  impl->file = file;
  const json doc = parse_json(text, file);
  json holder;
  const json& features = feature_list(doc, holder, file);
  if (static_cast<std::int64_t>(features.size()) > kMaxRoiFeatures)
    throw InputError(at_file(file, std::to_string(features.size()) + " features, over the " +
                                       std::to_string(kMaxRoiFeatures) +
                                       " an ROI file may hold: export the annotations alone (not "
                                       "the detections) from QuPath"));
  const std::set<std::string> wanted(classes.begin(), classes.end());
  FeatureReader reader(impl->geos, file);
  Census census;
  std::vector<GEOSGeometry*> parts;
  try {
    for (std::size_t i = 0; i < features.size(); ++i) {
      const json& f = features[i];
      const std::string cls = class_of(f);
      const std::string where = feature_name(i, f, cls);
      const std::string type = geometry_type(f, reader, where);
      if (type.empty() || without_area(type)) {
        census.no_area.push_back(std::to_string(i) + " (" + (type.empty() ? "no geometry" : type) +
                                 ")");
        continue;
      }
      const bool kept = wanted.empty() || wanted.count(cls);
      if (!kept && polygonal(type)) {
        ++census.regions_by_class[cls];
        continue;  // another class's region: not read further
      }
      if (!polygonal(type))
        reader.fail(where, "its geometry is " + type + ", not a Polygon or MultiPolygon");
      ++census.regions_by_class[cls];
      impl->add(reader.build(f["geometry"], type, where), where, parts);
      ++impl->regions;
      impl->classes.insert(cls);
    }
    check_classes(census, classes, file);
  } catch (...) {
    for (auto* p : parts) GEOSGeom_destroy_r(impl->geos.ctx, p);
    throw;
  }
  impl->skipped = static_cast<std::int64_t>(census.no_area.size());
  note_no_area(file, census);
  if (!check_only) {
    impl->unite(parts);
  } else {
    for (auto* p : parts) GEOSGeom_destroy_r(impl->geos.ctx, p);
  }
  return Roi(std::move(impl));
}

Roi Roi::load(const std::string& file, const std::vector<std::string>& classes, bool check_only) {
  if (!util::exists(file) || util::is_directory(file))
    throw InputError(at_file(file,
                             "no such file: give a QuPath GeoJSON file, or a directory of "
                             "<slide id>.geojson, with --roi"));
  const std::uint64_t size = util::file_size(file);
  if (size > kMaxRoiFileBytes)
    throw InputError(at_file(file, std::to_string(size >> 20) + " MiB, over the " +
                                       std::to_string(kMaxRoiFileBytes >> 20) +
                                       " MiB an ROI file may have: export the annotations alone "
                                       "(not the detections) from QuPath (--roi)"));
  std::string text;
  try {
    text = util::read_file(file);
  } catch (const Error& e) {
    throw InputError(std::string(e.what()) + " (--roi)");
  }
  Roi roi = parse(text, file, classes, check_only);
  roi.impl_->sha256 = io::sha256_hex(text);
  return roi;
}

double Roi::share(double x, double y, double size) const {
  Impl& m = *impl_;
  if (m.empty || !(size > 0) || x >= m.x1 || x + size <= m.x0 || y >= m.y1 || y + size <= m.y0)
    return 0;
  GeomPtr box(m.geos.ctx, GEOSGeom_createRectangle_r(m.geos.ctx, x, y, x + size, y + size));
  if (GEOSPreparedContains_r(m.geos.ctx, m.prepared, box.g) == 1) return 1;
  if (GEOSPreparedIntersects_r(m.geos.ctx, m.prepared, box.g) != 1) return 0;
  GeomPtr clipped(m.geos.ctx,
                  GEOSClipByRect_r(m.geos.ctx, m.row_strip(y, size), x, y, x + size, y + size));
  double a = 0;
  if (!clipped.g || !GEOSArea_r(m.geos.ctx, clipped.g, &a))
    throw ResourceError(m.file + ": GEOS could not clip the regions to a tile (" + m.geos.error +
                        ")");
  return std::clamp(a / (size * size), 0.0, 1.0);
}

double Roi::area() const { return impl_->area; }
std::int64_t Roi::regions() const { return impl_->regions; }
std::int64_t Roi::skipped() const { return impl_->skipped; }
std::vector<std::string> Roi::classes() const {
  return {impl_->classes.begin(), impl_->classes.end()};
}
std::vector<double> Roi::bounds() const { return {impl_->x0, impl_->y0, impl_->x1, impl_->y1}; }
const std::string& Roi::file() const { return impl_->file; }
const std::string& Roi::sha256() const { return impl_->sha256; }

std::vector<Ring> Roi::rings() const {
  const Impl& m = *impl_;
  std::vector<Ring> out;
  const auto add = [&](const GEOSGeometry* ring) {
    const GEOSCoordSequence* seq = GEOSGeom_getCoordSeq_r(m.geos.ctx, ring);
    unsigned n = 0;
    GEOSCoordSeq_getSize_r(m.geos.ctx, seq, &n);
    Ring r(n);
    for (unsigned i = 0; i < n; ++i)
      GEOSCoordSeq_getXY_r(m.geos.ctx, seq, i, &r[i].first, &r[i].second);
    out.push_back(std::move(r));
  };
  std::vector<GEOSGeometry*> polygons;
  if (m.geom) m.polygons_of(m.geom, polygons);
  for (GEOSGeometry* p : polygons) {
    add(GEOSGetExteriorRing_r(m.geos.ctx, p));
    const int holes = GEOSGetNumInteriorRings_r(m.geos.ctx, p);
    for (int i = 0; i < holes; ++i) add(GEOSGetInteriorRingN_r(m.geos.ctx, p, i));
    GEOSGeom_destroy_r(m.geos.ctx, p);
  }
  return out;
}

std::optional<io::RoiSettings> roi_settings(const RoiJob& job) {
  if (job.path.empty()) return std::nullopt;
  std::set<std::string> classes(job.classes.begin(), job.classes.end());
  return io::RoiSettings{{classes.begin(), classes.end()}, job.min_roi, job.missing};
}

void check_roi_options(const RoiJob& job) {
  if (!job.path.empty()) return;
  const RoiJob defaults;
  const char* given = !job.classes.empty()              ? "--roi-class"
                      : job.min_roi != defaults.min_roi ? "--min-roi"
                      : job.missing != defaults.missing ? "--roi-missing"
                                                        : nullptr;
  if (given) throw UsageError(std::string(given) + " needs --roi (the regions of interest)");
}

std::string roi_file_for(const std::string& path, const std::string& slide_path) {
  if (!util::is_directory(path)) return path;
  const std::string id = io::slide_id_for(slide_path);
  std::string name = slide_path;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  name = name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
  const std::string by_id = util::join_path(path, id + ".geojson");
  const std::string by_name = util::join_path(path, name + ".geojson");
  const bool id_there = util::exists(by_id);
  const bool name_there = name != id && !io::is_dicomweb_url(slide_path) && util::exists(by_name);
  if (id_there && name_there)
    throw InputError(at_file(slide_path, "two ROI files: " + by_id + " and " + by_name +
                                             "; remove one of them from --roi " + path));
  return id_there ? by_id : name_there ? by_name : "";
}

SlideRoi slide_roi(const RoiJob& job, const std::string& slide_path, bool check_only) {
  SlideRoi out;
  if (job.path.empty()) return out;
  out.enabled = true;
  out.file = roi_file_for(job.path, slide_path);
  if (!out.file.empty()) {
    out.roi = std::make_shared<const Roi>(Roi::load(out.file, job.classes, check_only));
    return out;
  }
  const std::string id = io::slide_id_for(slide_path);
  if (job.missing == io::RoiMissing::refuse)
    throw InputError(at_file(slide_path, "no ROI file for slide '" + id + "' in " + job.path +
                                             " (" + id +
                                             ".geojson): export its annotations "
                                             "from QuPath there, or give --roi-missing skip "
                                             "(leave the slide out) or all (tile it whole)"));
  out.skip = job.missing == io::RoiMissing::skip;
  note_once(false,
            id + ": no ROI file in " + job.path + " (" + id + ".geojson): " +
                (out.skip ? "not tiled (--roi-missing skip)" : "tiled whole (--roi-missing all)"));
  return out;
}

void check_rois(const RoiJob& job, const std::vector<std::string>& slides, bool each) {
  if (job.path.empty()) return;
  if (!util::is_directory(job.path) && slides.size() > 1)
    throw UsageError("--roi " + job.path + " is one file, for one slide, and " +
                     std::to_string(slides.size()) +
                     " slides are given: give a directory of <slide id>.geojson, one a slide");
  if (each)
    for (const auto& path : slides) slide_roi(job, path, true);
}

json roi_json(const SlideRoi& r) {
  if (!r.roi) return nullptr;
  return {{"file", util::absolute_path(r.file)},
          {"sha256", r.roi->sha256()},
          {"regions", r.roi->regions()},
          {"skipped", r.roi->skipped()},
          {"area", r.roi->area()},
          {"classes", r.roi->classes()}};
}

}  // namespace mltool::slide
