// mltool tile SLIDE... -o STORE [options]      slides → LMDB tile store
// mltool tile --merge STORE... -o STORE         join stores tiled on several machines
//
// Option parsing and the summary; the run over the slides (--shard, --keep-going) is
// mltool::slide::tile_slides, --merge is mltool::slide::merge_stores.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/slide/cohort.hpp"
#include "mltool/util/error.hpp"
#include "torch_module.hpp"

namespace mltool::cli {
namespace {

// What to do with the list: tile the slides, or (--merge) join the stores.
struct TileOptions {
  std::shared_ptr<slide::CohortJob> job = std::make_shared<slide::CohortJob>();
  std::vector<std::string> inputs;
  bool merge = false;
};

int run_tile(TileOptions& o, const CommonOptions& common) {
  const auto inputs = expand_stdin_list(o.inputs);
  if (inputs.empty()) throw UsageError(o.merge ? "no tile stores given" : "no slides given");
  auto& job = *o.job;
  job.tile.threads = common.threads;
  if (o.merge) {
    const auto merged = slide::merge_stores(job, inputs);
    if (common.json) std::cout << slide::to_json(merged, job.store).dump(2) << "\n";
    return exit_code::ok;
  }
  if (job.tile.settings.tissue == io::TissueDetection::model) {
    std::string why;
    const TorchModule* module = load_torch_module(why);
    if (!module) throw ResourceError("--tissue MODEL.pt needs the LibTorch module: " + why);
    job.tile.open_segmenter = module->open_segmenter;
  }
  const auto r = slide::tile_slides(inputs, job);
  if (common.json) std::cout << slide::to_json(r, job.store).dump(2) << "\n";
  return r.failed || r.empty || r.incomplete ? exit_code::partial : exit_code::ok;
}

}  // namespace

Command tile_command() {
  return {"tile", "Cut whole-slide images into tissue tiles in an LMDB tile store",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto o = std::make_shared<TileOptions>();
            app.add_option("inputs", o->inputs,
                           "Slides ('-' reads paths from stdin); with --merge, tile stores")
                ->required();
            add_options(app, slide::cohort_options(), o->job);
            const std::shared_ptr<slide::TileJob> tile(o->job, &o->job->tile);
            add_options(app, slide::tile_options(), tile);
            add_options(app, slide::tile_store_options(), tile);
            app.add_flag("--merge", o->merge,
                         "Join the given tile stores into -o instead of tiling slides");
            return [o, &common] { return run_tile(*o, common); };
          }};
}

}  // namespace mltool::cli
