// The site's pages (slide/view.hpp): each slide's page, its data script and .dzi, the index,
// and the shared files. Every text is escaped and every link encoded by util/html.hpp, and the
// data reaches the page as JSON in a script of its own (a page over file:// may not fetch), so
// a slide id such as `a&b #1` is data everywhere.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "mltool/slide/heatmap.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/html.hpp"
#include "view_internal.hpp"

namespace mltool::slide::view {
namespace {

using nlohmann::json;
using util::href;
using util::html_text;

// The files of libjs-leaflet a page loads (the layer control's icons with them).
const char* const kLeafletFiles[] = {"leaflet.js",
                                     "leaflet.css",
                                     "images/layers.png",
                                     "images/layers-2x.png",
                                     "images/marker-icon.png",
                                     "images/marker-icon-2x.png",
                                     "images/marker-shadow.png"};

std::string mpp_text(const std::optional<double>& mpp) {
  if (!mpp) return "unknown";
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", *mpp);
  return text;
}

// The DeepZoom level whose single tile holds the whole slide: the index's thumbnail.
int thumbnail_level(const ViewedSlide& s, int tile) {
  const double side = static_cast<double>(std::max(s.width, s.height));
  const int coarser = side <= tile ? 0 : static_cast<int>(std::ceil(std::log2(side / tile)));
  return std::max(0, s.levels - 1 - coarser);
}

std::string thumbnail_src(const ViewedSlide& s, int tile) {
  return href(s.id + "_files/" + std::to_string(thumbnail_level(s, tile)) + "/0_0.jpeg");
}

std::string dzi_text(const ViewedSlide& s, int tile) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<Image xmlns=\"http://schemas.microsoft.com/deepzoom/2008\" Format=\"jpeg\" "
         "Overlap=\"0\" TileSize=\"" +
         std::to_string(tile) + "\">\n  <Size Width=\"" + std::to_string(s.width) + "\" Height=\"" +
         std::to_string(s.height) + "\"/>\n</Image>\n";
}

// predict's heatmap colours from 0 to 1 (slide::heat_colour), the colour bar's and the
// heat layers' in the page.
json palette() {
  json colours = json::array();
  for (int i = 0; i < 256; ++i) {
    const auto c = heat_colour(static_cast<float>(i / 255.0));
    char hex[8];
    std::snprintf(hex, sizeof hex, "#%02x%02x%02x", c[0], c[1], c[2]);
    colours.push_back(hex);
  }
  return colours;
}

// A heat layer over the page's tiles: values in the tiles' order (null where a tile has
// none), and the values the colour bar's ends stand for.
json layer_json(const Layer& layer, const json& tiles) {
  json values = json::array();
  double lo = 0, hi = 1;
  bool any = false;
  for (const auto& key : tiles.at("key")) {
    const auto it = layer.values.find(key.get<std::string>());
    if (it == layer.values.end()) {
      values.push_back(nullptr);
      continue;
    }
    values.push_back(it->second);
    if (layer.scale == Layer::Scale::unit) continue;
    lo = any ? std::min(lo, it->second) : (layer.scale == Layer::Scale::max ? 0 : it->second);
    hi = any ? std::max(hi, it->second) : it->second;
    any = true;
  }
  return {{"name", layer.name}, {"lo", lo}, {"hi", hi}, {"values", std::move(values)}};
}

json layers_json(const SlideSource& source) {
  json layers = json::array();
  if (!source.predicted || source.overlays.tiles.is_null()) return layers;
  for (const auto& layer : source.predicted->layers)
    layers.push_back(layer_json(layer, source.overlays.tiles));
  return layers;
}

std::string data_script(const SlideSource& source, const ViewedSlide& s, int tile) {
  json data = {{"id", s.id},
               {"width", s.width},
               {"height", s.height},
               {"mpp", s.mpp ? json(*s.mpp) : json()},
               {"tile_size", tile},
               {"levels", s.levels},
               {"tiles_url", util::url_path_segment(s.id + "_files")},
               {"tissue", source.overlays.tissue},
               {"roi", source.overlays.roi},
               {"artifacts", source.overlays.artifacts},
               {"tiles", source.overlays.tiles},
               {"layers", layers_json(source)},
               {"palette", palette()}};
  return "// mltool view: what " + site_page(s.id) + " draws (generated)\nwindow.MLTOOL_VIEW = " +
         data.dump(-1, ' ', false, json::error_handler_t::replace) + ";\n";
}

std::string source_text(const ViewedSlide& s) {
  if (!s.predictions.empty()) return s.source + " (predictions: " + s.predictions + ")";
  return s.store.empty() ? s.source : s.source + " (" + s.store + ")";
}

std::string call_text(const ViewedSlide& s) {
  if (s.call.empty() && s.probability.empty()) return "—";
  return s.call + (s.call.empty() || s.probability.empty() ? "" : " · ") + s.probability;
}

// The report.html of the prediction a slide's call comes from, relative to the site where it
// can be (a site inside its prediction, as predict --view writes, keeps the link when the two
// are copied together), else absolute.
std::string report_href(const std::string& site, const std::string& predictions) {
  namespace fs = std::filesystem;
  const auto report =
      (fs::path(util::absolute_path(predictions)) / "report.html").lexically_normal();
  const auto relative = report.lexically_relative(fs::path(util::absolute_path(site)));
  return href((relative.empty() ? report : relative).generic_string());
}

// The index's cell of a slide's call: a link to its prediction's report.
std::string call_cell(const std::string& site, const ViewedSlide& s) {
  if (s.predictions.empty()) return html_text(call_text(s));
  return "<a href=\"" + report_href(site, s.predictions) + "\">" + html_text(call_text(s)) + "</a>";
}

std::string slide_html(const ViewedSlide& s) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    << "<title>" << html_text(s.id) << " · mltool view</title>\n"
    << "<link rel=\"stylesheet\" href=\"leaflet/leaflet.css\">\n"
    << "<link rel=\"stylesheet\" href=\"viewer.css\">\n</head>\n<body>\n"
    << "<header id=\"bar\"><a href=\"index.html\">All slides</a>"
    << "<span class=\"id\">" << html_text(s.id) << "</span>"
    << "<span>" << s.width << " × " << s.height << " px</span>"
    << "<span>" << html_text(mpp_text(s.mpp)) << " µm/px</span>"
    << (s.predictions.empty() ? "" : "<span class=\"call\">" + html_text(call_text(s)) + "</span>")
    << "<span class=\"source\">" << html_text(s.source) << "</span></header>\n"
    << "<div id=\"map\"></div>\n<div id=\"tileinfo\" hidden></div>\n"
    << "<script src=\"leaflet/leaflet.js\"></script>\n"
    << "<script src=\"" << href(s.id + ".data.js") << "\"></script>\n"
    << "<script src=\"viewer.js\"></script>\n</body>\n</html>\n";
  return h.str();
}

