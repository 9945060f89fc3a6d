#include "mltool/io/json_schema.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <utility>

#include "mltool/util/error.hpp"

namespace mltool::io {
namespace {

using nlohmann::json;

// Bits of Node::types (a set of JSON types, so plain flags rather than an enum).
constexpr unsigned kNull = 1, kBoolean = 2, kObject = 4, kArray = 8, kNumber = 16, kString = 32,
                   kInteger = 64;
constexpr std::pair<const char*, unsigned> kTypeNames[] = {
    {"null", kNull},     {"boolean", kBoolean}, {"object", kObject},  {"array", kArray},
    {"number", kNumber}, {"string", kString},   {"integer", kInteger}};

// Deep enough for any manifest, shallow enough that a self-referencing $ref
// cannot exhaust the stack.
constexpr int kMaxDepth = 200;
// libstdc++'s regex executor recurses per input character; longer strings could
// overflow the stack, so they are refused instead of matched.
constexpr std::size_t kMaxPatternInput = 4096;

struct Node {
  std::optional<bool> boolean_schema;  // set for the schemas `true` and `false`
  unsigned types = 0;                  // 0: any type
  std::map<std::string, std::size_t> properties;
  std::vector<std::string> required;
  std::optional<std::size_t> additional, items, ref;
  std::optional<std::uint64_t> min_items, max_items, min_length;
  std::optional<json> minimum, maximum, const_value, enum_values;
  std::optional<std::regex> pattern;
  std::string pattern_text;
};

std::string escape_token(const std::string& key) {
  std::string out;
  for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

std::string unescape_token(const std::string& token) {
  std::string out;
  for (std::size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
      out += token[++i] == '0' ? '~' : '/';
    } else {
      out += token[i];
    }
  }
  return out;
}

bool is_integral(const json& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  // Integral floats outside the 64-bit range are refused: callers read
  // integers with get<std::int64_t>() / get<std::uint64_t>(), where they would overflow.
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d && d >= -0x1p63 && d < 0x1p64;
}

long double as_long_double(const json& v) {
  if (v.is_number_unsigned()) return static_cast<long double>(v.get<std::uint64_t>());
  if (v.is_number_integer()) return static_cast<long double>(v.get<std::int64_t>());
  return static_cast<long double>(v.get<double>());
}

std::string short_dump(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string preview(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " items";
  return short_dump(v);
}

std::string type_words(unsigned types) {
  std::string out;
  for (auto [word, bit] : kTypeNames) {
    if (!(types & bit)) continue;
    if (!out.empty()) out += " or ";
    out += word;
  }
  return out.empty() ? "value" : out;
}

bool matches_type(unsigned types, const json& v) {
  if (types == 0) return true;
  if (v.is_null()) return types & kNull;
  if (v.is_boolean()) return types & kBoolean;
  if (v.is_object()) return types & kObject;
  if (v.is_array()) return types & kArray;
  if (v.is_string()) return types & kString;
  if (v.is_number()) return (types & kNumber) || ((types & kInteger) && is_integral(v));
  return false;
}

std::size_t utf8_length(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

class Compiler {
 public:
  Compiler(const std::string& name, std::vector<Node>& nodes) : name_(name), nodes_(nodes) {}

  void compile_root(const json& root) {
    nodes_.emplace_back();
    if (root.is_object() && root.contains("$defs")) {
      const json& defs = root["$defs"];
      if (!defs.is_object()) fail("/$defs", "must be an object");
      // Register every name before compiling any, so definitions may refer to
      // each other (and to themselves) in any order.
      for (auto it = defs.begin(); it != defs.end(); ++it) {
        defs_[it.key()] = nodes_.size();
        nodes_.emplace_back();
      }
      for (auto it = defs.begin(); it != defs.end(); ++it)
        compile_into(defs_[it.key()], it.value(), "/$defs/" + escape_token(it.key()));
    }
    compile_into(0, root, "");
  }

 private:
  [[noreturn]] void fail(const std::string& location, const std::string& message) const {
    throw FormatError(name_ + ": " + display_pointer(location) + ": " + message);
  }

  std::size_t compile(const json& schema, const std::string& location) {
    const std::size_t index = nodes_.size();
    nodes_.emplace_back();
    compile_into(index, schema, location);
    return index;
  }

  std::uint64_t count(const json& v, const std::string& location) const {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0))
      fail(location, "expected a non-negative integer");
    return v.get<std::uint64_t>();
  }

  void compile_into(std::size_t index, const json& schema, const std::string& location) {
    Node node;  // built aside: nodes_ may reallocate while children compile
    if (schema.is_boolean()) {
      node.boolean_schema = schema.get<bool>();
      nodes_[index] = std::move(node);
      return;
    }
    if (!schema.is_object()) fail(location, "a schema must be an object or a boolean");
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      const std::string& key = it.key();
      const std::string at = location + "/" + escape_token(key);
      if (is_annotation(key)) continue;  // they never change the outcome of validation
      if (key == "$defs") {
        if (!location.empty()) fail(at, "$defs is only supported at the schema root");
      } else if (!compile_structure(node, key, it.value(), at) &&
                 !compile_constraint(node, key, it.value(), at)) {
        fail(at, "unsupported keyword '" + key +
                     "' (mltool validates only the keywords listed in json_schema.hpp)");
      }
    }
    nodes_[index] = std::move(node);
  }

