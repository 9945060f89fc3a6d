// The tasks, each registered once (kTasks), and make_task and run_task (task.hpp).
#include "task.hpp"

#include <torch/torch.h>

#include "mltool/util/error.hpp"

namespace mltool::train {
namespace {

/// One task: its kind (dataset.json's and run.json's "task"), and its factories from a job
/// and from run.json.
struct TaskEntry {
  records::PackTask kind;
  std::unique_ptr<Task> (*from_job)(const TrainJob&, const DatasetInfo&, const SplitSamples&);
  std::unique_ptr<Task> (*from_run)(const nlohmann::json&);
};

const TaskEntry kTasks[] = {
    {records::PackTask::classification, tasks::classification, tasks::classification},
    {records::PackTask::regression, tasks::regression, tasks::regression},
    {records::PackTask::survival, tasks::survival, tasks::survival},
    {records::PackTask::multilabel, tasks::multilabel, tasks::multilabel},
};

const TaskEntry& entry_of(records::PackTask kind) {
  for (const auto& e : kTasks)
    if (e.kind == kind) return e;
  throw UsageError("no task " + std::string(records::to_string(kind)) + " is registered");
}

}  // namespace

std::unique_ptr<Task> make_task(const TrainJob& job, const DatasetInfo& data,
                                const SplitSamples& train) {
  auto task = entry_of(data.task).from_job(job, data, train);
  if (!task->offers(job.monitor))
    throw UsageError("--monitor " + std::string(util::name_of(kMonitors, job.monitor)) +
                     " is not a metric of " + records::to_string(data.task) + " (" +
                     data.manifest_path + " is a " + records::to_string(data.task) + " dataset)");
  return task;
}

std::unique_ptr<Task> run_task(const nlohmann::json& run) {
  const records::PackTask kind = records::manifest_task(run);
  if (run.contains("task")) return entry_of(kind).from_run(run.at("task"));
  // A run from before tasks were recorded: its labels are its dataset's.
  return entry_of(kind).from_run(nlohmann::json{{"kind", records::to_string(kind)},
                                                {"labels", run.at("dataset").at("labels")}});
}

}  // namespace mltool::train
