// A slide's µm per level-0 pixel and where it came from (not a public header).
#pragma once

#include <optional>
#include <string>

#include "mltool/slide/openslide.hpp"
#include "mltool/slide/tiler.hpp"

namespace mltool::slide {

struct SlideMpp {
  std::optional<double> mpp;  ///< µm per level-0 pixel, or nothing
  std::string source;         ///< "table", "override", "metadata", "power" or "none"
};

/// In this order: the slide's row of --slide-mpp-table (by the path as given, its absolute path,
/// then the id),
/// --slide-mpp, the slide's usable metadata (slide_mpp), and with --mpp-from-power 10 / the
/// objective power it declares.
SlideMpp resolve_slide_mpp(const Slide& slide, const std::string& id, const TileJob& job);

}  // namespace mltool::slide
