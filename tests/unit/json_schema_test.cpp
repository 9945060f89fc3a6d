#include "mltool/io/json_schema.hpp"

#include <gtest/gtest.h>

#include <string>

#include "mltool/util/error.hpp"
#include "support/errors.hpp"

namespace {

using mltool::FormatError;
using mltool::io::JsonSchema;
using mltool::testing::error_or_empty;
using nlohmann::json;

JsonSchema schema(const char* text) { return JsonSchema(json::parse(text), "test.schema.json"); }

// The message validate() throws for `doc`, or "" if it is valid.
std::string error_of(const JsonSchema& s, const char* doc) {
  return error_or_empty<FormatError>([&] { s.validate(json::parse(doc), "doc.json"); });
}

std::string compile_error(const char* text) {
  return error_or_empty<FormatError>([&] { schema(text); });
}

TEST(JsonSchema, IntegerMinimumMessageNamesPointer) {
  const JsonSchema s =
      schema(R"({"type": "object", "properties": {"dims": {"type": "integer", "minimum": 1}}})");
  EXPECT_EQ(error_of(s, R"({"dims": -3})"), "doc.json: /dims: expected integer >= 1, got -3");
  EXPECT_EQ(error_of(s, R"({"dims": "8"})"), "doc.json: /dims: expected integer, got \"8\"");
  EXPECT_EQ(error_of(s, R"({"dims": 2.5})"), "doc.json: /dims: expected integer, got 2.5");
  EXPECT_EQ(error_of(s, R"({"dims": 8.0})"), "");  // JSON Schema: 8.0 is an integer
  EXPECT_EQ(error_of(s, R"({"dims": 18446744073709551615})"), "");
  EXPECT_EQ(error_of(s, R"({"dims": 1e300})"), "doc.json: /dims: expected integer, got 1e+300");
  EXPECT_EQ(error_of(s, "[]"), "doc.json: (root): expected object, got an array of 0 items");
}

TEST(JsonSchema, TypesIncludingArraysOfTypes) {
  const JsonSchema s = schema(R"({"type": ["string", "null"]})");
  EXPECT_EQ(error_of(s, "null"), "");
  EXPECT_EQ(error_of(s, R"("x")"), "");
  EXPECT_EQ(error_of(s, "true"), "doc.json: (root): expected null or string, got true");
  const JsonSchema num = schema(R"({"type": "number", "maximum": 1.5})");
  EXPECT_EQ(error_of(num, "1"), "");
  EXPECT_EQ(error_of(num, "2"), "doc.json: (root): expected number <= 1.5, got 2");
  const JsonSchema range = schema(R"({"type": "integer", "minimum": 1, "maximum": 3})");
  EXPECT_EQ(error_of(range, "4"), "doc.json: (root): expected integer between 1 and 3, got 4");
}

TEST(JsonSchema, RequiredAndAdditionalProperties) {
  const JsonSchema s = schema(R"({
    "type": "object", "required": ["a", "b"], "additionalProperties": false,
    "properties": {"a": {"type": "string"}, "b": {"type": "boolean"}}})");
  EXPECT_EQ(error_of(s, R"({"a": "x", "b": true})"), "");
  EXPECT_EQ(error_of(s, R"({"a": "x"})"), "doc.json: /b: required field is missing");
  EXPECT_EQ(error_of(s, R"({"a": "x", "b": true, "c/d": 1})"),
            "doc.json: /c~1d: unexpected field (allowed: a, b)");
  EXPECT_EQ(error_of(s, R"({"c": 1})"),
            "doc.json: /a: required field is missing; /b: required field is missing; /c: "
            "unexpected field (allowed: a, b)");
  EXPECT_EQ(error_of(s, R"({"c": 1, "d": 2, "e": 3})"),
            "doc.json: /a: required field is missing; /b: required field is missing; /c: "
            "unexpected field (allowed: a, b) (and 2 more problems)");
  const JsonSchema typed = schema(R"({"additionalProperties": {"type": "integer"}})");
  EXPECT_EQ(error_of(typed, R"({"x": 1, "y": "2"})"), "doc.json: /y: expected integer, got \"2\"");
}

TEST(JsonSchema, ArraysAndItems) {
  const JsonSchema s = schema(R"({"type": "array", "minItems": 1, "maxItems": 3,
                                  "items": {"type": "integer", "minimum": 0}})");
  EXPECT_EQ(error_of(s, "[0, 5]"), "");
  EXPECT_EQ(error_of(s, "[]"), "doc.json: (root): expected at least 1 items, got 0");
  EXPECT_EQ(error_of(s, "[1, 2, 3, 4]"), "doc.json: (root): expected at most 3 items, got 4");
  EXPECT_EQ(error_of(s, "[1, -2]"), "doc.json: /1: expected integer >= 0, got -2");
}

