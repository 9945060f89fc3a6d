// Pack's regression task (docs/pack.md#tasks): one finite target per record ("target"),
// stratified by its quartile, summarized by its mean and sd.
#include <algorithm>
#include <cmath>

#include "../task_spec.hpp"
#include "mltool/util/options.hpp"

namespace mltool::records::detail {
namespace {

constexpr const char* kTarget = "target";

bool target_given(const LabelColumns& c) { return !c.target.empty(); }

std::vector<std::size_t> find_columns(const io::Table& table, const LabelColumns& c) {
  require_column(c.target, "--target-column", PackTask::regression);
  return {table.column(c.target)};
}

void read_outcome(const OutcomeRow& row, LabelRecord& rec) {
  const auto v = parse_number(row.cell(0));
  if (!v || !std::isfinite(static_cast<float>(*v)))
    throw row.bad(0, "--target-column", "a target must be a finite number");
  rec.target = static_cast<float>(*v);
}

nlohmann::json columns(const LabelColumns& c) { return {{"target_column", c.target}}; }
std::string text(const Outcome& o) { return "target " + float_text(o.target); }

// The target's quartile bin, #{c in (q25, q50, q75) : target > c}.
std::vector<std::uint32_t> strata(const std::vector<Outcome>& outcomes) {
  const std::vector<double> sorted = sorted_values(outcomes, &Outcome::target);
  const std::vector<double> cuts = {quantile(sorted, 0.25), quantile(sorted, 0.5),
                                    quantile(sorted, 0.75)};
  std::vector<std::uint32_t> out;
  for (const Outcome& o : outcomes) out.push_back(bin_of(o.target, cuts));
  return out;
}

nlohmann::json stats(const std::vector<Outcome>& outcomes) {
  const double n = static_cast<double>(outcomes.size());
  double sum = 0, lo = INFINITY, hi = -INFINITY;
  for (const Outcome& o : outcomes) {
    sum += o.target;
    lo = std::min(lo, static_cast<double>(o.target));
    hi = std::max(hi, static_cast<double>(o.target));
  }
  const double mean = sum / n;
  double squares = 0;  // two passes: no cancellation for targets far from 0
  for (const Outcome& o : outcomes) squares += (o.target - mean) * (o.target - mean);
  return {{"count", outcomes.size()},
          {"mean", or_null(mean)},
          {"sd", or_null(n > 1 ? std::sqrt(squares / (n - 1)) : NAN)},
          {"min", or_null(lo)},
          {"max", or_null(hi)}};
}

std::optional<std::string> invalid(const std::vector<float>& v) {
  if (!std::isfinite(v[0])) return "target " + std::to_string(v[0]) + " is not finite";
  return std::nullopt;
}

void encode(const Record& record, io::ExampleBuilder& example) {
  example.add_float(kTarget, record.target);
}

void decode(const io::Example& example, const RecordLimits&, Record& out) {
  out.target = decode_floats(kRegressionPack.codec, example)[0];
}

void targets(const Record& record, std::vector<float>& out) { out.push_back(record.target); }

}  // namespace

const PackTaskSpec kRegressionPack = [] {
  PackTaskSpec s{};  // what is not set is null, false or empty
  s.task = PackTask::regression;
  s.label_map = false;
  s.figure = "target mean";
  s.figure_key = "target_mean";
  s.figure_kind = OutcomeFigure::mean;
  s.figure_value = 0;
  s.stratify = "target_quantile";
  s.options = {{{"--target-column", target_given}, {nullptr, nullptr}}};
  s.find_columns = find_columns;
  s.cells_required = true;
  s.patient_outcome = false;
  s.read_outcome = read_outcome;
  s.outcome_columns = columns;
  s.describe = text;
  s.names_columns = false;
  s.strata = strata;
  s.stratum_classes = {0, 0, 1, 1};
  s.outcome_stats = stats;
  s.codec.features = {{kTarget, "float"}};
  s.codec.encode = encode;
  s.codec.decode = decode;
  s.codec.append_targets = targets;
  s.codec.invalid = invalid;
  return s;
}();

}  // namespace mltool::records::detail
