// mltool view's run (slide/view.hpp): the inputs as slides, each slide's pyramid written aside
// and renamed into place, its page, then the index. The pieces: view_pyramid.cpp (DeepZoom
// tiles), view_pages.cpp (HTML and data), view_viewer.cpp (the script).
#include "mltool/slide/view.hpp"

#include <chrono>
#include <cstdio>
#include <map>

#include "mltool/io/dicomweb_options.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/slide/geometry.hpp"
#include "mltool/slide/roi.hpp"
#include "mltool/slide/slide_mpp_option.hpp"
#include "mltool/util/common_options.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/output_lock.hpp"
#include "view_internal.hpp"

namespace mltool::slide {

const util::Options<ViewJob>& view_options() {
  using J = ViewJob;
  static const util::Options<ViewJob> table = util::joined<J>(
      {{
           util::option(
               "-o,--output", &J::site,
               "The site directory (created; a rerun resumes it, skipping finished slides)")
               .required(),
           util::option("--tile-size", &J::tile_size,
                        "Side of the pyramid's DeepZoom tiles, pixels")
               .at_least(64)
               .at_most(4096),
           util::option("--quality", &J::quality, "JPEG quality of the pyramid's tiles")
               .at_least(1)
               .at_most(100),
           slide_mpp_option(
               &J::slide_mpp,
               "µm per level-0 pixel of the slides given directly, instead of their metadata"),
           util::option("--roi", &J::roi,
                        "QuPath GeoJSON regions to draw: a file (one slide), or a directory of "
                        "<slide id>.geojson files (as tile --roi); instead of a store's own"),
           util::option("--leaflet", &J::leaflet,
                        "Directory of Leaflet's leaflet.js and leaflet.css, copied into the site "
                        "(Debian's libjs-leaflet)"),
           util::choice(
               "--passthrough", &J::passthrough, kPassthroughChoices,
               "Store the slide's own JPEG tiles as the pyramid's where a DeepZoom tile is "
               "exactly one of them (auto), or decode and encode every tile (never)"),
           util::overwrite_option(&J::overwrite),
       },
       io::dicomweb_options(&J::dicomweb)});
  return table;
}

namespace view {
namespace {

using nlohmann::json;

// A store's "tiles/<id>" columns as the page's tiles: keys and level-0 squares.
json tile_columns(const json& tiles, const json& slide, const std::string& id) {
  const double size = slide.at("size_level0").get<double>();
  const auto& rows = tiles.at("row");
  const auto& cols = tiles.at("col");
  const auto& xs = tiles.at("x");
  const auto& ys = tiles.at("y");
  const auto& tissue = tiles.at("tissue");
  const std::size_t n = rows.size();
  if (cols.size() != n || xs.size() != n || ys.size() != n || tissue.size() != n)
    throw FormatError("columns of different lengths");
  json keys = json::array();
  for (std::size_t i = 0; i < n; ++i)
    keys.push_back(io::tile_key(id, rows[i].get<std::int64_t>(), cols[i].get<std::int64_t>()));
  return {{"key", std::move(keys)}, {"x", xs}, {"y", ys}, {"tissue", tissue}, {"size", size}};
}

SlideSource store_slide(const io::TileStore& store, const std::string& id) {
  SlideSource s;
  s.id = id;
  s.store = store.path();
  const auto where = store.path() + ": slide '" + id + "'";
  try {
    const auto slide = store.record("slides", id);
    const auto tiles = store.record("tiles", id);
    if (!slide || !tiles) throw FormatError("its records are missing");
    s.path = slide->at("path").get<std::string>();
    if (slide->contains("mpp") && slide->at("mpp").is_number()) s.mpp = slide->at("mpp");
    s.overlays.tiles = tile_columns(*tiles, *slide, id);
  } catch (const json::exception& e) {
    throw FormatError(where + ": malformed record: " + e.what());
  } catch (const FormatError& e) {
    throw FormatError(where + ": " + e.what());
  }
  if (const auto mask = store.tissue_mask(id)) {
    const auto& m = mask->mask;
    s.overlays.tissue =
        mask_rings(m.pixels.data(), m.width, m.height, mask->downsample_x, mask->downsample_y);
    s.overlays.artifacts = artifact_overlays(*mask);
  }
  const auto settings = store.settings();
  if (const auto slide = store.record("slides", id); slide && settings && settings->roi)
    s.overlays.roi = roi_record_rings(*slide, settings->roi->classes, where);
  return s;
}

std::vector<SlideSource> store_sources(const std::string& path) {
  const auto store = io::TileStore::open(path, false);
  std::vector<SlideSource> out;
  for (const auto& id : store.completed_slides()) out.push_back(store_slide(store, id));
  if (out.empty()) throw InputError(path + ": the tile store has no complete slide");
  return out;
}

// A predict output directory: the slides of its store it predicted (predict --slide chooses
// some), each with its predictions.
std::vector<SlideSource> predicted_sources(const std::string& dir) {
  auto predicted = read_predict_dir(dir);
  if (!io::TileStore::is_store(predicted.store))
    throw InputError(dir + ": the tile store its prediction names, " + predicted.store +
                     ", is not there (moved?): view the store where it is now");
  const auto store = io::TileStore::open(predicted.store, false);
  std::vector<SlideSource> out;
  for (const auto& id : store.completed_slides()) {
    const auto it = predicted.slides.find(id);
    if (it == predicted.slides.end()) continue;
    out.push_back(store_slide(store, id));
    out.back().predictions = dir;
    out.back().predicted = std::move(it->second);
    predicted.slides.erase(it);
  }
  for (const auto& [id, unused] : predicted.slides)
    log::warn(dir + ": slide '" + id + "' is not a complete slide of " + predicted.store +
              ": its predictions are not shown");
  if (out.empty())
    throw InputError(dir + ": none of the slides it predicted is a complete slide of " +
                     predicted.store);
  return out;
}

// A train run directory: its validation slides as train --view predicted them.
std::vector<SlideSource> run_sources(const std::string& dir) {
  const auto validation = util::join_path(dir, "validation");
  if (!is_predict_dir(validation))
    throw InputError(dir + ": a train run directory without its validation slides predicted " +
                     "(validation/): train it with --view, or predict its slides (mltool " +
                     "predict RUN FEATURES -o PRED) and view PRED");
  return predicted_sources(validation);
}

std::vector<SlideSource> sources_of(const std::string& input, const ViewJob& job) {
  if (!io::is_dicomweb_url(input) && is_predict_dir(input)) return predicted_sources(input);
  if (!io::is_dicomweb_url(input) && util::is_directory(input) &&
      util::exists(util::join_path(input, "run.json")))
    return run_sources(input);
  if (!io::is_dicomweb_url(input) && io::TileStore::is_store(input)) return store_sources(input);
  SlideSource s;
  s.id = io::slide_id_for(input);
  s.path = input;
  s.mpp = job.slide_mpp;
  return {std::move(s)};
}

std::vector<SlideSource> collect(const std::vector<std::string>& inputs, const ViewJob& job) {
  std::vector<SlideSource> all;
  std::map<std::string, std::string> seen;  // id -> the input that named it
  for (const auto& input : inputs) {
    for (auto& s : sources_of(input, job)) {
      const auto [it, fresh] = seen.emplace(s.id, input);
      if (!fresh)
        throw UsageError("two slides have the id '" + s.id + "' (" + it->second + " and " + input +
                         "): a site has one page per slide id; view them in two sites");
      all.push_back(std::move(s));
    }
  }
  return all;
}

// --roi: each slide's file, where it has one, replaces what its store kept.
void add_rois(std::vector<SlideSource>& sources, const ViewJob& job) {
  if (job.roi.empty()) return;
  if (!util::is_directory(job.roi) && sources.size() > 1)
    throw UsageError("--roi " + job.roi + " is one slide's regions, and " +
                     std::to_string(sources.size()) +
                     " slides are given: give --roi a directory of <slide id>.geojson files");
  for (auto& s : sources) {
    const auto file = roi_file_for(job.roi, s.path);
    if (!file.empty()) s.overlays.roi = roi_file_rings(file);
  }
}

std::string marker_text(const Slide& slide, const SlideSource& s, const ViewJob& job) {
  const auto& g = slide.geometry();
  return json{{"source", io::redacted_url(s.path)},
              {"width", g.levels.at(0).width},
              {"height", g.levels.at(0).height},
              {"tile_size", job.tile_size},
              {"quality", job.quality},
              {"passthrough", util::name_of(kPassthroughChoices, job.passthrough)}}
      .dump();
}

// The pyramid of one slide, written aside and renamed into place; true if it was already
// there (a resumed run).
bool ensure_pyramid(const Slide& slide, const SlideSource& s, const ViewJob& job, ViewedSlide& v) {
  const auto dir = util::join_path(job.site, s.id + "_files");
  const auto marker = util::join_path(dir, ".mltool-view.json");
  const auto want = marker_text(slide, s, job);
  if (!job.overwrite && util::exists(marker) && util::read_file(marker) == want) return true;
  const auto aside = util::join_path(job.site, "." + s.id + "_files.partial");
  if (util::exists(aside)) util::remove_tree(aside);
  util::make_directories(aside);
  const auto written = write_pyramid(slide, aside, job);
  v.pyramid_tiles = written.tiles;
  v.passed = written.passed;
  util::write_file_atomic(util::join_path(aside, ".mltool-view.json"), want);
  if (util::exists(dir)) util::remove_tree(dir);
  if (std::rename(aside.c_str(), dir.c_str()) != 0)
    throw ResourceError(aside + ": cannot rename it to " + dir);
  return false;
}

ViewedSlide show_slide(const SlideSource& s, const ViewJob& job) {
  const auto start = std::chrono::steady_clock::now();
  io::DicomwebOptions web = job.dicomweb;
  if (s.store.empty()) io::allow_origin(web, s.path);
  const Slide slide = Slide::open(s.path, web);
  ViewedSlide v;
  v.id = s.id;
  v.source = io::redacted_url(s.path);
  v.store = s.store;
  v.predictions = s.predictions;
  if (s.predicted) {
    v.call = s.predicted->call;
    v.probability = s.predicted->probability;
  }
  v.width = slide.geometry().levels.at(0).width;
  v.height = slide.geometry().levels.at(0).height;
  v.mpp = s.mpp ? s.mpp : slide.geometry().mpp_x;
  v.tiles = s.overlays.tiles.is_null() ? 0 : std::int64_t(s.overlays.tiles.at("key").size());
  v.levels = deepzoom_levels(v.width, v.height);
  v.reused = ensure_pyramid(slide, s, job, v);
  write_slide_page(job, s, v);
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log::info("view: " + s.id + (v.reused ? " (pyramid kept)" : "") + " -> " +
            util::join_path(job.site, site_page(s.id)));
  return v;
}

}  // namespace
}  // namespace view

ViewReport write_site(const std::vector<std::string>& inputs, const ViewJob& job) {
  util::check_options(view_options(), job);
  if (inputs.empty()) throw UsageError("no slides or tile stores given");
  auto sources = view::collect(inputs, job);
  view::add_rois(sources, job);
  util::make_directories(job.site);
  util::OutputLock lock(job.site, "mltool view");
  view::write_assets(job);
  ViewReport report;
  report.site = job.site;
  for (const auto& s : sources) report.slides.push_back(view::show_slide(s, job));
  view::write_index(job, report.slides);
  return report;
}

nlohmann::json to_json(const ViewReport& report) {
  nlohmann::json slides = nlohmann::json::array();
  for (const auto& s : report.slides)
    slides.push_back(
        {{"id", s.id},
         {"source", s.source},
         {"store", s.store.empty() ? nlohmann::json() : nlohmann::json(s.store)},
         {"width", s.width},
         {"height", s.height},
         {"mpp", s.mpp ? nlohmann::json(*s.mpp) : nlohmann::json()},
         {"predictions", s.predictions.empty() ? nlohmann::json() : nlohmann::json(s.predictions)},
         {"call", s.call},
         {"probability", s.probability},
         {"tiles", s.tiles},
         {"levels", s.levels},
         {"pyramid_tiles", s.pyramid_tiles},
         {"passthrough", s.passed},
         {"reused", s.reused},
         {"seconds", s.seconds},
         {"page", util::join_path(report.site, site_page(s.id))}});
  return {{"site", report.site},
          {"index", util::join_path(report.site, "index.html")},
          {"slides", std::move(slides)}};
}

std::string site_page(const std::string& id) {
  return id == "index" ? "index.slide.html" : id + ".html";
}

void check_leaflet(const ViewJob& job) {
  const auto js = util::join_path(job.leaflet, "leaflet.js");
  if (!util::exists(js))
    throw ResourceError(js +
                        ": Leaflet is not there: install Debian's libjs-leaflet "
                        "(scripts/setup.sh does) or give its directory with --leaflet DIR");
}

}  // namespace mltool::slide
