#include "mltool/train/model_spec.hpp"

#include <map>
#include <set>

#include "mltool/io/manifest.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

// The fields each family takes besides the common ones; anything else is refused by name, so
// a setting meant for another family is never silently ignored.
const std::map<std::string, std::set<std::string>>& family_fields() {
  static const std::map<std::string, std::set<std::string>> fields = {
      {"mlp", {"hidden", "activation", "dropout", "batch_norm"}},
      {"abmil", {"hidden", "activation", "dropout", "attention", "gated"}},
      {"rescnn",
       {"channels", "blocks_per_stage", "stem_stride", "activation", "dropout", "mean", "std"}},
  };
  return fields;
}

const std::set<std::string>& common_fields() {
  static const std::set<std::string> fields = {"format",     "format_version", "family",  "name",
                                               "input_dims", "classes",        "sections"};
  return fields;
}

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::array<double, 3> triple(const json& v) {
  return {v[0].get<double>(), v[1].get<double>(), v[2].get<double>()};
}

}  // namespace

std::string ModelSpec::unit() const {
  if (family == "abmil") return "bag";
  if (family == "rescnn") return "image";
  return "tile";
}

ModelSpec parse_model_spec(const json& doc, const std::string& where) {
  io::embedded_schema("model").validate(doc, where);
  ModelSpec s;
  s.family = doc.at("family").get<std::string>();
  const auto& own = family_fields().at(s.family);
  for (const auto& [key, value] : doc.items()) {
    (void)value;
    if (!common_fields().count(key) && !own.count(key))
      throw FormatError(at_file(where, "/" + key + ": not a field of family " + s.family +
                                           " (its fields: " + joined(own) +
                                           ", and everywhere: " + joined(common_fields()) + ")"));
  }
  s.name = doc.value("name", "");
  if (doc.contains("input_dims")) s.input_dims = doc["input_dims"].get<std::int64_t>();
  if (doc.contains("classes")) s.classes = doc["classes"].get<std::int64_t>();
  s.section_starts = doc.value("sections", std::vector<std::string>{});
  s.activation = doc.value("activation", "relu");
  s.dropout = doc.value("dropout", 0.0);
  if (s.family == "mlp") {
    s.hidden = doc.value("hidden", std::vector<std::int64_t>{});
    s.batch_norm = doc.value("batch_norm", false);
  } else if (s.family == "abmil") {
    s.hidden = doc.value("hidden", std::vector<std::int64_t>{128});
    if (s.hidden.empty())
      throw FormatError(at_file(
          where,
          "/hidden: abmil needs at least one embedding layer (the attention pools its output)"));
    s.attention = doc.value("attention", std::int64_t{128});
    s.gated = doc.value("gated", true);
  } else {
    s.channels = doc.value("channels", std::vector<std::int64_t>{32, 64, 128});
    s.blocks_per_stage = doc.value("blocks_per_stage", std::int64_t{1});
    s.stem_stride = doc.value("stem_stride", std::int64_t{2});
    if (doc.contains("mean")) s.mean = triple(doc["mean"]);
    if (doc.contains("std")) s.std = triple(doc["std"]);
  }

  // The document as the run uses it: every default made explicit.
  json full = {{"family", s.family}, {"activation", s.activation}, {"dropout", s.dropout}};
  if (!s.name.empty()) full["name"] = s.name;
  if (s.input_dims) full["input_dims"] = *s.input_dims;
  if (s.classes) full["classes"] = *s.classes;
  if (s.family == "mlp") {
    full["hidden"] = s.hidden;
    full["batch_norm"] = s.batch_norm;
  } else if (s.family == "abmil") {
    full["hidden"] = s.hidden;
    full["attention"] = s.attention;
    full["gated"] = s.gated;
  } else {
    full["channels"] = s.channels;
    full["blocks_per_stage"] = s.blocks_per_stage;
    full["stem_stride"] = s.stem_stride;
    full["mean"] = s.mean;
    full["std"] = s.std;
  }
  if (!s.section_starts.empty()) full["sections"] = s.section_starts;
  s.document = std::move(full);
  return s;
}

ModelSpec read_model_spec(const std::string& path) {
  return parse_model_spec(io::read_manifest(path, "model"), path);
}

}  // namespace mltool::train
