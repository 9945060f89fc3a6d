// The pack tasks' table (see task_spec.hpp).
#include "task_spec.hpp"

namespace mltool::records {
namespace detail {

using nlohmann::json;

namespace {

bool label_given(const LabelColumns& c) { return c.label != LabelColumns{}.label; }
bool target_given(const LabelColumns& c) { return !c.target.empty(); }
bool time_given(const LabelColumns& c) { return !c.time.empty(); }
bool event_given(const LabelColumns& c) { return !c.event.empty(); }
bool labels_given(const LabelColumns& c) { return !c.labels.empty(); }

json no_columns(const LabelColumns&) { return nullptr; }
json target_columns(const LabelColumns& c) { return {{"target_column", c.target}}; }
json survival_columns(const LabelColumns& c) {
  return {{"time_column", c.time}, {"event_column", c.event}};
}
json multilabel_columns(const LabelColumns& c) { return {{"label_columns", c.labels}}; }

}  // namespace

// ---- The table: one row per task ----------------------------------------------------------
const std::array<PackTaskSpec, kPackTaskCount> kPackTaskSpecs = {{
    {PackTask::classification,
     true,
     false,
     nullptr,
     nullptr,
     false,
     "label",
     {{{"--label-column", label_given}, {nullptr, nullptr}}},
     no_columns},
    {PackTask::regression,
     false,
     true,
     "target mean",
     "target_mean",
     true,
     "target_quantile",
     {{{"--target-column", target_given}, {nullptr, nullptr}}},
     target_columns},
    {PackTask::survival,
     false,
     true,
     "event rate",
     "event_rate",
     false,
     "event_time_tertile",
     {{{"--time-column", time_given}, {"--event-column", event_given}}},
     survival_columns},
    {PackTask::multilabel,
     false,
     false,
     nullptr,
     nullptr,
     false,
     "first_label",
     {{{"--label-columns", labels_given}, {nullptr, nullptr}}},
     multilabel_columns},
}};

const PackTaskSpec& spec_of(PackTask task) {
  for (const auto& s : kPackTaskSpecs)
    if (s.task == task) return s;
  return kPackTaskSpecs[0];
}

}  // namespace detail

bool has_label_map(PackTask task) { return detail::spec_of(task).label_map; }
bool has_outcome_stats(PackTask task) { return detail::spec_of(task).outcome_stats; }

}  // namespace mltool::records
