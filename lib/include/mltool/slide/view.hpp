// mltool view: an offline deep-zoom viewer of slides and tile stores (docs/view.md). A site is
// a directory that opens over file:// with no network and no server:
//
//   index.html             one row per slide: thumbnail, id, µm/px, source, tile count
//   <id>.html              the slide's viewer (Leaflet, CRS.Simple) with its overlays
//   <id>.data.js           what the page draws: geometry, tissue outline, tiles
//   <id>.dzi, <id>_files/  the pyramid as DeepZoom tiles (<level>/<col>_<row>.jpeg)
//   leaflet/, viewer.js    the viewer library (Debian's libjs-leaflet) and mltool's script
//
// A slide's pyramid is written aside (.<id>_files.partial) and renamed into place with its
// marker, so a killed run leaves no half pyramid and a rerun skips the slides already done.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mltool/io/dicomweb.hpp"
#include "mltool/slide/tiler.hpp"
#include "mltool/util/options.hpp"

namespace mltool::slide {

struct ViewJob {
  std::string site;  ///< -o: the site directory
  int tile_size = 256;
  int quality = 85;  ///< JPEG quality of the pyramid's tiles
  bool overwrite = false;
  /// Store a slide level's own JPEG tiles as the pyramid's where a DeepZoom tile is exactly
  /// one of them (as tile --passthrough), or decode and encode every tile.
  Passthrough passthrough = Passthrough::automatic;
  int threads = 0;  ///< 0: one per allowed core
  /// µm per level-0 pixel of every slide given directly, instead of their metadata.
  std::optional<double> slide_mpp;
  /// --roi: QuPath GeoJSON regions to draw: a file (one slide), or a directory of
  /// <slide id>.geojson (or <file name>.geojson) files, as tile --roi reads them.
  std::string roi;
  /// Where Debian's libjs-leaflet is (copied into the site).
  std::string leaflet = "/usr/share/javascript/leaflet";
  io::DicomwebOptions dicomweb;
};

/// The options of `mltool view`, in synopsis order.
const util::Options<ViewJob>& view_options();

/// One slide of a site.
struct ViewedSlide {
  std::string id;
  std::string source;  ///< the slide's path or URL (redacted)
  std::string store;   ///< the tile store it came from, or ""
  std::int64_t width = 0, height = 0;
  std::optional<double> mpp;
  std::string predictions;         ///< the predict output directory it came from, or ""
  std::string call;                ///< its prediction's call ("" without one)
  std::string probability;         ///< the call's probability or share of tiles
  std::int64_t tiles = 0;          ///< kept tiles drawn on the grid (0 for a slide given directly)
  int levels = 0;                  ///< DeepZoom levels
  std::int64_t pyramid_tiles = 0;  ///< DeepZoom tiles written (0 when the pyramid was kept)
  std::int64_t passed = 0;         ///< of them, the slide's own JPEG tiles passed through
  bool reused = false;             ///< its pyramid was already complete (a resumed run)
  double seconds = 0;
};

struct ViewReport {
  std::string site;
  std::vector<ViewedSlide> slides;
};

/// Writes the site job.site for `inputs` (slide files, DICOMweb URLs, tile stores, predict
/// output directories: the slides of the store they name, with their predictions). Holds the
/// site's output lock for the run. InputError naming the input for one that cannot be read;
/// UsageError for two slides with one id.
ViewReport write_site(const std::vector<std::string>& inputs, const ViewJob& job);

nlohmann::json to_json(const ViewReport& report);

/// The page of slide `id` in a site: <id>.html, but index.slide.html for the id "index"
/// (index.html is the site's index).
std::string site_page(const std::string& id);

/// Refuses (ResourceError naming --leaflet) a job whose Leaflet is not there: a command that
/// writes a site after a long run checks first.
void check_leaflet(const ViewJob& job);

}  // namespace mltool::slide
