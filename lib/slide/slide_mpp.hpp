// A slide's µm per level-0 pixel and where it came from (not a public header).
#pragma once

#include <optional>
#include <string>

#include "mltool/slide/openslide.hpp"
#include "mltool/slide/tiler.hpp"

namespace mltool::slide {

/// Where a slide's µm/px came from, in the order of precedence below.
enum class MppSource { table, override, metadata, content, power, none };

/// Its name in the store's slide record and the reports ("table", ..., "none").
const char* to_string(MppSource source);

struct SlideMpp {
  std::optional<double> mpp;  ///< µm per level-0 pixel, or nothing
  MppSource source = MppSource::none;
  std::optional<MppEstimate> estimate = std::nullopt;  ///< the tissue's estimate, where made
  /// --mpp-from-content with a target finer than the estimate but inside its interval: level 0
  /// serves it as it is, and `mpp` is the target (fit_target_to_estimate).
  bool level0_as_target = false;
};

/// In this order: the slide's row of --slide-mpp-table (by the path as given, its absolute path,
/// then the id), --slide-mpp, the slide's usable metadata (slide_mpp; with --check-mpp checked
/// against the tissue's estimate: a warning, or InputError naming both values and the options
/// that override), with --mpp-from-content the estimate from the tissue unless it is
/// uncertain, and with --mpp-from-power 10 / the objective power it declares. `estimate_too`
/// makes the estimate whatever the source (for the QC picture).
SlideMpp resolve_slide_mpp(const Slide& slide, const std::string& id, const TileJob& job,
                           bool estimate_too = false);

/// With --mpp-from-content, a target `target_mpp` finer than the estimate is one level 0 can
/// serve when it lies inside the estimate's interval: the estimate cannot tell the two apart,
/// so level 0 is read as it is (no resampling), `mpp.mpp` becomes the target and
/// `level0_as_target` is set, with a warning naming both. A target finer than the interval's
/// fine end is refused: InputError naming `name`, the estimate with its interval and what to
/// ask for instead. Nothing happens for another source, no target, or one the estimate serves.
void fit_target_to_estimate(SlideMpp& mpp, std::optional<double> target_mpp,
                            const std::string& name, const std::string& id);

}  // namespace mltool::slide
