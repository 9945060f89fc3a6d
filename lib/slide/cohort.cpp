#include "mltool/slide/cohort.hpp"

#include "cohort_shards.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>

#include <nlohmann/json.hpp>

#include "mltool/io/dicomweb.hpp"
#include "mltool/io/tile_store.hpp"
#include "mltool/slide/qc.hpp"
#include "mltool/slide/slide_inputs.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/input_check.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/parallel.hpp"
#include "mltool/util/shard.hpp"
#include "mltool/util/stop.hpp"

namespace mltool::slide {
namespace {

std::string fixed1(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

std::string percent(double f) { return std::to_string(static_cast<int>(f * 100 + 0.5)) + "%"; }

void log_slide(const SlideReport& r, const CohortJob& job) {
  if (r.status == SlideStatus::no_roi) return;  // slide_roi said so
  if (r.status == SlideStatus::skipped) {
    log::info(r.id + ": already complete in " + job.store + " (" + std::to_string(r.tiles) +
              " tiles), skipped");
  } else if (r.status == SlideStatus::incomplete) {
    log::error(r.id + ": " + r.error + "; the slide is in " + job.store +
               " without them (a later run fetches them again)");
  } else if (r.status == SlideStatus::empty) {
    log::warn(r.id + ": no tiles: no tile of " + std::to_string(r.grid_tiles) +
              " has tissue fraction >= " + nlohmann::json(job.tile.settings.min_tissue).dump() +
              " (" + r.path + ")");
  } else {
    log::info(r.id + ": " + std::to_string(r.tiles) + " of " + std::to_string(r.grid_tiles) +
              " tiles" + (r.tissue_fraction ? ", " + percent(*r.tissue_fraction) + " tissue" : "") +
              ", " + fixed1(r.seconds) + " s, " + fixed1(r.tiles / std::max(r.seconds, 1e-9)) +
              " tiles/s");
  }
}

// The run's QC contact sheet: DIR/index.html, or DIR/index-I-of-N.html for --shard I/N, so
// the tasks of one cohort may share a --qc directory. A failure to write it is logged: it
// never fails slides that are complete in the store.
void write_index(const CohortJob& job, const std::vector<SlideReport>& slides) {
  if (job.tile.qc_dir.empty()) return;
  std::string name = "index.html";
  if (!job.shard.empty()) {
    const auto slash = job.shard.find('/');
    name = "index-" + job.shard.substr(0, slash) + "-of-" + job.shard.substr(slash + 1) + ".html";
  }
  const std::string path = util::join_path(job.tile.qc_dir, name);
  try {
    write_qc_index(path, slides);
    log::info("QC contact sheet: " + path);
  } catch (const std::exception& e) {
    log::error(std::string("could not write the QC contact sheet: ") + e.what());
  }
}

SlideReport failed_report(const std::string& path, const Error& e) {
  SlideReport r;
  r.path = io::redacted_url(path);
  r.status = SlideStatus::failed;
  r.error = e.what();
  try {
    r.id = io::slide_id_for(path);
  } catch (const Error&) {  // no id to give: the report says so with ""
  }
  return r;
}

}  // namespace

// The slides shard `part` takes of the list, logged.
std::vector<std::string> shard_slides(const std::vector<std::string>& slides,
                                      const util::Shard& part) {
  if (part.whole()) return slides;
  std::vector<std::string> out = util::take_shard(slides, part);
  log::info("shard " + part.text() + ": " + std::to_string(out.size()) + " of " +
            std::to_string(slides.size()) + " slides");
  return out;
}

void check_slides(const std::vector<std::string>& slides, const CohortJob& job) {
  const bool each = !job.keep_going || job.overwrite;  // else a bad one fails alone
  std::optional<io::DicomwebSeriesUrl> web;
  for (const auto& path : slides) {
    if (!io::is_dicomweb_url(path)) {
      if (each) util::require_input(path, "a slide of the list");
    } else if (each || !web) {
      try {
        web = io::parse_dicomweb_url(path);
      } catch (const UsageError&) {
        if (each) throw;
      }
    }
  }
  if (web) {  // a slide the user named: the token may go to its server
    io::DicomwebOptions options = job.tile.dicomweb;
    io::allow_origin(options, web->url);
    const io::DicomwebClient reads_token(*web, options);  // and sends no request
  }
  // --roi: every slide's file checked before the first is tiled; a lone slide's needs no
  // early check (tile_slide reads it before anything of the slide is written) but under
  // --overwrite, which empties the store first.
  check_rois(job.tile.roi, slides, each && (slides.size() > 1 || job.overwrite));
}

// The store, emptied first under --overwrite (after check_slides), with the run's settings and
// shard adopted.
io::TileStore open_store(const CohortJob& job, const util::Shard& part,
                         const std::vector<std::string>& mine) {
  auto store = io::TileStore::open(job.store, true);
  if (job.overwrite) {
    store.clear();
    log::info(job.store + ": emptied (--overwrite)");
  }
  store.adopt_settings(job.tile.settings);
  adopt_shard(store, part, mine);
  return store;
}

// Without --keep-going, a slide published with failed tiles stops the run (its tiles and its
// failures are committed: the next run fetches only those).
[[noreturn]] void stop_incomplete(const CohortJob& job, CohortReport& report, SlideReport r) {
  const std::string text =
      r.id + ": " + r.error + "; its other " + std::to_string(r.tiles) + " tiles are in " +
      job.store +
      " and the failed ones listed in its done marker: run the same command again to fetch only "
      "those, give --allow-missing-tiles to count the slide as done without them, or "
      "--keep-going to go on with the other slides";
  report.slides.push_back(std::move(r));
  write_index(job, report.slides);
  throw InputError(text);
}

CohortReport tile_slides(const std::vector<std::string>& slides, const CohortJob& asked) {
  CohortJob job = asked;
  for (const auto& path : slides) io::allow_origin(job.tile.dicomweb, path);  // named by the user
  auto& s = job.tile.settings;
  if (job.tile.mag) {
    if (s.mpp || s.level) throw UsageError("give one of --mpp, --mag and --level");
    s.mpp = 10.0 / *job.tile.mag;  // the convention: 10x ~ 1 µm/px
  }
  if (!s.mpp && !s.level) s.mpp = kDefaultMpp;
  s.roi = roi_settings(job.tile.roi);  // --roi: recorded with the store's settings
  util::check_options(cohort_options(), job);
  validate(job.tile);
  open_tissue_model(job.tile);  // before any slide is read: a bad segmenter is refused first
  const util::Shard part = util::resolve_shard(job.shard, job.shards);
  job.shard = part.whole() ? "" : part.text();
  const std::vector<std::string> mine = shard_slides(slides, part);
  check_slides(mine, job);
  auto store = open_store(job, part, mine);
  CohortReport report;
  report.threads = util::thread_count(job.tile.threads);
  report.shard = job.shard;
  std::vector<std::string> failed, incomplete;
  for (const auto& path : mine) {
    if (util::stop_requested()) {  // SIGTERM: the slides done are committed
      write_index(job, report.slides);
      util::stop_if_requested(std::to_string(report.slides.size()) + " of " +
                              std::to_string(mine.size()) + " slides, committed in " + job.store);
    }
    std::optional<SlideReport> tiled;
    try {
      tiled = tile_slide(store, path, job.tile, job.allow_missing_tiles);
    } catch (const Error& e) {
      report.slides.push_back(failed_report(path, e));
      // A refused DICOMweb token fails every slide of that server alike: stop at once.
      if (!job.keep_going || dynamic_cast<const io::DicomwebAuthError*>(&e)) {
        write_index(job, report.slides);  // the slides so far, and the one that stopped the run
        throw;
      }
      ++report.failed;
      failed.push_back(report.slides.back().id.empty() ? report.slides.back().path
                                                       : report.slides.back().id);
      log::error(e.what());
      continue;
    }
    SlideReport& r = *tiled;
    if (r.status == SlideStatus::incomplete) {
      r.error = std::to_string(r.failed_tiles.size()) +
                " tile(s) failed, the first: " + r.failed_tiles.front().error;
      incomplete.push_back(r.id);
      if (!job.keep_going) stop_incomplete(job, report, std::move(r));
    }
    log_slide(r, job);
    report.tiles += r.tiles;
    report.empty += r.status == SlideStatus::empty;
    report.incomplete += r.status == SlideStatus::incomplete;
    report.slides.push_back(std::move(r));
  }
  finish_shard(store, part, mine, failed, incomplete);
  write_index(job, report.slides);
  if (report.failed || report.empty || report.incomplete)
    log::warn(std::to_string(report.failed) + " slide(s) failed, " +
              std::to_string(report.incomplete) + " incomplete (tiles failed), " +
              std::to_string(report.empty) + " yielded no tiles");
  return report;
}

std::vector<io::MergeReport> merge_stores(const CohortJob& job,
                                          const std::vector<std::string>& inputs) {
  for (const auto& path : inputs)
    if (util::absolute_path(path) == util::absolute_path(job.store))
      throw UsageError(at_file(path, "is both an input and the output (-o) of --merge"));
  check_shards(inputs, job.allow_partial);
  auto out = io::TileStore::open(job.store, true);
  if (job.overwrite) out.clear();
  std::vector<io::MergeReport> reports;
  for (const auto& path : inputs) {
    if (finished_without_slides(path)) {  // it recorded no settings either: skip it
      log::info(path + ": a finished shard without a complete slide: nothing to merge");
      reports.push_back(io::MergeReport{path});
      continue;
    }
    reports.push_back(io::merge_store(out, path, job.tile.commit_every));
    const auto& r = reports.back();
    log::info(path + ": " + std::to_string(r.slides) + " slides (" + std::to_string(r.tiles) +
              " tiles) merged, " + std::to_string(r.skipped) + " already there");
  }
  return reports;
}

}  // namespace mltool::slide
