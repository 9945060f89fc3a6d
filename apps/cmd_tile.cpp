// mltool tile SLIDE... -o STORE [options]      slides → LMDB tile store
// mltool tile --merge STORE... -o STORE         join stores tiled on several machines
//
// Option parsing, slide selection (--shard, stdin lists), the per-slide loop with
// --keep-going, and the summary; the tiling itself is mltool::slide::tile_slide.
#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "mltool/slide/tiler.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

struct TileOptions {
  std::vector<std::string> inputs;
  std::string output;
  slide::TileJob job;
  double mpp = 0.5;
  int level = 0;
  CLI::Option* mpp_option = nullptr;
  CLI::Option* level_option = nullptr;
  std::string shard;
  bool keep_going = false;
  bool merge = false;
  std::string reader = "auto";
};

// "I/N" with 0 <= I < N.
std::pair<std::size_t, std::size_t> parse_shard(const std::string& text) {
  std::size_t i = 0, n = 0;
  char slash = 0;
  std::istringstream in(text);
  if (!(in >> i >> slash >> n) || slash != '/' || !in.eof() || n == 0 || i >= n)
    throw UsageError("--shard must be I/N with 0 <= I < N (e.g. 0/4), not '" + text + "'");
  return {i, n};
}

nlohmann::json report_json(const slide::SlideReport& r) {
  return {{"path", r.path},
          {"id", r.id},
          {"status", r.status},
          {"tiles", r.tiles},
          {"grid_tiles", r.grid_tiles},
          {"tissue_fraction",
           r.tissue_fraction ? nlohmann::json(*r.tissue_fraction) : nlohmann::json(nullptr)},
          {"seconds", r.seconds},
          {"reader", r.reader}};
}

std::string percent(double f) { return std::to_string(static_cast<int>(f * 100 + 0.5)) + "%"; }

int run_merge(const TileOptions& o, const CommonOptions& common,
              const std::vector<std::string>& stores) {
  auto out = slide::TileStore::open(o.output, true);
  nlohmann::json inputs = nlohmann::json::array();
  std::int64_t tiles = 0;
  for (const auto& path : stores) {
    const auto r = slide::merge_store(out, path, o.job.commit_every);
    log::info(path + ": " + std::to_string(r.slides) + " slides (" + std::to_string(r.tiles) +
              " tiles) merged, " + std::to_string(r.skipped) + " already there");
    inputs.push_back(
        {{"path", path}, {"slides", r.slides}, {"skipped", r.skipped}, {"tiles", r.tiles}});
    tiles += r.tiles;
  }
  if (common.json)
    std::cout << nlohmann::json{{"command", "tile"},
                                {"merge", inputs},
                                {"store", o.output},
                                {"tiles", tiles}}
                     .dump(2)
              << "\n";
  return exit_code::ok;
}

