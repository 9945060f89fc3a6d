// mltool tile SLIDE... -o STORE [options]      slides → LMDB tile store
// mltool tile --merge STORE... -o STORE         join stores tiled on several machines
//
// Option parsing, stdin lists and the summary; the run over the slides (--shard,
// --keep-going) is mltool::slide::tile_slides, --merge is mltool::slide::merge_stores.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "mltool/slide/cohort.hpp"
#include "mltool/util/error.hpp"

namespace mltool::cli {
namespace {

struct TileOptions {
  std::vector<std::string> inputs;
  std::string output;
  slide::CohortJob job;
  double mpp = 0.5;
  int level = 0;
  CLI::Option* mpp_option = nullptr;
  CLI::Option* level_option = nullptr;
  bool merge = false;
  std::string format = slide::encoding_info(slide::TileEncoding::jpeg).name;
  std::string reader = "auto";
};

nlohmann::json report_json(const slide::SlideReport& r) {
  if (r.status == "failed")
    return {{"path", r.path}, {"id", r.id}, {"status", r.status}, {"error", r.error}};
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

int run_merge(const TileOptions& o, const CommonOptions& common,
              const std::vector<std::string>& stores) {
  const auto merged = slide::merge_stores(o.output, stores, o.job.tile.commit_every);
  nlohmann::json inputs = nlohmann::json::array();
  std::int64_t tiles = 0;
  for (const auto& r : merged) {
    inputs.push_back(
        {{"path", r.path}, {"slides", r.slides}, {"skipped", r.skipped}, {"tiles", r.tiles}});
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
  o.job.tile.threads = common.threads;
  o.job.store = o.output;
  if (o.merge) return run_merge(o, common, inputs);

  o.job.tile.settings.encoding = *slide::encoding_named(o.format);  // checked by --format
  if (o.level_option->count()) o.job.tile.settings.level = o.level;
  if (o.mpp_option->count() || !o.level_option->count()) o.job.tile.settings.mpp = o.mpp;
  o.job.tile.reader =
      o.reader == "openslide" ? slide::ReaderChoice::openslide : slide::ReaderChoice::automatic;
  const auto r = slide::tile_slides(inputs, o.job);
  nlohmann::json reports = nlohmann::json::array();
  for (const auto& slide : r.slides) reports.push_back(report_json(slide));
  if (common.json)
    std::cout << nlohmann::json{{"command", "tile"}, {"store", o.output},  {"slides", reports},
                                {"tiles", r.tiles},  {"failed", r.failed}, {"empty", r.empty}}
                     .dump(2)
              << "\n";
  return r.failed || r.empty ? exit_code::partial : exit_code::ok;
}

}  // namespace

Command tile_command() {
  return {
      "tile", "Cut whole-slide images into tissue tiles in an LMDB tile store",
      [](CLI::App& app, const CommonOptions& common) -> Action {
        auto o = std::make_shared<TileOptions>();
        auto& s = o->job.tile.settings;
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
        std::vector<std::string> encodings;
        for (const auto& e : slide::kEncodings) encodings.push_back(e.name);
        app.add_option("--format", o->format,
                       "Tile encoding: " + CLI::detail::join(encodings, " or "))
            ->check(CLI::IsMember(encodings))
            ->capture_default_str();
        app.add_option("--quality", s.quality, "JPEG quality")->capture_default_str();
        app.add_option("--shard", o->job.shard,
                       "Take slides I, I+N, I+2N, ... of the list (I/N, 0-based)");
        app.add_option("--qc", o->job.tile.qc_dir,
                       "Write a QC picture per slide into this directory");
        app.add_option("--commit-every", o->job.tile.commit_every, "Tiles per LMDB transaction")
            ->capture_default_str();
        app.add_option(
               "--reader", o->reader,
               "Tile decoder: auto (libvips' TIFF decoder for plain TIFF pyramids, checked against "
               "OpenSlide; OpenSlide otherwise) or openslide")
            ->check(CLI::IsMember({"auto", "openslide"}))
            ->capture_default_str();
        app.add_flag("--keep-going", o->job.keep_going,
                     "Continue past bad slides; exit 4 if any failed");
        app.add_flag("--merge", o->merge,
                     "Join the given tile stores into -o instead of tiling slides");
        return [o, &common] { return run_tile(*o, common); };
      }};
}

}  // namespace mltool::cli
