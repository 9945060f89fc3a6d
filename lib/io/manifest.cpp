#include "mltool/io/manifest.hpp"

#include <map>
#include <memory>
#include <mutex>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::io {
namespace {

using nlohmann::json;

// nlohmann prefixes messages with "[json.exception.parse_error.101] "; users do
// not need the code.
std::string without_exception_tag(const std::string& what) {
  const std::size_t end = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && end != std::string::npos ? what.substr(end + 2)
                                                                            : what;
}

const json* schema_property(const JsonSchema& schema, const char* key) {
  const json& doc = schema.document();
  if (!doc.is_object() || !doc.contains("properties")) return nullptr;
  const json& props = doc["properties"];
  if (!props.is_object() || !props.contains(key)) return nullptr;
  return &props[key];
}

// The identity fields are checked before the full validation so that handing a
// file of another kind, or of a newer version, gets that one clear message
// rather than a list of everything else that differs.
void check_identity(const json& doc, const JsonSchema& schema, std::string_view schema_name,
                    const std::string& path) {
  if (!doc.is_object()) return;
  const json* format = schema_property(schema, "format");
  if (format && format->contains("const") && doc.contains("format") &&
      doc["format"] != (*format)["const"])
    throw FormatError(at_file(path, "/format: expected " + (*format)["const"].dump() + ", got " +
                                        doc["format"].dump() + " (this is not a " +
                                        std::string(schema_name) + " manifest)"));
  const std::int64_t supported = supported_format_version(schema_name);
  if (supported > 0 && doc.contains("format_version")) {
    const json& v = doc["format_version"];
    const bool newer = v.is_number_unsigned()
                           ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(supported)
                       : v.is_number_integer() ? v.get<std::int64_t>() > supported
                       : v.is_number_float()   ? v.get<double>() > static_cast<double>(supported)
                                               : false;
    if (newer)
      throw FormatError(at_file(path, "/format_version: version " + v.dump() +
                                          " is newer than this build of mltool supports (" +
                                          std::to_string(supported) + "); upgrade mltool"));
  }
}

}  // namespace

const JsonSchema& embedded_schema(std::string_view name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<JsonSchema>, std::less<>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(name);
  if (it != cache.end()) return *it->second;
  const std::string_view text = schema_text(name);
  if (text.empty()) {
    std::string known;
    for (std::string_view n : schema_names()) known += (known.empty() ? "" : ", ") + std::string(n);
    throw UsageError("unknown schema '" + std::string(name) + "' (known: " + known + ")");
  }
  const std::string file = std::string(name) + ".schema.json";
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw FormatError(at_offset(file, e.byte, without_exception_tag(e.what())));
  }
  auto schema = std::make_unique<JsonSchema>(std::move(doc), file);
  return *cache.emplace(std::string(name), std::move(schema)).first->second;
}

std::int64_t supported_format_version(std::string_view schema_name) {
  const json* v = schema_property(embedded_schema(schema_name), "format_version");
  if (!v || !v->is_object()) return 0;
  for (const char* key : {"maximum", "const"})
    if (v->contains(key) && (*v)[key].is_number_integer()) return (*v)[key].get<std::int64_t>();
  return 0;
}

nlohmann::json read_manifest(const std::string& path, std::string_view schema_name) {
  const JsonSchema& schema = embedded_schema(schema_name);
  const std::string text = util::read_file(path);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte counts from 1 (the character that failed); offsets count from 0.
    throw FormatError(at_offset(path, e.byte > 0 ? e.byte - 1 : 0,
                                "invalid JSON: " + without_exception_tag(e.what())));
  } catch (const json::out_of_range& e) {  // a number too large for a double (no offset given)
    throw FormatError(at_file(path, "invalid JSON: " + without_exception_tag(e.what())));
  }
  check_identity(doc, schema, schema_name, path);
  schema.validate(doc, path);
  return doc;
}

std::string format_manifest(const std::string& path, const nlohmann::json& doc,
                            std::string_view schema_name) {
  embedded_schema(schema_name).validate(doc, path);
  try {
    return doc.dump(2) + "\n";
  } catch (const json::type_error& e) {
    throw InputError(at_file(path, "cannot write manifest: " + without_exception_tag(e.what())));
  }
}

void write_manifest(const std::string& path, const nlohmann::json& doc,
                    std::string_view schema_name) {
  util::write_file_atomic(path, format_manifest(path, doc, schema_name));
}

}  // namespace mltool::io
