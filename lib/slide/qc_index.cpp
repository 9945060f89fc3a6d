// The contact sheet of a run (qc.hpp, write_qc_index): one static HTML page, no scripts, no
// external resources, so it opens from the QC directory anywhere (a laptop, a shared drive).
#include <cstdio>
#include <string>
#include <vector>

#include "mltool/slide/qc.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/html.hpp"

namespace mltool::slide {
namespace {

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

constexpr const char* kStyle = R"(<style>
body{font-family:sans-serif;margin:16px;background:#f4f4f4;color:#222}
.sheet{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:3px solid #ccc;padding:6px;width:300px;font-size:13px}
.card img{display:block;max-width:300px;max-height:300px;margin:0 auto 4px}
.card .none{height:120px;display:flex;align-items:center;justify-content:center;color:#888}
.card.empty{border-color:#e08000;background:#fff4e0}
.card.failed{border-color:#d00000;background:#ffe8e8}
.status{font-weight:bold}.empty .status,.failed .status{color:#b00000}
.error{color:#b00000;white-space:pre-wrap;word-break:break-word}
</style>)";

// One slide's card: its picture, id, status and counts.
std::string card(const std::string& dir, const SlideReport& r) {
  const bool failed = r.status == SlideStatus::failed;
  const bool empty = !failed && r.tiles == 0 && r.status != SlideStatus::no_roi;
  const std::string png = r.id + ".png";
  std::string out = "<div class=\"card" +
                    std::string(failed  ? " failed"
                                : empty ? " empty"
                                        : "") +
                    "\" id=\"" + util::html_attribute(r.id) + "\">\n";
  if (!failed && !r.id.empty() && util::exists(util::join_path(dir, png)))
    out += "<a href=\"" + util::href(png) + "\"><img src=\"" + util::href(png) + "\" alt=\"" +
           util::html_attribute(r.id) + "\"></a>\n";
  else
    out += "<div class=\"none\">no QC picture</div>\n";
  out += "<div><b>" + util::html_text(r.id.empty() ? r.path : r.id) +
         "</b> <span class=\"status\">" + util::html_text(to_string(r.status)) +
         (empty ? " — NO TILES" : "") + "</span></div>\n";
  if (failed) return out + "<div class=\"error\">" + util::html_text(r.error) + "</div>\n</div>\n";
  out += "<div class=\"counts\">tiles " + std::to_string(r.tiles) + " / " +
         std::to_string(r.grid_tiles) + " grid";
  if (r.tissue_fraction) out += ", tissue " + fixed(*r.tissue_fraction * 100, 1) + "%";
  out += "</div>\n<div>" + (r.mpp ? fixed(*r.mpp, 4) + " µm/px" : std::string("µm/px unknown")) +
         (r.mpp_source.empty() ? "" : " (" + util::html_text(r.mpp_source) + ")") +
         (r.reader.empty() ? "" : ", " + util::html_text(r.reader)) + "</div>\n";
  if (r.mpp_estimate)
    out += "<div class=\"mpp\">metadata " +
           util::html_text(metadata_mpp_text(r.metadata_mpp, r.metadata_problem)) + "; tissue " +
           util::html_text(estimate_text(*r.mpp_estimate)) + "</div>\n";
  if (r.status == SlideStatus::incomplete)
    out += "<div class=\"error\">" + util::html_text(r.error) + "</div>\n";
  // r.path is redacted where the report is made (tile_slide, failed_report): no credentials.
  return out + "<div class=\"path\">" + util::html_text(r.path) + "</div>\n</div>\n";
}

// "12 slides: 9 tiled, 1 empty, 1 skipped, 1 failed; 3456 tiles" ("N incomplete, " before
// "failed" where there are any).
std::string summary(const std::vector<SlideReport>& slides) {
  int tiled = 0, empty = 0, skipped = 0, failed = 0, incomplete = 0, no_roi = 0;
  std::int64_t tiles = 0;
  for (const auto& r : slides) {
    tiled += r.status == SlideStatus::tiled;
    empty += r.status == SlideStatus::empty;
    skipped += r.status == SlideStatus::skipped;
    failed += r.status == SlideStatus::failed;
    incomplete += r.status == SlideStatus::incomplete;
    no_roi += r.status == SlideStatus::no_roi;
    tiles += r.tiles;
  }
  return std::to_string(slides.size()) + " slides: " + std::to_string(tiled) + " tiled, " +
         std::to_string(empty) + " empty, " + std::to_string(skipped) + " skipped, " +
         (incomplete ? std::to_string(incomplete) + " incomplete, " : std::string()) +
         (no_roi ? std::to_string(no_roi) + " without ROI file, " : std::string()) +
         std::to_string(failed) + " failed; " + std::to_string(tiles) + " tiles";
}

}  // namespace

void write_qc_index(const std::string& path, const std::vector<SlideReport>& slides) {
  const std::string dir = util::parent_directory(path);
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>mltool tile QC</title>\n" +
      std::string(kStyle) + "\n</head>\n<body>\n<h1>mltool tile QC</h1>\n<p class=\"summary\">" +
      util::html_text(summary(slides)) +
      ". Green: tissue outline; blue: kept tiles. Orange: no tiles; red: failed.</p>\n"
      "<div class=\"sheet\">\n";
  for (const auto& r : slides) html += card(dir, r);
  html += "</div>\n</body>\n</html>\n";
  util::make_directories(dir);
  util::write_file_atomic(path, html);
}

}  // namespace mltool::slide
