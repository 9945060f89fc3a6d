// make_task (task.hpp).
#include "task.hpp"

#include <torch/torch.h>

#include "mltool/util/error.hpp"

namespace mltool::train {

std::unique_ptr<Task> make_task(const TrainJob& job, const DatasetInfo& data,
                                const SplitSamples& train) {
  std::unique_ptr<Task> task;
  switch (data.task) {
    case records::PackTask::classification: task = tasks::classification(job, data, train); break;
    case records::PackTask::regression: task = tasks::regression(job, data); break;
    case records::PackTask::survival: task = tasks::survival(job, data, train); break;
  }
  if (!task->offers(job.monitor))
    throw UsageError("--monitor " + std::string(util::name_of(kMonitors, job.monitor)) +
                     " is not a metric of " + records::to_string(data.task) + " (" +
                     data.manifest_path + " is a " + records::to_string(data.task) + " dataset)");
  return task;
}

std::unique_ptr<Task> run_task(const nlohmann::json& run) {
  if (!run.contains("task"))
    return tasks::classification(
        nlohmann::json{{"kind", "classification"}, {"labels", run.at("dataset").at("labels")}});
  const auto& task = run.at("task");
  const std::string kind = task.at("kind").get<std::string>();
  if (kind == "regression") return tasks::regression(task);
  if (kind == "survival") return tasks::survival(task);
  return tasks::classification(task);
}

}  // namespace mltool::train
