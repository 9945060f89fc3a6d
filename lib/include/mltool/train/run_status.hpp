// A run's status: run.json's "status", a checkpoint's, TrainReport's. Parsed once where it is
// read (run_status), an enum everywhere else. No LibTorch here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "mltool/util/options.hpp"

namespace mltool::train {

/// running: training (run.json while it goes; a checkpoint's ""); complete: every epoch;
/// early_stopped: --patience ended it; stopped: --max-steps or SIGTERM ended it, resumable;
/// interrupted and failed: run.json of a run that ended with an error (SIGTERM, or another).
enum class RunStatus { running, complete, early_stopped, stopped, interrupted, failed };
extern const util::EnumNames<RunStatus> kRunStatuses;

inline const char* to_string(RunStatus s) { return util::name_of(kRunStatuses, s); }

/// Whether training finished (complete or early_stopped): what predict and cross-validation
/// take a run's weights from.
inline bool finished(RunStatus s) {
  return s == RunStatus::complete || s == RunStatus::early_stopped;
}

/// The "status" of run.json `run` read from `path`: FormatError naming the file for a missing
/// or unknown one.
RunStatus run_status(const nlohmann::json& run, const std::string& path);

}  // namespace mltool::train