  static bool is_annotation(const std::string& key) {
    return key == "$schema" || key == "$id" || key == "$comment" || key == "title" ||
           key == "description" || key == "default" || key == "examples";
  }

  // The keywords that say what a value is made of: its type, properties, items. False for
  // any other keyword.
  bool compile_structure(Node& node, const std::string& key, const json& v, const std::string& at) {
    if (key == "type") {
      const json names = v.is_array() ? v : json::array({v});
      for (const json& n : names) {
        unsigned bit = 0;
        for (auto [word, b] : kTypeNames)
          if (n.is_string() && n.get<std::string>() == word) bit = b;
        if (!bit) fail(at, "unknown type " + short_dump(n));
        node.types |= bit;
      }
    } else if (key == "properties") {
      if (!v.is_object()) fail(at, "must be an object");
      for (auto p = v.begin(); p != v.end(); ++p)
        node.properties[p.key()] = compile(p.value(), at + "/" + escape_token(p.key()));
    } else if (key == "required") {
      if (!v.is_array()) fail(at, "must be an array of strings");
      for (const json& r : v) {
        if (!r.is_string()) fail(at, "must be an array of strings");
        node.required.push_back(r.get<std::string>());
      }
    } else if (key == "additionalProperties") {
      node.additional = compile(v, at);
    } else if (key == "items") {
      if (v.is_array()) fail(at, "must be a schema (tuple form / prefixItems is not supported)");
      node.items = compile(v, at);
    } else {
      return false;
    }
    return true;
  }

  // The keywords that bound a value (sizes, range, allowed values, pattern) or refer to a
  // definition. False for any other keyword.
  bool compile_constraint(Node& node, const std::string& key, const json& v,
                          const std::string& at) {
    if (key == "minItems") {
      node.min_items = count(v, at);
    } else if (key == "maxItems") {
      node.max_items = count(v, at);
    } else if (key == "minLength") {
      node.min_length = count(v, at);
    } else if (key == "minimum" || key == "maximum") {
      if (!v.is_number()) fail(at, "must be a number");
      (key == "minimum" ? node.minimum : node.maximum) = v;
    } else if (key == "enum") {
      if (!v.is_array() || v.empty()) fail(at, "must be a non-empty array");
      node.enum_values = v;
    } else if (key == "const") {
      node.const_value = v;
    } else if (key == "pattern") {
      compile_pattern(node, v, at);
    } else if (key == "$ref") {
      node.ref = resolve_ref(v, at);
    } else {
      return false;
    }
    return true;
  }

