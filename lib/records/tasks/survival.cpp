// Pack's survival task (docs/pack.md#tasks): a time > 0 and an event (1 observed, 0 censored)
// per record ("time", "event"), stratified by event and time tertile, summarized by the event
// rate and the time's quartiles.
#include <cmath>

#include "../task_spec.hpp"
#include "mltool/util/options.hpp"

namespace mltool::records::detail {
namespace {

constexpr const char* kTime = "time";
constexpr const char* kEvent = "event";

bool time_given(const LabelColumns& c) { return !c.time.empty(); }
bool event_given(const LabelColumns& c) { return !c.event.empty(); }

std::vector<std::size_t> find_columns(const io::Table& table, const LabelColumns& c) {
  require_column(c.time, "--time-column", PackTask::survival);
  require_column(c.event, "--event-column", PackTask::survival);
  return {table.column(c.time), table.column(c.event)};
}

void read_outcome(const OutcomeRow& row, LabelRecord& rec) {
  const auto v = parse_number(row.cell(0));
  if (!v || !std::isfinite(static_cast<float>(*v)) || !(static_cast<float>(*v) > 0))
    throw row.bad(0, "--time-column", "a time must be a finite number > 0");
  rec.time = static_cast<float>(*v);
  const auto e = parse_event(row.cell(1));
  if (!e)
    throw row.bad(1, "--event-column",
                  "an event must be 1 or 0 (also 1.0/0.0, true/false, yes/no, dead/alive)");
  rec.event = *e;
}

nlohmann::json columns(const LabelColumns& c) {
  return {{"time_column", c.time}, {"event_column", c.event}};
}
std::string text(const Outcome& o) {
  return "time " + float_text(o.time) + ", event " + float_text(o.event);
}

// 3·event + the time's tertile bin, #{c in (q1/3, q2/3) : time > c}.
std::vector<std::uint32_t> strata(const std::vector<Outcome>& outcomes) {
  const std::vector<double> sorted = sorted_values(outcomes, &Outcome::time);
  const std::vector<double> cuts = {quantile(sorted, 1.0 / 3), quantile(sorted, 2.0 / 3)};
  std::vector<std::uint32_t> out;
  for (const Outcome& o : outcomes)
    out.push_back(3 * static_cast<std::uint32_t>(o.event) + bin_of(o.time, cuts));
  return out;
}

nlohmann::json stats(const std::vector<Outcome>& outcomes) {
  double events = 0;
  for (const Outcome& o : outcomes) events += o.event;
  nlohmann::json q = {{"q25", nullptr}, {"q50", nullptr}, {"q75", nullptr}};
  if (!outcomes.empty()) {
    const auto times = sorted_values(outcomes, &Outcome::time);
    q = {{"q25", quantile(times, 0.25)},
         {"q50", quantile(times, 0.5)},
         {"q75", quantile(times, 0.75)}};
  }
  return {{"count", outcomes.size()},
          {"events", static_cast<std::uint64_t>(events)},
          {"event_rate", or_null(events / static_cast<double>(outcomes.size()))},
          {"time_quantiles", q}};
}

std::optional<std::string> invalid(const std::vector<float>& v) {
  if (!(std::isfinite(v[0]) && v[0] > 0))
    return "time " + std::to_string(v[0]) + " is not a finite number > 0";
  if (v[1] != 0 && v[1] != 1) return "event " + std::to_string(v[1]) + " is neither 0 nor 1";
  return std::nullopt;
}

void encode(const Record& record, io::ExampleBuilder& example) {
  example.add_float(kTime, record.time).add_float(kEvent, record.event);
}

void decode(const io::Example& example, const RecordLimits&, Record& out) {
  const std::vector<float> v = decode_floats(kSurvivalPack.codec, example);
  out.time = v[0];
  out.event = v[1];
}

void targets(const Record& record, std::vector<float>& out) {
  out.insert(out.end(), {record.time, record.event});
}

}  // namespace

const PackTaskSpec kSurvivalPack = [] {
  PackTaskSpec s{};  // what is not set is null, false or empty
  s.task = PackTask::survival;
  s.label_map = false;
  s.figure = "event rate";
  s.figure_key = "event_rate";
  s.figure_kind = OutcomeFigure::rate;
  s.figure_value = 1;
  s.stratify = "event_time_tertile";
  s.options = {{{"--time-column", time_given}, {"--event-column", event_given}}};
  s.find_columns = find_columns;
  s.cells_required = true;
  s.patient_outcome = true;
  s.read_outcome = read_outcome;
  s.outcome_columns = columns;
  s.describe = text;
  s.names_columns = false;
  s.strata = strata;
  s.stratum_classes = {0, 0, 0, 1, 1, 1};
  s.outcome_stats = stats;
  s.codec.features = {{kTime, "float"}, {kEvent, "float"}};
  s.codec.encode = encode;
  s.codec.decode = decode;
  s.codec.append_targets = targets;
  s.codec.invalid = invalid;
  return s;
}();

}  // namespace mltool::records::detail
