// What a training run tells its caller as it goes (train_model's and cross_validate's
// progress callbacks), in a header of its own so the loop reports it without the entry point.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace mltool::train {

/// What the progress callback gets: after every step, and after every epoch's validation.
struct TrainProgress {
  bool epoch_end = false;
  int epoch = 0;  ///< 1-based
  int epochs = 0;
  std::int64_t step = 0;  ///< steps done in all
  std::int64_t total_steps = 0;
  std::int64_t epoch_step = 0;  ///< steps done in this epoch
  std::int64_t steps_per_epoch = 0;
  double lr = 0;
  double loss = 0;            ///< step: the last logged mean loss; epoch end: the epoch's mean
  nlohmann::json validation;  ///< epoch end: val_loss, val_accuracy, ... (null otherwise)
  bool improved = false;      ///< epoch end: the monitored value improved (best.pt written)
};

}  // namespace mltool::train