  void compile_pattern(Node& node, const json& v, const std::string& at) const {
    if (!v.is_string()) fail(at, "must be a string");
    node.pattern_text = v.get<std::string>();
    try {
      node.pattern.emplace(node.pattern_text, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail(at, "invalid regular expression: " + std::string(e.what()));
    }
  }

  std::size_t resolve_ref(const json& v, const std::string& at) const {
    const std::string prefix = "#/$defs/";
    const std::string target = v.is_string() ? v.get<std::string>() : "";
    if (target.compare(0, prefix.size(), prefix) != 0)
      fail(at, "only local references of the form \"#/$defs/<name>\" are supported");
    auto def = defs_.find(unescape_token(target.substr(prefix.size())));
    if (def == defs_.end()) fail(at, "no definition " + short_dump(v) + " in /$defs");
    return def->second;
  }

  const std::string& name_;
  std::vector<Node>& nodes_;
  std::map<std::string, std::size_t> defs_;
};

class Validator {
 public:
  Validator(const std::vector<Node>& nodes, std::vector<SchemaViolation>& out, std::size_t limit)
      : nodes_(nodes), out_(out), limit_(limit) {}

  void check(std::size_t index, const json& v, int depth) {
    if (out_.size() >= limit_) return;
    if (depth > kMaxDepth)
      return report("nesting deeper than " + std::to_string(kMaxDepth) + " schema levels");
    const Node& n = nodes_[index];
    if (n.boolean_schema) {
      if (!*n.boolean_schema) report("no value is allowed here");
      return;
    }
    if (n.ref) check(*n.ref, v, depth + 1);
    if (!matches_type(n.types, v))
      return report("expected " + type_words(n.types) + ", got " + preview(v));
    if (n.const_value && v != *n.const_value)
      report("expected " + short_dump(*n.const_value) + ", got " + preview(v));
    if (n.enum_values) check_enum(*n.enum_values, v);
    if (v.is_number()) check_range(n, v);
    if (v.is_string()) check_string(n, v.get_ref<const std::string&>());
    if (v.is_array()) check_array(n, v, depth);
    if (v.is_object()) check_object(n, v, depth);
  }

 private:
  void report(const std::string& message) {
    if (out_.size() < limit_) out_.push_back({pointer_, message});
  }

  // Descends into a child value, extending the pointer for its messages.
  void child(std::size_t index, const json& v, const std::string& token, int depth) {
    const std::size_t keep = pointer_.size();
    pointer_ += "/" + token;
    check(index, v, depth + 1);
    pointer_.resize(keep);
  }

  void check_enum(const json& values, const json& v) {
    for (const json& e : values)
      if (v == e) return;
    std::string list;
    for (const json& e : values) list += (list.empty() ? "" : ", ") + short_dump(e);
    report("expected one of " + list + ", got " + preview(v));
  }

  void check_range(const Node& n, const json& v) {
    const long double x = as_long_double(v);
    const bool low = n.minimum && x < as_long_double(*n.minimum);
    const bool high = n.maximum && x > as_long_double(*n.maximum);
    if (!low && !high) return;
    const std::string what = n.types == kInteger ? "integer" : "number";
    if (n.minimum && n.maximum)
      return report("expected " + what + " between " + short_dump(*n.minimum) + " and " +
                    short_dump(*n.maximum) + ", got " + short_dump(v));
    report("expected " + what +
           (low ? " >= " + short_dump(*n.minimum) : " <= " + short_dump(*n.maximum)) + ", got " +
           short_dump(v));
  }

