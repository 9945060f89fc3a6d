// Pack's multilabel task (docs/pack.md#tasks): several binary outcomes per record, any of them
// missing ("labels", 1 or 0 per --label-columns column, and "label_mask", 0 where missing);
// stratified by the first label; each split's label_counts.
#include <cmath>

#include "../task_spec.hpp"
#include "mltool/util/options.hpp"

namespace mltool::records::detail {
namespace {

constexpr const char* kLabels = "labels";
constexpr const char* kLabelMask = "label_mask";

bool labels_given(const LabelColumns& c) { return !c.labels.empty(); }

std::vector<std::size_t> find_columns(const io::Table& table, const LabelColumns& c) {
  if (c.labels.empty()) require_column("", "--label-columns", PackTask::multilabel);
  std::vector<std::size_t> out;
  for (const auto& name : c.labels) {
    if (name == c.key)
      throw UsageError("the key column " + io::json_quoted(c.key) + " is not an outcome");
    out.push_back(table.column(name));
  }
  return out;
}

void read_outcome(const OutcomeRow& row, LabelRecord& rec) {
  rec.values.clear();
  for (std::size_t i = 0; i < row.columns.size(); ++i) {
    if (row.cell(i).find_first_not_of(" \t") == std::string::npos) {
      rec.values.push_back(NAN);  // missing: masks this outcome of the sample
      continue;
    }
    const auto e = parse_event(row.cell(i));
    if (!e)
      throw row.bad(i, "--label-columns",
                    "an outcome must be 1 or 0 (also 1.0/0.0, true/false, yes/no), or empty");
    rec.values.push_back(*e);
  }
}

nlohmann::json columns(const LabelColumns& c) { return {{"label_columns", c.labels}}; }
std::string text(const Outcome& o) {
  std::string out;
  for (const float v : o.values)
    out += (out.empty() ? "" : ",") + (std::isnan(v) ? "missing" : float_text(v));
  return "outcomes " + out;
}

// The first label's value, 0 or 1, and 2 where it is missing.
std::vector<std::uint32_t> strata(const std::vector<Outcome>& outcomes) {
  std::vector<std::uint32_t> out;
  for (const Outcome& o : outcomes) {
    const float v = o.values.at(0);
    out.push_back(std::isnan(v) ? 2 : static_cast<std::uint32_t>(v));
  }
  return out;
}

void encode(const Record& record, io::ExampleBuilder& example) {
  std::vector<float> values;
  std::vector<std::int64_t> mask;
  for (const float v : record.values) {
    values.push_back(std::isnan(v) ? 0.0f : v);
    mask.push_back(std::isnan(v) ? 0 : 1);
  }
  example.add_floats(kLabels, values).add_int64s(kLabelMask, mask);
}

// One value per label, NaN where the mask says missing.
void decode(const io::Example& example, const RecordLimits& limits, Record& out) {
  const std::string& where = example.where();
  if (example.kind(kLabels) != io::FeatureKind::float_list ||
      example.kind(kLabelMask) != io::FeatureKind::int64_list)
    throw FormatError(where + ": features '" + kLabels + "' (floats) and '" + kLabelMask +
                      "' (int64s) are a multilabel record's outcome");
  const auto& values = example.floats(kLabels);
  const auto& mask = example.int64s(kLabelMask);
  if (static_cast<std::int64_t>(values.size()) != limits.labels || mask.size() != values.size())
    throw FormatError(where + ": " + std::to_string(values.size()) + " labels and " +
                      std::to_string(mask.size()) + " mask values, but " + limits.manifest +
                      " names " + std::to_string(limits.labels) + " label columns");
  out.values.clear();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if ((mask[i] != 0 && mask[i] != 1) || (mask[i] == 1 && values[i] != 0 && values[i] != 1))
      throw FormatError(where + ": label " + std::to_string(i) + " is " +
                        std::to_string(values[i]) + " with mask " + std::to_string(mask[i]) +
                        " (a label is 0 or 1, a mask 0 or 1)");
    out.values.push_back(mask[i] == 1 ? values[i] : NAN);
  }
}

void targets(const Record& record, std::vector<float>& out) {
  out.insert(out.end(), record.values.begin(), record.values.end());
}

// Per label, in --label-columns' order: its positives, negatives and missing outcomes.
nlohmann::json label_counts(const std::vector<Outcome>& outcomes, const LabelColumns& c) {
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t l = 0; l < c.labels.size(); ++l) {
    std::uint64_t positives = 0, negatives = 0, missing = 0;
    for (const Outcome& o : outcomes) {
      const float v = o.values.at(l);
      (std::isnan(v) ? missing : v == 1 ? positives : negatives) += 1;
    }
    out.push_back({{"label", c.labels[l]},
                   {"positives", positives},
                   {"negatives", negatives},
                   {"missing", missing}});
  }
  return out;
}

}  // namespace

const PackTaskSpec kMultilabelPack = [] {
  PackTaskSpec s{};  // what is not set is null, false or empty
  s.task = PackTask::multilabel;
  s.label_map = false;
  s.figure_kind = OutcomeFigure::none;
  s.stratify = "first_label";
  s.options = {{{"--label-columns", labels_given}, {nullptr, nullptr}}};
  s.find_columns = find_columns;
  s.cells_required = false;  // an empty cell masks that label
  s.patient_outcome = false;
  s.read_outcome = read_outcome;
  s.outcome_columns = columns;
  s.describe = text;
  s.names_columns = true;
  s.strata = strata;
  s.codec.features = {{kLabels, "float_list"}, {kLabelMask, "int64_list"}};
  s.codec.encode = encode;
  s.codec.decode = decode;
  s.codec.append_targets = targets;
  s.label_counts = label_counts;
  return s;
}();

}  // namespace mltool::records::detail
