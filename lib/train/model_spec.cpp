#include "mltool/train/model_spec.hpp"

#include <algorithm>
#include <set>

#include "mltool/io/manifest.hpp"
#include "mltool/util/error.hpp"
#include "models/family.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

// Fields every family takes; a family's own are in its file (lib/train/models/). Anything else
// is refused by name, so a setting meant for another family is never silently ignored.
const std::set<std::string>& common_fields() {
  static const std::set<std::string> fields = {"format",     "format_version", "family",  "name",
                                               "input_dims", "classes",        "sections"};
  return fields;
}

template <typename Names>
std::string joined(const Names& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace

records::PackUnit ModelSpec::unit() const { return models::family(family).unit; }

std::string ModelSpec::refuses(records::PackTask task) const {
  return models::refuses(models::family(family), task);
}

ModelSpec parse_model_spec(const json& doc, const std::string& where) {
  io::embedded_schema("model").validate(doc, where);
  ModelSpec s;
  s.family = doc.at("family").get<std::string>();
  const models::Family& family = models::family(s.family);
  for (const auto& [key, value] : doc.items()) {
    (void)value;
    if (!common_fields().count(key) &&
        std::find(family.fields.begin(), family.fields.end(), key) == family.fields.end())
      throw FormatError(at_file(where, "/" + key + ": not a field of family " + s.family +
                                           " (its fields: " + joined(family.fields) +
                                           ", and everywhere: " + joined(common_fields()) + ")"));
  }
  s.name = doc.value("name", "");
  if (doc.contains("input_dims")) s.input_dims = doc["input_dims"].get<std::int64_t>();
  if (doc.contains("classes")) s.classes = doc["classes"].get<std::int64_t>();
  s.section_starts = doc.value("sections", std::vector<std::string>{});
  s.settings = family.settings(doc, where);

  // The document as the run uses it: every default made explicit.
  json full = s.settings;
  full["family"] = s.family;
  if (!s.name.empty()) full["name"] = s.name;
  if (s.input_dims) full["input_dims"] = *s.input_dims;
  if (s.classes) full["classes"] = *s.classes;
  if (!s.section_starts.empty()) full["sections"] = s.section_starts;
  s.document = std::move(full);
  return s;
}

ModelSpec read_model_spec(const std::string& path) {
  return parse_model_spec(io::read_manifest(path, "model"), path);
}

}  // namespace mltool::train