int run_tile(TileOptions& o, const CommonOptions& common) {
  const auto inputs = expand_stdin_list(o.inputs);
  if (inputs.empty()) throw UsageError(o.merge ? "no tile stores given" : "no slides given");
  o.job.threads = common.threads;
  if (o.merge) return run_merge(o, common, inputs);

  if (o.level_option->count()) o.job.settings.level = o.level;
  if (o.mpp_option->count() || !o.level_option->count()) o.job.settings.mpp = o.mpp;
  o.job.reader =
      o.reader == "openslide" ? slide::ReaderChoice::openslide : slide::ReaderChoice::automatic;
  slide::validate(o.job);
  std::vector<std::string> slides;
  if (o.shard.empty()) {
    slides = inputs;
  } else {
    const auto [index, count] = parse_shard(o.shard);
    for (std::size_t i = index; i < inputs.size(); i += count) slides.push_back(inputs[i]);
    log::info("shard " + o.shard + ": " + std::to_string(slides.size()) + " of " +
              std::to_string(inputs.size()) + " slides");
  }

  auto store = slide::TileStore::open(o.output, true);
  store.adopt_settings(o.job.settings);
  nlohmann::json reports = nlohmann::json::array();
  std::int64_t tiles = 0;
  int failed = 0, empty = 0;
  for (const auto& path : slides) {
    try {
      const auto r = slide::tile_slide(store, path, o.job);
      tiles += r.tiles;
      if (r.status == "skipped") {
        log::info(r.id + ": already complete in " + o.output + " (" + std::to_string(r.tiles) +
                  " tiles), skipped");
      } else if (r.status == "empty") {
        ++empty;
        log::warn(r.id + ": no tiles: no tile of " + std::to_string(r.grid_tiles) +
                  " has tissue fraction >= " + nlohmann::json(o.job.settings.min_tissue).dump() +
                  " (" + path + ")");
      } else {
        log::info(r.id + ": " + std::to_string(r.tiles) + " of " + std::to_string(r.grid_tiles) +
                  " tiles" +
                  (r.tissue_fraction ? ", " + percent(*r.tissue_fraction) + " tissue" : "") + ", " +
                  format_fixed(r.seconds) + " s, " +
                  format_fixed(r.tiles / std::max(r.seconds, 1e-9)) + " tiles/s");
      }
      reports.push_back(report_json(r));
    } catch (const Error& e) {
      if (!o.keep_going) throw;
      ++failed;
      log::error(e.what());
      std::string id;
      try {
        id = slide::slide_id_for(path);
      } catch (const Error&) {
      }
      reports.push_back({{"path", path}, {"id", id}, {"status", "failed"}, {"error", e.what()}});
    }
  }
  if (common.json)
    std::cout << nlohmann::json{{"command", "tile"}, {"store", o.output}, {"slides", reports},
                                {"tiles", tiles},    {"failed", failed},  {"empty", empty}}
                     .dump(2)
              << "\n";
  if (failed || empty)
    log::warn(std::to_string(failed) + " slide(s) failed, " + std::to_string(empty) +
              " yielded no tiles");
  return failed || empty ? exit_code::partial : exit_code::ok;
}

}  // namespace

Command tile_command() {
  return {
      "tile", "Cut whole-slide images into tissue tiles in an LMDB tile store",
      [](CLI::App& app, const CommonOptions& common) -> Action {
        auto o = std::make_shared<TileOptions>();
        auto& s = o->job.settings;
        app.add_option("inputs", o->inputs,
                       "Slides ('-' reads paths from stdin); with --merge, tile stores")
            ->required();
        app.add_option("-o,--output", o->output,
                       "The tile store (an LMDB directory; created or appended to)")
            ->required();
        app.add_option("--tile-size", s.tile_size, "Tile side in pixels")->capture_default_str();
        o->mpp_option =
            app.add_option("--mpp", o->mpp, "Target µm per pixel (default 0.5 unless --level)");
        o->level_option =
            app.add_option("--level", o->level, "Read this pyramid level as is instead of --mpp");
        o->mpp_option->excludes(o->level_option);
        app.add_option("--overlap", s.overlap, "Pixels shared by neighbouring tiles")
            ->capture_default_str();
        app.add_option("--tissue", s.tissue, "Tissue detection: otsu or none (every tile)")
            ->check(CLI::IsMember({"otsu", "none"}))
            ->capture_default_str();
        app.add_option("--min-tissue", s.min_tissue,
                       "Keep tiles with at least this tissue fraction")
            ->capture_default_str();
        app.add_option("--format", s.encoding, "Tile encoding: jpeg or png")
            ->check(CLI::IsMember({"jpeg", "png"}))
            ->capture_default_str();
        app.add_option("--quality", s.quality, "JPEG quality")->capture_default_str();
        app.add_option("--shard", o->shard,
                       "Take slides I, I+N, I+2N, ... of the list (I/N, 0-based)");
        app.add_option("--qc", o->job.qc_dir, "Write a QC picture per slide into this directory");
        app.add_option("--commit-every", o->job.commit_every, "Tiles per LMDB transaction")
            ->capture_default_str();
        app.add_option(
               "--reader", o->reader,
               "Tile decoder: auto (libvips' TIFF decoder for plain TIFF pyramids, checked against "
               "OpenSlide; OpenSlide otherwise) or openslide")
            ->check(CLI::IsMember({"auto", "openslide"}))
            ->capture_default_str();
        app.add_flag("--keep-going", o->keep_going,
                     "Continue past bad slides; exit 4 if any failed");
        app.add_flag("--merge", o->merge,
                     "Join the given tile stores into -o instead of tiling slides");
        return [o, &common] { return run_tile(*o, common); };
      }};
}

}  // namespace mltool::cli
