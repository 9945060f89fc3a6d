// mltool predict RUN/ FEATURES/ -o PRED/ [options]      a finished run → predictions
//
// Option parsing and the summary; the prediction is mltool::predict::predict.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/predict/predict.hpp"
#include "mltool/util/log.hpp"

namespace mltool::cli {

Command predict_command() {
  return {"predict",
          "Apply a finished run to new slides: a feature store, or a tile store (image models)",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto job = std::make_shared<predict::PredictJob>();
            add_options(app, predict::predict_options(), job);
            return [job, &common] {
              job->threads = common.threads;
              const auto r = predict::predict(*job);
              log::info(r.output + ": " + std::to_string(r.samples) + " " + r.unit +
                        " predictions from " + std::to_string(r.tiles) + " tiles of " +
                        std::to_string(r.slides) + " slides" +
                        (r.groups ? " in " + std::to_string(r.groups) + " groups" : "") + " (" +
                        std::to_string(r.resumed) + " resumed) on " + r.device + " (" + r.weights +
                        " weights), " + std::to_string(r.heatmaps) + " heatmaps, " +
                        format_fixed(r.seconds, 2) + " s" +
                        (r.view.empty() ? "" : "; the slides in a browser: " + r.view));
              if (common.json) std::cout << predict::to_json(r).dump(2) << "\n";
              return exit_code::ok;
            };
          }};
}

}  // namespace mltool::cli
