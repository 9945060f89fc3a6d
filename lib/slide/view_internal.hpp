// The pieces of `mltool view` (slide/view.hpp): one slide's pyramid, its page and data, the
// index. Not a public header.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/io/tile_store.hpp"
#include "mltool/slide/openslide.hpp"
#include "mltool/slide/view.hpp"

namespace mltool::slide::view {

/// What a page draws besides the pyramid, in level-0 pixels.
struct SlideOverlays {
  /// Tissue outline: rings of [x0, y0, x1, y1, ...] (exteriors and holes alike).
  std::vector<std::vector<double>> tissue;
  /// The kept tiles (a tile store's): {"key", "x", "y", "size", "tissue"} columns.
  nlohmann::json tiles;
  /// Regions of interest (--roi, or the store's): rings as `tissue`'s.
  std::vector<std::vector<double>> roi;
  /// A segmenter's artifact classes (a store tiled with --tissue MODEL.pt):
  /// [{"name", "colour": "#rrggbb", "rings"}].
  nlohmann::json artifacts = nlohmann::json::array();
};

/// Rings of level-0 pixels as the page draws them: [x0, y0, x1, y1, ...].
using FlatRings = std::vector<std::vector<double>>;

/// The outline of the pixels of `mask` (nonzero) scaled to level-0 pixels.
FlatRings mask_rings(const std::uint8_t* mask, int width, int height, double downsample_x,
                     double downsample_y);

/// The store's artifact classes of `mask` as SlideOverlays::artifacts (view_regions.cpp).
nlohmann::json artifact_overlays(const io::TissueMask& mask);

/// The regions of GeoJSON file `file` (QuPath's; slide/roi.hpp's checks and bounds).
FlatRings roi_file_rings(const std::string& file);

/// The regions a store kept a slide's tiles by: its record's "roi" names the file (and its
/// SHA-256), read again with the store's --roi-class `classes`; none, with a warning naming
/// --roi, where the file is gone or changed.
FlatRings roi_record_rings(const nlohmann::json& slide_record,
                           const std::vector<std::string>& classes, const std::string& where);

/// One heat layer of a prediction: a value per tile key, and how values map to the colour
/// bar's [0, 1] as predict's heatmaps map them: as they are (probabilities), over the slide's
/// range (a regression's prediction, a risk), or over the slide's largest (attention).
struct Layer {
  enum class Scale { unit, range, max };
  std::string name;
  Scale scale = Scale::unit;
  std::unordered_map<std::string, double> values;
};

/// What a predict output directory says of one slide.
struct SlidePredictions {
  std::string call;         ///< the label most tiles were predicted, the bag's label, a mean
  std::string probability;  ///< its probability, share of tiles, or the labels' means
  std::vector<Layer> layers;
};

/// A predict output directory (docs/predict.md#output), as far as the viewer reads it.
struct PredictDir {
  std::string store;  ///< the tile store its heatmaps came from
  std::map<std::string, SlidePredictions> slides;
};

/// Whether `path` is a predict output directory: predictions.csv and .predict/job.json.
bool is_predict_dir(const std::string& path);

/// Reads predict output directory `dir` (view_predictions.cpp): bounded sizes, checked
/// numbers; FormatError or InputError naming the file (and line).
PredictDir read_predict_dir(const std::string& dir);

/// One slide to show: where it is read from and what is drawn over it.
struct SlideSource {
  std::string id;
  std::string path;         ///< what Slide::open reads
  std::string store;        ///< the tile store that named it, or ""
  std::string predictions;  ///< the predict output directory, or ""
  std::optional<double> mpp;
  SlideOverlays overlays;
  std::optional<SlidePredictions> predicted;
};

/// DeepZoom levels of a w × h image: ceil(log2(max(w, h))) + 1.
int deepzoom_levels(std::int64_t width, std::int64_t height);

/// Tiles a pyramid took: all of them, and the slide's own JPEG tiles passed through.
struct PyramidCount {
  std::int64_t tiles = 0, passed = 0;
};

/// Writes `slide`'s pyramid as `dir`/<level>/<col>_<row>.jpeg (the DeepZoom layout), reading
/// each level from the slide's nearest finer level and resampling with libvips; where a level
/// is one of the slide's own and a tile exactly one of its JPEG tiles, that tile's bytes
/// (job.passthrough auto).
PyramidCount write_pyramid(const Slide& slide, const std::string& dir, const ViewJob& job);

/// The site's shared files: leaflet/ (from job.leaflet), viewer.js, viewer.css.
void write_assets(const ViewJob& job);

/// <id>.dzi, <id>.data.js and <id>.html.
void write_slide_page(const ViewJob& job, const SlideSource& source, const ViewedSlide& shown);

/// index.html over every slide of the site.
void write_index(const ViewJob& job, const std::vector<ViewedSlide>& slides);

/// The viewer's script and style (view_viewer.cpp).
const char* viewer_js();
const char* viewer_css();

}  // namespace mltool::slide::view
