// A slide's records in the tile store as tile_slide writes them (not a public header; the
// exact JSON of each is in docs/formats.md#tile-store): "slides", "tiles", "mask", "done".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/slide/geometry.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/roi.hpp"
#include "mltool/slide/segmenter.hpp"
#include "mltool/slide/tiler.hpp"
#include "mltool/slide/tissue.hpp"
#include "thumbnail.hpp"
#include "tile_writer.hpp"

namespace mltool::slide {

/// What identifies a slide in the store.
struct Identity {
  std::string id;
  std::string quickhash;  ///< OpenSlide's; "" when the format has none
  std::string abs_path;   ///< a DICOMweb series' URL
};

/// The tiles to keep, and what chose them: the thumbnail (for tissue or QC) and tissue mask.
struct Selection {
  std::optional<Thumbnail> thumb;
  std::optional<Mask> mask;  ///< otsu: on the thumbnail; model: the class map's tissue cells
  std::optional<double> tissue_fraction;        ///< otsu, model
  std::optional<ClassMap> classes;              ///< model
  const SegmenterContract* contract = nullptr;  ///< model
  std::vector<KeptTile> kept;                   ///< in key order
  SlideRoi roi;                                 ///< tile --roi: the regions tiles were kept by
};

/// The "slides" record: the slide, how it is read and tiled, and the thumbnail.
nlohmann::json slide_json(const Slide& slide, const Identity& who, const ReadPlan& plan,
                          const TileGrid& grid, const io::TileSettings& s,
                          const Selection& selection);

/// The "tiles" record: `kept` but the tiles of `left_out` (both in key order), as columns.
nlohmann::json kept_json(const std::vector<KeptTile>& kept,
                         const std::vector<TileFailure>& left_out);

/// The "done" marker of `report`; with "failed_tiles" where it has any.
nlohmann::json done_json(const SlideReport& report);

/// The failed tiles a done marker lists (none when it has no "failed_tiles"). FormatError
/// naming `where` when the list is malformed.
std::vector<TileFailure> recorded_failures(const nlohmann::json& done, const std::string& where);

/// The "mask" record: the tissue mask tiles were kept by, for outlines (export), with the class
/// map where a segmenter made it. `selection` has a mask.
std::string mask_record(const Selection& selection);

/// A segmented slide's classes for its "slides" record: {name: {"pixels", "fraction", "mm2"}} in
/// the model's class order, the model's pixels being `model_mpp` µm wide.
nlohmann::json class_areas_json(const ClassMap& map, const SegmenterContract& contract);

}  // namespace mltool::slide
