// A small JSON Schema (draft 2020-12) validator for the subset mltool's schemas
// use. Debian ships no C++ validator, and a subset we fully understand is safer
// than a general one: a schema using any keyword outside the subset is rejected
// when compiled, so no constraint is ever silently ignored.
//
// Supported: type (incl. "integer" and arrays of types), properties, required,
// additionalProperties (bool or schema), items (schema), minItems, maxItems,
// enum, const, minimum, maximum, minLength, pattern (ECMAScript, unanchored),
// $defs at the root with local "$ref": "#/$defs/<name>", boolean schemas, and
// the annotations $schema, $id, $comment, title, description, default, examples.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mltool::io {

/// One validation failure: where in the document, and what was expected there.
struct SchemaViolation {
  std::string pointer;  ///< JSON pointer of the offending value ("" for the root)
  std::string message;  ///< e.g. "expected integer >= 1, got -3"
};

/// "/dims" for a pointer, "(root)" for the empty pointer: how errors show a location.
std::string display_pointer(const std::string& pointer);

/// A compiled schema. Immutable after construction, so one instance may validate
/// from several threads at once.
class JsonSchema {
 public:
  /// Compiles `schema`; `name` (e.g. "features.schema.json") prefixes compile
  /// errors. Throws FormatError naming the schema location of any unsupported
  /// keyword, malformed keyword value, bad regex or unresolvable $ref.
  JsonSchema(nlohmann::json schema, std::string name);
  ~JsonSchema();
  JsonSchema(JsonSchema&&) noexcept;
  JsonSchema& operator=(JsonSchema&&) noexcept;

  /// Up to `limit` violations of `doc`, in document order; empty if valid.
  std::vector<SchemaViolation> violations(const nlohmann::json& doc, std::size_t limit = 20) const;

  /// Throws FormatError "<path>: <pointer>: <message>" for the first violation
  /// (with a count of the others); returns normally if `doc` is valid.
  void validate(const nlohmann::json& doc, const std::string& path) const;

  /// The schema as given.
  const nlohmann::json& document() const { return document_; }
  const std::string& name() const { return name_; }

 private:
  struct Compiled;
  nlohmann::json document_;
  std::string name_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace mltool::io
