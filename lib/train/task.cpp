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

}  // namespace mltool::train
