// JSON manifests (features.json, dataset.json, ...): read and validated against
// the schemas of schemas/*.schema.json, which are compiled into the library
// (generated at build time from schemas/*.schema.json by scripts/embed_schemas.py) so the
// code validates against exactly the files the docs link to.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mltool/io/json_schema.hpp"

namespace mltool::io {

/// The text of schemas/<name>.schema.json as compiled in (e.g. name "features"),
/// or an empty view if there is no such schema. Defined in the generated file.
std::string_view schema_text(std::string_view name);

/// Names of every compiled-in schema, sorted. Defined in the generated file.
std::vector<std::string_view> schema_names();

/// The compiled schema `name`, built once and cached for the life of the process
/// (thread-safe). Throws UsageError for an unknown name.
const JsonSchema& embedded_schema(std::string_view name);

/// Reads, parses and validates the manifest at `path` against schema `name`.
/// Throws InputError if it cannot be read; FormatError for invalid JSON (with the
/// byte offset), for a "format" other than the schema's, for a "format_version"
/// newer than this build supports ("upgrade mltool"), and for any other
/// violation (naming the JSON pointer and what was expected).
nlohmann::json read_manifest(const std::string& path, std::string_view schema_name);

/// Validates `doc` against schema `name` and returns the text write_manifest
/// would write, without writing it: for writers that must know the manifest is
/// publishable before they commit the data it describes. FormatError names
/// `path` for a violation; InputError if `doc` holds invalid UTF-8.
std::string format_manifest(const std::string& path, const nlohmann::json& doc,
                            std::string_view schema_name);

/// Validates `doc` against schema `name` (so a bug never publishes an invalid
/// manifest: FormatError naming `path`), then writes it atomically, pretty-printed
/// with a 2-space indent and a trailing newline.
void write_manifest(const std::string& path, const nlohmann::json& doc,
                    std::string_view schema_name);

/// The newest "format_version" schema `name` accepts (its properties/format_version
/// "maximum" or "const"), or 0 if the schema does not constrain one.
std::int64_t supported_format_version(std::string_view schema_name);

}  // namespace mltool::io
