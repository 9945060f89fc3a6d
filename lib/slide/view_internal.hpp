// The pieces of `mltool view` (slide/view.hpp): one slide's pyramid, its page and data, the
// index. Not a public header.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/slide/openslide.hpp"
#include "mltool/slide/view.hpp"

namespace mltool::slide::view {

/// What a page draws besides the pyramid, in level-0 pixels.
struct SlideOverlays {
  /// Tissue outline: rings of [x0, y0, x1, y1, ...] (exteriors and holes alike).
  std::vector<std::vector<double>> tissue;
  /// The kept tiles (a tile store's): {"key", "x", "y", "size", "tissue"} columns.
  nlohmann::json tiles;
};

/// One slide to show: where it is read from and what is drawn over it.
struct SlideSource {
  std::string id;
  std::string path;   ///< what Slide::open reads
  std::string store;  ///< the tile store that named it, or ""
  std::optional<double> mpp;
  SlideOverlays overlays;
};

/// The page of slide `id`: <id>.html, but index.slide.html for the id "index" (index.html is
/// the site's index).
std::string page_name(const std::string& id);

/// DeepZoom levels of a w × h image: ceil(log2(max(w, h))) + 1.
int deepzoom_levels(std::int64_t width, std::int64_t height);

/// Writes `slide`'s pyramid as `dir`/<level>/<col>_<row>.jpeg (the DeepZoom layout), reading
/// each level from the slide's nearest finer level and resampling with libvips.
void write_pyramid(const Slide& slide, const std::string& dir, const ViewJob& job);

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
