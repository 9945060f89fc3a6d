// mltool extract TILES.lmdb -o FEATURES/ [options]      tile store → feature store
// mltool extract SLIDE... -o FEATURES/ [tile options]    slides → coordinates + features
// mltool extract --merge FEATURES... -o MERGED/          join the stores of --shard runs
// mltool extract --slide-encoder FILE FEATURES/ -o SLIDES/  one row per slide
//
// Option parsing and the summary; the pipeline is mltool::features::extract_features, --merge
// is mltool::features::merge_shards, --slide-encoder mltool::features::encode_slides.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/features/extract.hpp"
#include "mltool/features/segmenter.hpp"
#include "mltool/features/shard.hpp"
#include "mltool/features/slide_encode.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

// Extract from a tile store, or (--merge) join the feature stores of shards.
struct ExtractOptions {
  std::shared_ptr<features::ExtractJob> job = std::make_shared<features::ExtractJob>();
  std::vector<std::string> merge;
  std::shared_ptr<features::SlideEncodeJob> slide = std::make_shared<features::SlideEncodeJob>();
};

int run_merge(const ExtractOptions& o, const CommonOptions& common) {
  if (!o.job->inputs.empty())
    throw UsageError("--merge takes feature stores, not a tile store or slides ('" +
                     o.job->inputs.front() + "'): mltool extract --merge FEATURES... -o MERGED");
  const auto r = features::merge_shards(expand_stdin_list(o.merge), o.job->output);
  if (common.json) std::cout << features::to_json(r).dump(2) << "\n";
  return exit_code::ok;
}

int run_slide_encode(const ExtractOptions& o, const CommonOptions& common) {
  if (!o.merge.empty()) throw UsageError("--merge and --slide-encoder do not go together");
  const auto r = features::encode_slides(features::slide_encode_job(*o.job, *o.slide));
  if (r.skipped) {
    log::info(r.output + ": complete already with this encoder (" + std::to_string(r.rows) +
              " rows), skipped");
  } else {
    log::info(r.output + ": " + std::to_string(r.rows) + " x " + std::to_string(r.dims) +
              " slide features" +
              (r.resumed_from ? " (resumed after " + std::to_string(r.resumed_from) + ")" : "") +
              " on " + r.device + ", " + format_fixed(r.seconds) + " s" +
              (r.invalid ? ", " + std::to_string(r.invalid) + " invalid rows" : ""));
  }
  if (common.json) std::cout << features::to_json(r).dump(2) << "\n";
  return r.invalid ? exit_code::partial : exit_code::ok;
}

int run_extract(ExtractOptions& o, const CommonOptions& common) {
  if (!o.slide->encoder.empty()) return run_slide_encode(o, common);
  if (!o.slide->group_table.empty() || !o.slide->group_column.empty() || o.slide->skip_missing)
    throw UsageError("--group-table, --group-column and --skip-missing go with --slide-encoder");
  if (!o.merge.empty()) return run_merge(o, common);
  auto& job = *o.job;
  if (job.inputs.empty())
    throw UsageError("a tile store or slides are required (or --merge FEATURES...)");
  job.threads = common.threads;
  job.tile.open_segmenter = features::open_segmenter;  // --tissue MODEL.pt on slides
  const auto r = features::extract_features(job);
  std::string devices;
  for (const auto& d : r.devices) devices += (devices.empty() ? "" : ",") + d;
  if (r.skipped) {
    log::info(r.output + ": complete already with these settings (" + std::to_string(r.rows) +
              " rows), skipped");
  } else {
    log::info(
        r.output + ": " + std::to_string(r.rows) + " x " + std::to_string(r.dims) + " features" +
        (r.resumed_from ? " (resumed after " + std::to_string(r.resumed_from) + ")" : "") + " on " +
        devices + ", " + format_fixed(r.seconds) + " s, " + format_fixed(r.tiles_per_second) +
        " tiles/s" + (r.invalid ? ", " + std::to_string(r.invalid) + " invalid rows" : ""));
  }
  if (common.json) std::cout << features::to_json(r).dump(2) << "\n";
  return r.invalid || (r.tiled && r.tiled->failed) ? exit_code::partial : exit_code::ok;
}

}  // namespace

Command extract_command() {
  return {"extract",
          "Turn a tile store, or slides tiled on the fly, into a feature matrix with a "
          "TorchScript or built-in model",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto o = std::make_shared<ExtractOptions>();
            add_options(app, features::extract_options(), o->job);
            add_options(app, features::slide_encode_options(), o->slide);
            add_options(app, slide::tile_options(),
                        std::shared_ptr<slide::TileJob>(o->job, &o->job->tile));
            // The tile store is not given with --merge, whose inputs are feature stores.
            app.get_option("inputs")->required(false);
            app.add_option("--merge", o->merge,
                           "Join the feature stores of extract --shard runs into -o "
                           "('-' reads paths from stdin)")
                ->type_name("FEATURES...");
            return [o, &common] { return run_extract(*o, common); };
          }};
}

}  // namespace mltool::cli
