// mltool view INPUT... -o SITE      an offline deep-zoom viewer of slides and tile stores
//
// Option parsing and the summary; the site (pyramids, pages, index) is
// mltool::slide::write_site (docs/view.md).
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/slide/view.hpp"
#include "mltool/util/error.hpp"

namespace mltool::cli {
namespace {

struct ViewOptions {
  std::shared_ptr<slide::ViewJob> job = std::make_shared<slide::ViewJob>();
  std::vector<std::string> inputs;
};

int run_view(const ViewOptions& o, const CommonOptions& common) {
  const auto inputs = expand_stdin_list(o.inputs);
  if (inputs.empty()) throw UsageError("no slides or tile stores given");
  o.job->threads = common.threads;
  const auto report = slide::write_site(inputs, *o.job);
  if (common.json)
    std::cout << slide::to_json(report).dump(2) << "\n";
  else if (!common.quiet)
    std::cout << report.slides.size() << " slide" << (report.slides.size() == 1 ? "" : "s") << ": "
              << o.job->site << "/index.html\n";
  return exit_code::ok;
}

}  // namespace

Command view_command() {
  return {
      "view", "Write an offline deep-zoom viewer (a site of HTML pages) of slides and tile stores",
      [](CLI::App& app, const CommonOptions& common) -> Action {
        auto o = std::make_shared<ViewOptions>();
        app.add_option("inputs", o->inputs,
                       "Slides (files, DICOM directories or DICOMweb URLs), tile stores, predict "
                       "outputs and train runs ('-' reads them from stdin)")
            ->required();
        add_options(app, slide::view_options(), o->job);
        return [o, &common] { return run_view(*o, common); };
      }};
}

}  // namespace mltool::cli
