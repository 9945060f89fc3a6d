// mltool info SLIDE... [--regions N] [--json]      what is in a slide, before it is tiled
//
// Option parsing and printing; describing a slide (its levels, µm/px metadata and the µm/px
// estimated from its tissue) is mltool::slide::describe_slides.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/slide/info.hpp"
#include "mltool/util/error.hpp"
#include "torch_module.hpp"

namespace mltool::cli {
namespace {

struct InfoOptions {
  std::shared_ptr<slide::InfoJob> job = std::make_shared<slide::InfoJob>();
  std::vector<std::string> inputs;
};

int run_info(const InfoOptions& o, const CommonOptions& common) {
  const auto inputs = expand_stdin_list(o.inputs);
  if (inputs.empty()) throw UsageError("no slides given");
  if (!o.job->tissue_model.empty()) {
    std::string why;
    const TorchModule* module = load_torch_module(why);
    if (!module) throw ResourceError("--tissue MODEL.pt needs the LibTorch module: " + why);
    o.job->open_segmenter = module->open_segmenter;
  }
  bool first = true;
  const auto print = [&](const slide::SlideInfo& info) {
    if (common.json)
      std::cout << slide::to_json(info).dump() << "\n";
    else
      std::cout << (first ? "" : "\n") << slide::to_text(info);
    std::cout.flush();
    first = false;
  };
  std::size_t failed = 0;
  for (const auto& info : slide::describe_slides(inputs, *o.job, print))
    failed += !info.error.empty();
  if (failed == 0) return exit_code::ok;
  return failed == inputs.size() ? exit_code::input : exit_code::partial;
}

}  // namespace

Command info_command() {
  return {"info",
          "Describe slides: format, levels, µm/px from the metadata and estimated from the tissue",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto o = std::make_shared<InfoOptions>();
            app.add_option("inputs", o->inputs,
                           "Slides (files or DICOM directories; '-' reads paths from stdin)")
                ->required();
            add_options(app, slide::info_options(), o->job);
            return [o, &common] { return run_info(*o, common); };
          }};
}

}  // namespace mltool::cli
