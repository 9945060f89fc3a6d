// tile --roi in a slide's tiling (roi_tiles.hpp).
#include "roi_tiles.hpp"

#include <chrono>
#include <cstdio>

#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/options.hpp"

namespace mltool::slide {

void apply_roi(Selection& selection, nlohmann::json& record, const SlideRoi& roi,
               double size_level0, double min_roi) {
  if (!roi.enabled) return;
  selection.roi = roi;
  record["roi"] = roi_json(roi);
  if (!roi.roi) return;  // no file, --roi-missing all: the tissue test alone
  const std::vector<double> b = roi.roi->bounds();
  const double width = record.value("width", 0.0), height = record.value("height", 0.0);
  if (b[2] <= 0 || b[3] <= 0 || b[0] >= width || b[1] >= height)
    log::warn(record.value("id", "") + ": the regions of " + roi.file + " (x " +
              util::number_text(b[0]) + "–" + util::number_text(b[2]) + ", y " +
              util::number_text(b[1]) + "–" + util::number_text(b[3]) +
              ") lie outside the slide (" + util::number_text(width) + " × " +
              util::number_text(height) +
              " level-0 pixels): no tile is kept; are they another image's, or not in level-0 "
              "pixels?");
  const auto start = std::chrono::steady_clock::now();
  std::vector<KeptTile> kept;
  kept.reserve(selection.kept.size());
  for (KeptTile k : selection.kept) {
    k.roi = roi.roi->share(static_cast<double>(k.x), static_cast<double>(k.y), size_level0);
    if (k.roi >= min_roi - 1e-9) kept.push_back(k);
  }
  log::debug(record.value("id", "") + ": ROI shares of " + std::to_string(selection.kept.size()) +
             " tiles in " +
             util::number_text(
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count()) +
             " ms; " + std::to_string(kept.size()) + " kept");
  selection.kept = std::move(kept);
}

void require_same_roi(const io::TileStore& store, const std::string& id, const SlideRoi& roi,
                      const std::string& path) {
  if (!roi.enabled) return;
  const auto record = store.record("slides", id);
  if (!record) return;
  const nlohmann::json before = record->value("roi", nlohmann::json());
  const std::string was = before.is_object() ? before.value("sha256", "") : "";
  const std::string now = roi.roi ? roi.roi->sha256() : "";
  if (was == now) return;
  const auto text = [](const std::string& file, const std::string& sha) {
    return sha.empty() ? std::string("no ROI file")
                       : file + " (SHA-256 " + sha.substr(0, 12) + "…)";
  };
  throw InputError(
      at_file(path, "slide '" + id + "' is in " + store.path() + " with tiles chosen by " +
                        text(before.is_object() ? before.value("file", "") : "", was) +
                        ", but now by " + text(roi.file, now) +
                        ": the regions changed; tile into a new store, or start this one over with "
                        "--overwrite"));
}

void roi_overlay(const Selection& selection, double sx, double sy, double min_roi,
                 QcOverlay& overlay, QcCaption& caption) {
  const SlideRoi& r = selection.roi;
  if (!r.enabled) return;
  if (!r.roi) {
    caption.roi = "regions of interest: no ROI file (--roi-missing all), tissue alone";
    return;
  }
  for (const Ring& ring : r.roi->rings()) {
    Ring scaled;
    scaled.reserve(ring.size());
    for (const auto& [x, y] : ring) scaled.emplace_back(x * sx, y * sy);
    overlay.roi.push_back(std::move(scaled));
  }
  std::string classes;
  for (const auto& c : r.roi->classes())
    classes += (classes.empty() ? "" : ", ") + (c.empty() ? "unclassified" : c);
  char share[32];
  std::snprintf(share, sizeof share, "%.0f%%", min_roi * 100);
  const auto slash = r.file.rfind('/');
  caption.roi =
      "regions of interest: " + r.file.substr(slash == std::string::npos ? 0 : slash + 1) + ", " +
      std::to_string(r.roi->regions()) + " region(s) (" + classes + "); tiles kept with ≥ " +
      share + " inside";
}

}  // namespace mltool::slide