void copy_file(const std::string& from, const std::string& to) {
  util::write_file_atomic(to, util::read_file(from));
}

}  // namespace

void write_assets(const ViewJob& job) {
  check_leaflet(job);
  const auto dir = util::join_path(job.site, "leaflet");
  util::make_directories(util::join_path(dir, "images"));
  for (const char* name : kLeafletFiles) {
    const auto from = util::join_path(job.leaflet, name);
    if (util::exists(from)) copy_file(from, util::join_path(dir, name));
  }
  util::write_file_atomic(util::join_path(job.site, "viewer.js"), viewer_js());
  util::write_file_atomic(util::join_path(job.site, "viewer.css"), viewer_css());
}

void write_slide_page(const ViewJob& job, const SlideSource& source, const ViewedSlide& shown) {
  util::write_file_atomic(util::join_path(job.site, shown.id + ".dzi"),
                          dzi_text(shown, job.tile_size));
  util::write_file_atomic(util::join_path(job.site, shown.id + ".data.js"),
                          data_script(source, shown, job.tile_size));
  util::write_file_atomic(util::join_path(job.site, site_page(shown.id)), slide_html(shown));
}

void write_index(const ViewJob& job, const std::vector<ViewedSlide>& slides) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<title>mltool view: " << slides.size() << " slide" << (slides.size() == 1 ? "" : "s")
    << "</title>\n<link rel=\"stylesheet\" href=\"viewer.css\">\n</head>\n<body class=\"index\">\n"
    << "<h1>Slides</h1>\n<table id=\"slides\">\n<thead><tr><th></th><th>Slide</th>"
    << "<th>µm/px</th><th>Size "
       "(px)</th><th>Source</th><th>Tiles</th><th>Call</th></tr></thead>\n<tbody>\n";
  for (const auto& s : slides) {
    const auto page = href(site_page(s.id));
    h << "<tr><td><a href=\"" << page << "\"><img class=\"thumb\" alt=\"\" src=\""
      << thumbnail_src(s, job.tile_size) << "\"></a></td>"
      << "<td><a class=\"slide\" href=\"" << page << "\">" << html_text(s.id) << "</a></td>"
      << "<td>" << html_text(mpp_text(s.mpp)) << "</td>"
      << "<td>" << s.width << " × " << s.height << "</td>"
      << "<td>" << html_text(source_text(s)) << "</td><td>"
      << (s.store.empty() ? std::string("—") : std::to_string(s.tiles))
      << "</td><td class=\"call\">" << call_cell(job.site, s) << "</td></tr>\n";
  }
  h << "</tbody>\n</table>\n</body>\n</html>\n";
  util::write_file_atomic(util::join_path(job.site, "index.html"), h.str());
}

}  // namespace mltool::slide::view
