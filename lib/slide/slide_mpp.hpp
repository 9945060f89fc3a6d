// A slide's µm per level-0 pixel and where it came from (not a public header).
#pragma once

#include <optional>
#include <string>

#include "mltool/slide/openslide.hpp"
#include "mltool/slide/tiler.hpp"

namespace mltool::slide {

struct SlideMpp {
  std::optional<double> mpp;  ///< µm per level-0 pixel, or nothing
  std::string source;         ///< "table", "override", "metadata", "content", "power" or "none"
  std::optional<MppEstimate> estimate;  ///< the tissue's estimate, where one was made
};

/// In this order: the slide's row of --slide-mpp-table (by the path as given, its absolute path,
/// then the id), --slide-mpp, the slide's usable metadata (slide_mpp; with --check-mpp checked
/// against the tissue's estimate: a warning, or InputError naming both values and the options
/// that override), with --mpp-from-content the estimate from the tissue unless it is
/// uncertain, and with --mpp-from-power 10 / the objective power it declares. `estimate_too`
/// makes the estimate whatever the source (for the QC picture).
SlideMpp resolve_slide_mpp(const Slide& slide, const std::string& id, const TileJob& job,
                           bool estimate_too = false);

}  // namespace mltool::slide
