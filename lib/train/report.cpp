// The summary `mltool train --json` prints (docs/train.md#--json).
#include "mltool/train/train.hpp"

namespace mltool::train {

nlohmann::json to_json(const TrainReport& r) {
  using json = nlohmann::json;
  return {{"command", "train"},
          {"output", r.output},
          {"status", to_string(r.status)},
          {"unit", r.unit},
          {"device", r.device},
          {"feed", r.feed},
          {"blocks", r.blocks},
          {"parameters", r.parameters},
          {"steps", r.steps},
          {"resumed_from", r.resumed_from},
          {"epochs", r.epochs_done},
          {"monitor", r.monitor},
          {"best_epoch", r.best_epoch},
          {"best_value", r.best_value},
          {"validation", r.validation},
          {"memory",
           {{"mode", r.memory_mode},
            {"micro_batches", r.micro_batches},
            {"sections", r.sections},
            {"activation_bytes", r.activation_bytes},
            {"device_peak_bytes", r.device_peak_bytes >= 0 ? json(r.device_peak_bytes) : json()}}},
          {"data_parallel", r.dist_buckets > 0
                                ? json{{"buckets", r.dist_buckets},
                                       {"launched_in_backward", r.dist_launched_in_backward}}
                                : json()},
          {"seconds", r.seconds},
          {"samples_per_second", r.samples_per_second}};
}

}  // namespace mltool::train
