// What `mltool view` draws as regions (slide/view.hpp): the outline of a mask (the tissue the
// tiles were kept by, each artifact class of a segmenter), and regions of interest from
// QuPath's GeoJSON, read with tile --roi's checks and bounds (slide/roi.hpp).
#include <cstdio>

#include "mltool/slide/contours.hpp"
#include "mltool/slide/roi.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "view_internal.hpp"

namespace mltool::slide::view {
namespace {

std::vector<double> flat(const GridRing& ring, double sx, double sy) {
  std::vector<double> out;
  out.reserve(ring.size() * 2);
  for (const auto& p : ring) {
    out.push_back(p.x * sx);
    out.push_back(p.y * sy);
  }
  return out;
}

FlatRings flat_rings(const std::vector<Ring>& rings) {
  FlatRings out;
  for (const auto& ring : rings) {
    std::vector<double> f;
    f.reserve(ring.size() * 2);
    for (const auto& [x, y] : ring) {
      f.push_back(x);
      f.push_back(y);
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::string hex_colour(const std::uint8_t* c) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "#%02x%02x%02x", c[0], c[1], c[2]);
  return hex;
}

}  // namespace

FlatRings mask_rings(const std::uint8_t* mask, int width, int height, double downsample_x,
                     double downsample_y) {
  FlatRings rings;
  for (const auto& polygon : trace_polygons(mask, width, height)) {
    rings.push_back(flat(polygon.exterior, downsample_x, downsample_y));
    for (const auto& hole : polygon.holes) rings.push_back(flat(hole, downsample_x, downsample_y));
  }
  return rings;
}

nlohmann::json artifact_overlays(const io::TissueMask& mask) {
  nlohmann::json out = nlohmann::json::array();
  const auto& map = mask.classes;
  for (std::size_t c = 0; c < mask.class_names.size(); ++c) {
    const auto& name = mask.class_names[c];
    bool artifact = false;
    for (const auto& a : mask.artifact_classes) artifact = artifact || a == name;
    if (!artifact) continue;
    std::vector<std::uint8_t> bits(map.pixels.size());
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = map.pixels[i] == c;
    const auto* colour = io::class_colour(name, mask.tissue_classes, mask.artifact_classes);
    out.push_back({{"name", name},
                   {"colour", hex_colour(colour)},
                   {"rings", mask_rings(bits.data(), map.width, map.height, mask.downsample_x,
                                        mask.downsample_y)}});
  }
  return out;
}

FlatRings roi_file_rings(const std::string& file) {
  return flat_rings(Roi::load(file, {}).rings());
}

FlatRings roi_record_rings(const nlohmann::json& slide_record,
                           const std::vector<std::string>& classes, const std::string& where) {
  const auto it = slide_record.find("roi");
  if (it == slide_record.end() || !it->is_object()) return {};
  const auto file = it->value("file", std::string());
  const auto sha256 = it->value("sha256", std::string());
  if (file.empty() || !util::exists(file)) {
    log::warn(where + ": its regions of interest, " + file +
              ", are not there: drawn without them (--roi FILE|DIR draws them from elsewhere)");
    return {};
  }
  auto roi = Roi::load(file, classes);
  if (roi.sha256() != sha256) {
    log::warn(where + ": " + file + " changed since the slide was tiled: drawn without it");
    return {};
  }
  return flat_rings(roi.rings());
}

}  // namespace mltool::slide::view
