// mltool import h5 DIR/ -o FEATURES/ [--chunk-rows N]
//
// Other tools' outputs as a feature store. One row per format, as in cmd_export.cpp; the
// import is mltool::features::import_h5.
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/features/h5_interop.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {
namespace {

int run_import_h5(const features::ImportH5Job& job, const CommonOptions& common) {
  const auto r = features::import_h5(job);
  log::info(r.output + ": " + std::to_string(r.slides) + " slides, " + std::to_string(r.rows) +
            " rows x " + std::to_string(r.dims) + " " + r.dtype + " from " + r.input + " (" +
            r.layout + " layout, encoder " + (r.encoder.empty() ? "unknown" : r.encoder) + ")");
  if (common.json) std::cout << features::to_json(r).dump(2) << "\n";
  return exit_code::ok;
}

Command import_h5_command() {
  return {"h5", "A directory of per-slide .h5 files (TRIDENT's, CLAM's) into a feature store",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto job = std::make_shared<features::ImportH5Job>();
            add_options(app, features::import_h5_options(), job);
            return [job, &common] { return run_import_h5(*job, common); };
          }};
}

}  // namespace

Command import_command() {
  return {"import", "Turn other tools' feature files into a feature store (h5: CLAM, TRIDENT)",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            static const std::vector<Command> formats = {
                import_h5_command(),
            };
            return add_subcommands(app, common, formats);
          }};
}

}  // namespace mltool::cli
