// JSON Schema → grammar rules (docs/server.md "Structured output" lists every keyword and its limits).
//
// Supported: `type` (a name or a list, "null" included), `properties`, `required`, `additionalProperties` (false,
// true or a schema; absent means false, as in OpenAI's strict mode and xgrammar), `enum`, `const`, `anyOf`,
// `oneOf` (when its branches are provably disjoint, so the union is exact: json_schema_oneof.h), `allOf` with one
// schema, `$ref` to "#", "#/$defs/..." or "#/definitions/..." (recursion included), `items`, `minItems`,
// `maxItems`, `minLength`, `maxLength`, `pattern`, `format` (date, time, date-time, uuid, email, ipv4), `minimum`,
// `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (integers; numbers with any decimal bounds, compared exactly:
// json_schema_number.h), and the annotations (title, description, default, examples, $schema, $id, $comment,
// deprecated, readOnly, writeOnly), which change nothing. Any other keyword is an error naming it and where it is.
//
// Output form: properties in the schema's order (optional ones may be left out); whitespace after ':' and ','
// and around brackets is nothing, one space, or a newline and at most kMaxIndent spaces or tabs; numbers with at
// most 16 integer and 16 fraction digits and a 3-digit exponent (json_schema_number.h). These are llama.cpp's
// bounds: a weak or looping model would otherwise write digits or blanks until max_tokens.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace glint::server {

using Json = nlohmann::ordered_json;

inline constexpr int kMaxIndent = 20;  // blanks after a newline between JSON tokens

class JsonSchemaCompiler {
 public:
  explicit JsonSchemaCompiler(grammar::Grammar& grammar) : g_(grammar) {}

  // A rule for a JSON value valid against `schema` (which is also the document "#" refers to).
  Result<int32_t> AddSchema(const Json& schema);
  // A rule for any JSON value (json_object uses an object of it).
  int32_t AnyValue();
  int32_t AnyObject();
  // A rule for a value valid against `schema`, a part of the document `root` ("#" in its references).
  Result<int32_t> AddSubschema(const Json& schema, const Json& root, const std::string& path);
  // The raw text of a string-typed tool argument (GLM writes strings unquoted between <arg_value> tags), then
  // `terminator`: text without `terminator` (or, when constrained by enum/const/pattern/minLength/maxLength, the
  // constrained text; a length-limited one has no '<').
  Result<int32_t> AddRawString(const Json& schema, std::string_view terminator, const Json& root);
  Status CheckKeywords(const Json& schema, const std::string& path) const;
  int32_t Whitespace();

 private:
  Result<int32_t> Compile(const Json& schema, const std::string& path, int depth);
  Result<int32_t> CompileRef(const std::string& ref, const std::string& path, int depth);
  Result<int32_t> CompileType(const Json& schema, const std::string& type, const std::string& path, int depth);
  Result<int32_t> CompileObject(const Json& schema, const std::string& path, int depth);
  Result<int32_t> CompileArray(const Json& schema, const std::string& path, int depth);
  Result<int32_t> CompileString(const Json& schema, const std::string& path, bool raw, std::string_view stop);
  Result<int32_t> CompileNumber(const Json& schema, const std::string& path, bool integer);
  Result<int32_t> Literals(const Json& values, const std::string& path);
  int32_t StringRule();
  int32_t NumberRule();
  int32_t IntegerRule();
  int32_t Keyword(std::string_view text);

  grammar::Grammar& g_;
  const Json* root_ = nullptr;
  std::map<std::string, int32_t> refs_;  // JSON pointer → rule (created before its body: recursion)
  int32_t ws_ = -1, value_ = -1, object_ = -1, string_ = -1, number_ = -1, integer_ = -1, char_ = -1;
};

// A schema whose "type" allows only strings (or strings and null): GLM writes such tool arguments as raw text.
bool IsStringSchema(const Json& schema);

// An integer in [lo, hi] as decimal text without leading zeros (lo ≤ hi; both within ±1e18).
int32_t AddIntegerRange(grammar::Grammar& grammar, int64_t lo, int64_t hi);

}  // namespace glint::server
