// The pack tasks' table (see task_spec.hpp).
#include "task_spec.hpp"

#include <cmath>

#include "mltool/util/options.hpp"

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

std::string no_text(const Outcome&) { return ""; }
std::string target_text(const Outcome& o) { return "target " + util::number_text(o.target); }
std::string survival_text(const Outcome& o) {
  return "time " + util::number_text(o.time) + ", event " + util::number_text(o.event);
}
std::string multilabel_text(const Outcome& o) {
  std::string out;
  for (const float v : o.values)
    out += (out.empty() ? "" : ",") + (std::isnan(v) ? "missing" : util::number_text(v));
  return "outcomes " + out;
}

}  // namespace

// ---- The table: one row per task ----------------------------------------------------------
// Fields, in PackTaskSpec's order: task; label map, outcome stats; inspect's figure, its JSON
// key, its kind, stratify; the task's own options; dataset.json's "outcome", how messages name
// an outcome, whether dataset.json's label names are the --label-columns, each stratum's class.
// clang-format off
const std::array<PackTaskSpec, kPackTaskCount> kPackTaskSpecs = {{
    {PackTask::classification,
     true, false, nullptr, nullptr, OutcomeFigure::none, "label",
     {{{"--label-column", label_given}, {nullptr, nullptr}}},
     no_columns, no_text, false, {}},
    {PackTask::regression,
     false, true, "target mean", "target_mean", OutcomeFigure::mean, "target_quantile",
     {{{"--target-column", target_given}, {nullptr, nullptr}}},
     target_columns, target_text, false, {0, 0, 1, 1}},
    {PackTask::survival,
     false, true, "event rate", "event_rate", OutcomeFigure::rate, "event_time_tertile",
     {{{"--time-column", time_given}, {"--event-column", event_given}}},
     survival_columns, survival_text, false, {0, 0, 0, 1, 1, 1}},
    {PackTask::multilabel,
     false, false, nullptr, nullptr, OutcomeFigure::none, "first_label",
     {{{"--label-columns", labels_given}, {nullptr, nullptr}}},
     multilabel_columns, multilabel_text, true, {}},
}};
// clang-format on

const PackTaskSpec& spec_of(PackTask task) {
  for (const auto& s : kPackTaskSpecs)
    if (s.task == task) return s;
  return kPackTaskSpecs[0];
}

}  // namespace detail

bool has_label_map(PackTask task) { return detail::spec_of(task).label_map; }
bool has_outcome_stats(PackTask task) { return detail::spec_of(task).outcome_stats; }

}  // namespace mltool::records