  void check_string(const Node& n, const std::string& s) {
    if (n.min_length && utf8_length(s) < *n.min_length)
      report("expected a string of at least " + std::to_string(*n.min_length) +
             " characters, got " + short_dump(json(s)));
    if (!n.pattern) return;
    if (s.size() > kMaxPatternInput)
      return report("string of " + std::to_string(s.size()) +
                    " bytes is too long to check against /" + n.pattern_text + "/");
    if (!std::regex_search(s, *n.pattern))
      report("expected a string matching /" + n.pattern_text + "/, got " + short_dump(json(s)));
  }

  void check_array(const Node& n, const json& v, int depth) {
    if (n.min_items && v.size() < *n.min_items)
      report("expected at least " + std::to_string(*n.min_items) + " items, got " +
             std::to_string(v.size()));
    if (n.max_items && v.size() > *n.max_items)
      report("expected at most " + std::to_string(*n.max_items) + " items, got " +
             std::to_string(v.size()));
    if (!n.items) return;
    for (std::size_t i = 0; i < v.size() && out_.size() < limit_; ++i)
      child(*n.items, v[i], std::to_string(i), depth);
  }

  void check_object(const Node& n, const json& v, int depth) {
    for (const std::string& key : n.required) {
      if (v.contains(key)) continue;
      const std::size_t keep = pointer_.size();
      pointer_ += "/" + escape_token(key);
      report("required field is missing");
      pointer_.resize(keep);
    }
    for (auto it = v.begin(); it != v.end() && out_.size() < limit_; ++it) {
      auto p = n.properties.find(it.key());
      if (p != n.properties.end()) {
        child(p->second, it.value(), escape_token(it.key()), depth);
      } else if (n.additional) {
        const Node& extra = nodes_[*n.additional];
        if (extra.boolean_schema == false) {
          std::string allowed;
          for (const auto& [k, unused] : n.properties) allowed += (allowed.empty() ? "" : ", ") + k;
          const std::size_t keep = pointer_.size();
          pointer_ += "/" + escape_token(it.key());
          report("unexpected field (allowed: " + (allowed.empty() ? "none" : allowed) + ")");
          pointer_.resize(keep);
        } else {
          child(*n.additional, it.value(), escape_token(it.key()), depth);
        }
      }
    }
  }

  const std::vector<Node>& nodes_;
  std::vector<SchemaViolation>& out_;
  std::size_t limit_;
  std::string pointer_;
};

}  // namespace

struct JsonSchema::Compiled {
  std::vector<Node> nodes;
};

std::string display_pointer(const std::string& pointer) {
  return pointer.empty() ? "(root)" : pointer;
}

JsonSchema::JsonSchema(nlohmann::json schema, std::string name)
    : document_(std::move(schema)),
      name_(std::move(name)),
      compiled_(std::make_unique<Compiled>()) {
  Compiler(name_, compiled_->nodes).compile_root(document_);
}

JsonSchema::~JsonSchema() = default;
JsonSchema::JsonSchema(JsonSchema&&) noexcept = default;
JsonSchema& JsonSchema::operator=(JsonSchema&&) noexcept = default;

std::vector<SchemaViolation> JsonSchema::violations(const nlohmann::json& doc,
                                                    std::size_t limit) const {
  std::vector<SchemaViolation> out;
  Validator(compiled_->nodes, out, limit).check(0, doc, 0);
  return out;
}

void JsonSchema::validate(const nlohmann::json& doc, const std::string& path) const {
  const std::vector<SchemaViolation> found = violations(doc);
  if (found.empty()) return;
  // The first few in full: a misspelt field is both a missing one and an unexpected one, and
  // the second names the typo.
  constexpr std::size_t kShown = 3;
  std::string text;
  for (std::size_t i = 0; i < std::min(kShown, found.size()); ++i)
    text += (i ? "; " : "") + display_pointer(found[i].pointer) + ": " + found[i].message;
  if (found.size() > kShown)
    text += " (and " + std::to_string(found.size() - kShown) + " more problem" +
            (found.size() > kShown + 1 ? "s" : "") + ")";
  throw FormatError(at_file(path, text));
}

}  // namespace mltool::io
