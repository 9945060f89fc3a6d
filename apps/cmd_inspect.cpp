// mltool inspect DATASET/ | SHARD.tfrecord... [--deep] [--check [THRESHOLDS]] [--plot FILE.png]
//                [--label-feature NAME] [--json]
//
// Records, bytes and labels per shard, shard balance, what a uniform interleave over the shards
// does to an epoch, and under --deep a check of every byte. Text report (or --json) on stdout;
// --check turns thresholds into exit code 4. The work is mltool::records::run_inspect.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/records/inspect.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

int run_inspect(records::InspectJob& job, const CommonOptions& common) {
  job.scan.threads = common.threads;
  const records::InspectOutcome o = records::run_inspect(job);
  if (common.json)
    std::cout << records::to_json(o, job).dump(2, ' ', false,
                                               nlohmann::json::error_handler_t::replace)
              << "\n";
  else
    std::cout << records::format_text(o.report);
  for (const auto& v : o.violations) log::error("check failed: " + v.message);
  if (!o.violations.empty()) {
    log::error(std::to_string(o.violations.size()) + " threshold(s) exceeded");
    return exit_code::partial;
  }
  return exit_code::ok;
}

}  // namespace

Command inspect_command() {
  return {"inspect", "Shard balance, label mix, interleave bias and integrity of TFRecord datasets",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto job = std::make_shared<records::InspectJob>();
            add_options(app, records::inspect_options(), job);
            return [job, &common] { return run_inspect(*job, common); };
          }};
}

}  // namespace mltool::cli
