// mltool export h5 FEATURES/ -o DIR/ [--tiles STORE] [--layout flat|trident|clam]
//                 [--format h5|pt] [--dtype f32|f16]
//
// Option parsing and the summary; the export is mltool::features::export_h5. `--format pt`
// and `--layout clam` (pt_files/) borrow the tensor encoder of the LibTorch module, loaded
// only then.
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/features/h5_interop.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "torch_module.hpp"

namespace mltool::cli {
namespace {

int run_export_h5(features::ExportH5Job& job, const CommonOptions& common) {
  const bool clam = job.layout == features::ExportLayout::clam;
  if (job.format == features::ExportFormat::pt || clam) {
    std::string why;
    const TorchModule* module = load_torch_module(why);
    if (!module)
      throw ResourceError(std::string(clam ? "--layout clam" : "--format pt") +
                          " needs the LibTorch module: " + why);
    job.encode_pt = module->encode_pt;
  }
  job.on_slide = [](const std::string& slide, std::uint64_t done, std::uint64_t total) {
    log::debug(slide + " (" + std::to_string(done) + "/" + std::to_string(total) + ")");
  };
  const auto r = features::export_h5(job);
  log::info(r.output + ": " + std::to_string(r.slides) + " slides, " + std::to_string(r.rows) +
            " rows, " + r.layout + " layout (" + std::to_string(r.written) + " slides written, " +
            std::to_string(r.resumed) + " kept from an interrupted run)");
  if (r.invalid_rows)
    log::warn(std::to_string(r.invalid_rows) + " invalid rows of the store were left out");
  if (common.json) std::cout << features::to_json(r).dump(2) << "\n";
  return exit_code::ok;
}

}  // namespace

Command export_h5_command() {
  return {"h5", "Per-slide .h5 (features, coords) as CLAM and TRIDENT read, in their layouts",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto job = std::make_shared<features::ExportH5Job>();
            add_options(app, features::export_h5_options(), job);
            return [job, &common] { return run_export_h5(*job, common); };
          }};
}

}  // namespace mltool::cli
