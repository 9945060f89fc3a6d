// The pack tasks' table (see task_spec.hpp) and the helpers their files share.
#include "task_spec.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "mltool/util/file.hpp"

namespace mltool::records {
namespace detail {

// ---- The table: one line per task, its row in its file of lib/records/tasks/ ---------------
const std::array<const PackTaskSpec*, kPackTaskCount> kPackTaskSpecs = {
    &kClassificationPack,
    &kRegressionPack,
    &kSurvivalPack,
    &kMultilabelPack,
};

const PackTaskSpec& spec_of(PackTask task) {
  for (const PackTaskSpec* s : kPackTaskSpecs)
    if (s->task == task) return *s;
  return kClassificationPack;
}

InputError OutcomeRow::bad(std::size_t i, const char* option, const std::string& must) const {
  const std::size_t col = columns[i];
  return InputError(at_file(table.path, "line " + std::to_string(line) + ": column " +
                                            io::json_quoted(table.columns[col]) + " holds " +
                                            io::json_quoted(row[col]) + ": " + must +
                                            " (the column of " + option + ")"));
}

std::string float_text(float v) {
  const double d = v;
  const double size = std::fabs(d);
  int digits = 1;  // at least the integer part's: %g writes 10 with one digit as "1e+01"
  if (size < 1e16)
    for (double power = 10; power <= size; power *= 10) ++digits;
  char text[64] = "";
  for (; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, d);
    if (std::strtof(text, nullptr) == v) break;
  }
  return text;
}

std::optional<double> parse_number(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return std::nullopt;
  const auto last = text.find_last_not_of(" \t");
  const std::string s(text.substr(first, last - first + 1));
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

float one_float(const io::Example& example, const char* name) {
  if (example.kind(name) != io::FeatureKind::float_list || example.floats(name).size() != 1)
    throw FormatError(example.where() + ": feature '" + name + "' must hold one float (" +
                      io::to_string(example.kind(name)) + " found)");
  return example.floats(name)[0];
}

std::vector<float> decode_floats(const OutcomeCodec& codec, const io::Example& example) {
  std::vector<float> values;
  for (const auto& [name, kind] : codec.features) values.push_back(one_float(example, name));
  if (const auto why = codec.invalid(values)) throw FormatError(example.where() + ": " + *why);
  return values;
}

void require_column(const std::string& name, const char* option, PackTask task) {
  if (name.empty())
    throw UsageError(std::string("--task ") + to_string(task) + " needs " + option +
                     " (the column of the outcome)");
}

}  // namespace detail

bool has_label_map(PackTask task) { return detail::spec_of(task).label_map; }
bool has_outcome_stats(PackTask task) { return detail::spec_of(task).outcome_stats != nullptr; }

}  // namespace mltool::records
