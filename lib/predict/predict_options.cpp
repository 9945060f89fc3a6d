// The options of `mltool predict` (PredictJob), declared once: the command line, `mltool help
// predict --json` and docs/predict.md's synopsis come from this table.
#include "mltool/features/stain_options.hpp"
#include "mltool/io/dicomweb_options.hpp"
#include "mltool/predict/predict.hpp"
#include "mltool/util/common_options.hpp"
#include "mltool/util/math_env.hpp"

namespace mltool::predict {

const util::EnumNames<Weights> kWeights = {{Weights::best, "best"},
                                           {Weights::final_weights, "final"}};

const util::Options<PredictJob>& predict_options() {
  using J = PredictJob;
  using util::choice, util::flag, util::option;
  static const util::Options<PredictJob> table = util::joined<J>(
      {{
           option("run", &J::run, "The run directory (mltool train), finished").required(),
           option("input", &J::input,
                  "The feature store (mltool extract) for tile and bag models, the tile store "
                  "(mltool tile) for image models")
               .required(),
           option("-o,--output", &J::output,
                  "The prediction directory (created; a stopped prediction into it resumes)")
               .required(),
           choice("--weights", &J::weights, kWeights,
                  "best (best.safetensors, the monitored best epoch) or final (model.safetensors)"),
           util::device_option(&J::device),
           util::math_threads_option(&J::math_threads),
           util::profile_option(&J::profile),
           util::profile_skip_option(&J::profile),
           util::profile_steps_option(&J::profile),
           option("--batch", &J::batch, "Tiles per forward pass (tile and image models)")
               .at_least(1),
           option(
               "--slide", &J::slides,
               "Predict only this slide id (repeatable; '-' reads ids from stdin); default: every "
               "slide of the input"),
           option("--tiles", &J::tiles,
                  "The tile store for heatmaps (default: the one the features name, if it exists)"),
           option("--label", &J::label,
                  "The class whose probability the PNG heatmaps show (default: the last label)"),
           option("--heatmap-size", &J::heatmap_size, "The PNG heatmaps' long side in pixels")
               .at_least(64),
           flag("--view", &J::view,
                "Also write the predicted slides' offline viewer (mltool view) into "
                "OUTPUT/view/, linked from report.html"),
           util::group_table_option(&J::group_table),
           util::group_column_option(&J::group_column),
           util::overwrite_option(&J::overwrite),
           util::no_oom_retry_option(&J::no_oom_retry),
           features::stain_norm_option(&J::stain_norm, &J::stain_reference),
           features::stain_reference_option(&J::stain_reference),
       },
       io::dicomweb_options(&J::dicomweb)});
  return table;
}

}  // namespace mltool::predict
