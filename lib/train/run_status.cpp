// RunStatus's names and run.json's status parsed (run_status.hpp).
#include "mltool/train/run_status.hpp"

#include "mltool/util/error.hpp"

namespace mltool::train {

const util::EnumNames<RunStatus> kRunStatuses = {{RunStatus::running, "running"},
                                                 {RunStatus::complete, "complete"},
                                                 {RunStatus::early_stopped, "early_stopped"},
                                                 {RunStatus::stopped, "stopped"},
                                                 {RunStatus::interrupted, "interrupted"},
                                                 {RunStatus::failed, "failed"}};

RunStatus run_status(const nlohmann::json& run, const std::string& path) {
  const auto status = run.is_object() ? run.find("status") : run.end();
  if (!run.is_object() || status == run.end() || !status->is_string())
    throw FormatError(at_file(path, "/status: missing, or not a string"));
  try {
    return util::parse_enum(kRunStatuses, status->get<std::string>(), "/status");
  } catch (const UsageError& e) {
    throw FormatError(at_file(path, e.what()));
  }
}

}  // namespace mltool::train
