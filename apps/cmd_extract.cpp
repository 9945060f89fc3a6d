// mltool extract TILES.lmdb -o FEATURES/ [options]      tile store → feature store
//
// Option parsing and the summary; the pipeline is mltool::features::extract_features.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/features/extract.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

int run_extract(features::ExtractJob& job, const CommonOptions& common) {
  job.threads = common.threads;
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
  return r.invalid ? exit_code::partial : exit_code::ok;
}

}  // namespace

Command extract_command() {
  return {"extract", "Turn a tile store into a feature matrix with a TorchScript or built-in model",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto job = std::make_shared<features::ExtractJob>();
            add_options(app, features::extract_options(), job);
            return [job, &common] { return run_extract(*job, common); };
          }};
}

}  // namespace mltool::cli