TEST(JsonSchema, EnumConstStrings) {
  const JsonSchema s = schema(R"({"properties": {
    "dtype": {"enum": ["float32", "float16"]},
    "format": {"const": "mltool.features"},
    "name": {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"}}})");
  EXPECT_EQ(error_of(s, R"({"dtype": "float16", "format": "mltool.features", "name": "ab"})"), "");
  EXPECT_EQ(error_of(s, R"({"dtype": "int8"})"),
            "doc.json: /dtype: expected one of \"float32\", \"float16\", got \"int8\"");
  EXPECT_EQ(error_of(s, R"({"format": 1})"),
            "doc.json: /format: expected \"mltool.features\", got 1");
  // minLength counts characters, not bytes.
  EXPECT_EQ(error_of(s, R"({"name": "é"})"),
            "doc.json: /name: expected a string of at least 2 characters, got \"é\"; /name: "
            "expected a string matching /^[a-z]+$/, got \"é\"");
  EXPECT_EQ(error_of(s, R"({"name": "aB"})"),
            "doc.json: /name: expected a string matching /^[a-z]+$/, got \"aB\"");
  EXPECT_NE(
      error_of(s, ("{\"name\": \"" + std::string(5000, 'a') + "\"}").c_str()).find("too long"),
      std::string::npos);
}

TEST(JsonSchema, DefsAndRefsIncludingRecursion) {
  const JsonSchema s = schema(R"({
    "$defs": {"count": {"type": "integer", "minimum": 0},
              "tree": {"type": "object", "properties": {"n": {"$ref": "#/$defs/count"},
                                                        "kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}}},
    "$ref": "#/$defs/tree"})");
  EXPECT_EQ(error_of(s, R"({"n": 1, "kids": [{"n": 2}, {"kids": [{"n": 3}]}]})"), "");
  EXPECT_EQ(error_of(s, R"({"kids": [{"n": 2}, {"kids": [{"n": -3}]}]})"),
            "doc.json: /kids/1/kids/0/n: expected integer >= 0, got -3");
}

TEST(JsonSchema, DeepDocumentsAndRefCyclesDoNotOverflowTheStack) {
  const JsonSchema tree =
      schema(R"({"$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"}}},
                                     "$ref": "#/$defs/a"})");
  json deep = json::array();
  for (int i = 0; i < 1000; ++i) deep = json::array({deep});
  const auto found = tree.violations(deep);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].message.find("nesting deeper"), std::string::npos);
  const JsonSchema loop = schema(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})");
  EXPECT_NE(error_of(loop, "1").find("nesting deeper"), std::string::npos);
}

TEST(JsonSchema, BooleanSchemas) {
  EXPECT_EQ(error_of(schema("true"), "[1]"), "");
  EXPECT_EQ(error_of(schema("false"), "1"), "doc.json: (root): no value is allowed here");
  EXPECT_EQ(error_of(schema(R"({"properties": {"x": false}})"), R"({"x": 1})"),
            "doc.json: /x: no value is allowed here");
}

TEST(JsonSchema, ViolationsAreCollectedUpToALimit) {
  const JsonSchema s = schema(R"({"items": {"type": "string"}})");
  EXPECT_EQ(s.violations(json::parse("[1, 2, 3, \"x\", 5]")).size(), 4u);
  EXPECT_EQ(s.violations(json::parse("[1, 2, 3, \"x\", 5]"), 2).size(), 2u);
  EXPECT_EQ(s.violations(json::parse("[1, 2]"))[1].pointer, "/1");
}

TEST(JsonSchema, RejectsUnknownKeywordsAndBadSchemas) {
  EXPECT_EQ(compile_error(R"({"properties": {"x": {"oneOf": []}}})"),
            "test.schema.json: /properties/x/oneOf: unsupported keyword 'oneOf' "
            "(mltool validates only the keywords listed in json_schema.hpp)");
  EXPECT_NE(compile_error(R"({"exclusiveMinimum": 0})").find("'exclusiveMinimum'"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"format": "uri"})").find("unsupported keyword 'format'"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"type": "float"})").find("/type: unknown type \"float\""),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref": "other.json#/x"})").find("only local references"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"$ref": "#/$defs/missing"})").find("no definition"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"pattern": "("})").find("/pattern: invalid regular expression"),
            std::string::npos);
  EXPECT_NE(compile_error(R"({"items": [{}]})").find("prefixItems"), std::string::npos);
  EXPECT_NE(compile_error(R"({"minItems": -1})").find("non-negative integer"), std::string::npos);
  EXPECT_NE(compile_error(R"({"enum": []})").find("non-empty array"), std::string::npos);
  EXPECT_NE(compile_error(R"({"properties": {"x": {"$defs": {}}}})")
                .find("only supported at the schema root"),
            std::string::npos);
  EXPECT_NE(compile_error("3").find("must be an object or a boolean"), std::string::npos);
  // Annotations are accepted anywhere.
  EXPECT_EQ(compile_error(R"({"$schema": "x", "title": "t", "description": "d", "$comment": "c",
                              "default": 1, "examples": [1], "$id": "i"})"),
            "");
}

TEST(JsonSchema, MovesKeepTheCompiledSchema) {
  JsonSchema a = schema(R"({"type": "integer"})");
  JsonSchema b = std::move(a);
  EXPECT_EQ(error_of(b, "\"x\""), "doc.json: (root): expected integer, got \"x\"");
  EXPECT_EQ(b.name(), "test.schema.json");
  EXPECT_EQ(b.document()["type"], "integer");
}

}  // namespace
