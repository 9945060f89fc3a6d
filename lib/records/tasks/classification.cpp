// Pack's classification task (docs/pack.md#tasks): one label column, its values mapped to ids
// (the label map); records carry the id as "label".
#include "../task_spec.hpp"

namespace mltool::records::detail {
namespace {

bool label_given(const LabelColumns& c) { return c.label != LabelColumns{}.label; }

std::vector<std::size_t> find_columns(const io::Table& table, const LabelColumns& c) {
  if (c.key == c.label)
    throw UsageError("the key and label columns must differ, both are " + io::json_quoted(c.key));
  return {table.column(c.label)};
}

void read_outcome(const OutcomeRow& row, LabelRecord& rec) { rec.label = row.cell(0); }

nlohmann::json no_columns(const LabelColumns&) { return nullptr; }
std::string no_text(const Outcome&) { return ""; }

void encode(const Record& record, io::ExampleBuilder& example) {
  example.add_int64(kLabelFeature, record.label);
}

void decode(const io::Example& example, const RecordLimits& limits, Record& out) {
  out.label = example.int64(kLabelFeature);
  if (out.label < 0 || out.label >= limits.labels)
    throw FormatError(example.where() + ": label " + std::to_string(out.label) +
                      " is not in the label map of " + limits.manifest + " (" +
                      std::to_string(limits.labels) + " labels)");
}

void no_targets(const Record&, std::vector<float>&) {}

}  // namespace

const PackTaskSpec kClassificationPack = [] {
  PackTaskSpec s{};  // what is not set is null, false or empty
  s.task = PackTask::classification;
  s.label_map = true;
  s.figure_kind = OutcomeFigure::none;
  s.stratify = "label";
  s.options = {{{"--label-column", label_given}, {nullptr, nullptr}}};
  s.find_columns = find_columns;
  s.cells_required = true;
  s.patient_outcome = false;
  s.read_outcome = read_outcome;
  s.outcome_columns = no_columns;
  s.describe = no_text;
  s.names_columns = false;
  s.strata = nullptr;  // the label is the stratum
  s.codec.features = {{kLabelFeature, "int64"}};
  s.codec.encode = encode;
  s.codec.decode = decode;
  s.codec.append_targets = no_targets;
  return s;
}();

}  // namespace mltool::records::detail
