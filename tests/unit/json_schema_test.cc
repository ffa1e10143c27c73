// The JSON Schema compiler (src/server/json_schema_*.cc): each compiled grammar is checked with the Earley
// reference (grammar/reference.h) and the pushdown matcher on texts whose validity is known independently —
// number bounds against an exact decimal comparison written here, schemas against hand-written valid and invalid
// documents — and the refusals are checked for the keyword they name.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/reference.h"
#include "server/json_schema_grammar.h"
#include "server/json_schema_number.h"
#include "test_util.h"

namespace glint::server {
namespace {

using grammar::CompiledGrammar;
using grammar::EarleyRecognize;
using grammar::Grammar;

Result<Grammar> CompileSchema(const Json& schema) {
  Grammar g;
  JsonSchemaCompiler compiler(g);
  GLINT_ASSIGN_OR_RETURN(int32_t rule, compiler.AddSchema(schema));
  g.set_root(rule);
  return g;
}

// Whether the pushdown matcher and Earley agree that `text` is a whole sentence; returns Earley's verdict.
bool Accepts(const Grammar& g, const std::string& text) {
  const bool earley = EarleyRecognize(g, text).complete;
  auto compiled = CompiledGrammar::Compile(g);
  EXPECT_TRUE(compiled.ok()) << compiled.status().message();
  if (!compiled.ok()) return earley;
  grammar::State state = compiled.value()->initial_state();
  const bool pushdown = compiled.value()->AdvanceBytes(state, text) && CompiledGrammar::IsAccepting(state);
  EXPECT_EQ(pushdown, earley) << text;
  return earley;
}

// Exact decimal comparison of "-?D+(.D+)?" texts, the reference for the number bounds: −1, 0 or 1.
int CompareDecimal(const std::string& a, const std::string& b) {
  struct Parts {
    bool negative;
    std::string integer, fraction;
  };
  const auto split = [](std::string text) {
    Parts p{false, "", ""};
    if (!text.empty() && text[0] == '-') p.negative = true, text.erase(0, 1);
    const size_t point = text.find('.');
    p.integer = text.substr(0, point);
    p.fraction = point == std::string::npos ? "" : text.substr(point + 1);
    p.integer.erase(0, std::min(p.integer.find_first_not_of('0'), p.integer.size()));
    while (!p.fraction.empty() && p.fraction.back() == '0') p.fraction.pop_back();
    if (p.integer.empty() && p.fraction.empty()) p.negative = false;
    return p;
  };
  const Parts x = split(a), y = split(b);
  const auto magnitude = [](const Parts& p, const Parts& q) {
    if (p.integer.size() != q.integer.size()) return p.integer.size() < q.integer.size() ? -1 : 1;
    if (p.integer != q.integer) return p.integer < q.integer ? -1 : 1;
    const size_t n = std::max(p.fraction.size(), q.fraction.size());
    const std::string f = p.fraction + std::string(n - p.fraction.size(), '0');
    const std::string g = q.fraction + std::string(n - q.fraction.size(), '0');
    return f == g ? 0 : (f < g ? -1 : 1);
  };
  if (x.negative != y.negative) return x.negative ? -1 : 1;
  const int m = magnitude(x, y);
  return x.negative ? -m : m;
}

// Candidate numbers: random short decimals, plus the bounds themselves and their digit-level neighbours.
std::vector<std::string> Candidates(const std::vector<std::string>& bounds) {
  std::vector<std::string> out = {"0", "0.0", "-0.5", "1", "-1", "10", "0.00001", "-0.00001", "99.99", "-99.99"};
  std::mt19937 random(7);
  for (int i = 0; i < 300; ++i) {
    std::string text = random() % 2 ? "-" : "";
    const int integer_digits = 1 + static_cast<int>(random() % 3);
    const int first = static_cast<int>(random() % 10);
    text += static_cast<char>('0' + (integer_digits > 1 && first == 0 ? 1 : first));
    for (int d = 1; d < integer_digits; ++d) text += static_cast<char>('0' + random() % 10);
    if (random() % 3 != 0) {
      text += '.';
      const int fraction_digits = 1 + static_cast<int>(random() % 4);
      for (int d = 0; d < fraction_digits; ++d) text += static_cast<char>('0' + random() % 10);
    }
    out.push_back(text);
  }
  for (const std::string& bound : bounds) {
    for (const std::string suffix : {"", "0", "1", "9", "01", "0001", "99999"}) {
      out.push_back(bound + (bound.find('.') == std::string::npos && !suffix.empty() ? "." : "") + suffix);
    }
    if (bound.size() > 1 && bound.back() != '.') out.push_back(bound.substr(0, bound.size() - 1));
  }
  return out;
}

struct BoundsCase {
  const char* schema;
  const char* lo;  // "" when absent
  bool lo_exclusive;
  const char* hi;
  bool hi_exclusive;
};

TEST(JsonSchemaNumber, DecimalBoundsMatchAnExactComparison) {
  const std::vector<BoundsCase> cases = {
      {R"({"type": "number", "minimum": 0.5})", "0.5", false, "", false},
      {R"({"type": "number", "exclusiveMinimum": 0.5, "maximum": 2.75})", "0.5", true, "2.75", false},
      {R"({"type": "number", "minimum": -1.25, "exclusiveMaximum": 3.5})", "-1.25", false, "3.5", true},
      {R"({"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": -0.125})", "-2.5", true, "-0.125", true},
      {R"({"type": "number", "minimum": 1.5, "maximum": 1.75})", "1.5", false, "1.75", false},
      {R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.001})", "0", true, "0.001", true},
      {R"({"type": "number", "maximum": -0.5})", "", false, "-0.5", false},
      {R"({"type": "number", "exclusiveMaximum": 0})", "", false, "0", true},
      {R"({"type": "number", "minimum": 10, "maximum": 20})", "10", false, "20", false},
      {R"({"type": "number", "minimum": 0.1, "maximum": 0.1})", "0.1", false, "0.1", false},
  };
  for (const BoundsCase& c : cases) {
    SCOPED_TRACE(c.schema);
    ASSERT_OK_AND_ASSIGN(Grammar g, CompileSchema(Json::parse(c.schema)));
    std::vector<std::string> bounds;
    for (const char* b : {c.lo, c.hi}) {
      if (*b != 0) bounds.push_back(b);
    }
    int accepted = 0;
    for (const std::string& text : Candidates(bounds)) {
      bool valid = true;
      if (*c.lo != 0)
        valid = valid && (c.lo_exclusive ? CompareDecimal(text, c.lo) > 0 : CompareDecimal(text, c.lo) >= 0);
      if (*c.hi != 0)
        valid = valid && (c.hi_exclusive ? CompareDecimal(text, c.hi) < 0 : CompareDecimal(text, c.hi) <= 0);
      // The output form: no "-0" texts (they are 0 written another way) and no leading zeros.
      const bool negative_zero = text[0] == '-' && CompareDecimal(text, "0") == 0;
      const bool leading_zero =
          text.size() > 1 + (text[0] == '-') && text[text[0] == '-'] == '0' && text[1 + (text[0] == '-')] != '.';
      if (negative_zero || leading_zero || text.back() == '.') valid = false;  // "3." is not JSON
      EXPECT_EQ(Accepts(g, text), valid) << text;
      accepted += valid;
    }
    EXPECT_GT(accepted, 0);
  }
}

// llama.cpp's bounds (issue 31): a weak model must close numbers and stop writing blanks. 16 integer and 16
// fraction digits, a 3-digit exponent; between tokens nothing, one space, or a newline and at most 20 blanks.
TEST(JsonSchemaNumber, NumbersAndWhitespaceAreBounded) {
  ASSERT_OK_AND_ASSIGN(Grammar g, CompileSchema(Json::parse(R"({"type": "object", "properties": {
      "n": {"type": "number"}, "i": {"type": "integer"}, "any": {}}, "required": ["n"]})")));
  const std::string sixteen(16, '9'), seventeen(17, '9');
  const std::string indent20(20, ' '), indent21(21, ' ');
  for (const std::string& valid : std::vector<std::string>{
           "{\"n\": " + sixteen + "." + sixteen + "e-999}", "{\"n\": -" + sixteen + ", \"i\": " + sixteen + "}",
           "{\"n\": 1, \"any\": [" + sixteen + "." + sixteen + "E+12]}", "{\n" + indent20 + "\"n\": 1\n}",
           "{\"n\":\n\t1}", std::string("{\"n\":1}")}) {
    EXPECT_TRUE(Accepts(g, valid)) << valid;
  }
  for (const std::string& invalid : std::vector<std::string>{
           "{\"n\": " + seventeen + "}", "{\"n\": 1." + seventeen + "}", "{\"n\": 1e1000}",
           "{\"n\": 1, \"i\": " + seventeen + "}", "{\"n\": 1, \"any\": " + seventeen + "}",
           "{\"n\": 1, \"any\": 1.5e-1000}", "{\n" + indent21 + "\"n\": 1}", std::string("{\"n\":  1}"),
           std::string("{\"n\": 1 \n}"), std::string("{\n\n\"n\": 1}")}) {
    EXPECT_FALSE(Accepts(g, invalid)) << invalid;
  }
}

TEST(JsonSchemaNumber, BoundsThatExcludeEverythingAreRefused) {
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"type": "number", "minimum": 2.5, "maximum": 1.5})")),
                        "exclude every number");
  EXPECT_ERROR_CONTAINS(
      CompileSchema(Json::parse(R"({"type": "number", "exclusiveMinimum": 1.5, "exclusiveMaximum": 1.5})")),
      "exclude every number");
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"type": "number", "minimum": 1e30})")), "1e18");
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"type": "integer", "minimum": 1.5, "maximum": 1.75})")),
                        "exclude every integer");
}

TEST(JsonSchemaNumber, DecimalOfIsTheShortestText) {
  ASSERT_OK_AND_ASSIGN(Decimal tenth, DecimalOf(0.1));
  EXPECT_EQ(tenth.integer, "0");
  EXPECT_EQ(tenth.fraction, "1");
  ASSERT_OK_AND_ASSIGN(Decimal negative, DecimalOf(-120.25));
  EXPECT_TRUE(negative.negative);
  EXPECT_EQ(negative.integer, "120");
  EXPECT_EQ(negative.fraction, "25");
  ASSERT_OK_AND_ASSIGN(Decimal zero, DecimalOf(-0.0));
  EXPECT_FALSE(zero.negative);
  ASSERT_OK_AND_ASSIGN(Decimal tiny, DecimalOf(1e-20));
  EXPECT_EQ(tiny.fraction, "00000000000000000001");
}

TEST(JsonSchemaOneOf, DisjointBranchesCompileAsTheUnion) {
  ASSERT_OK_AND_ASSIGN(
      Grammar types,
      CompileSchema(Json::parse(R"({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})")));
  EXPECT_TRUE(Accepts(types, R"("a")"));
  EXPECT_TRUE(Accepts(types, "12"));
  EXPECT_TRUE(Accepts(types, "null"));
  EXPECT_FALSE(Accepts(types, "true"));
  ASSERT_OK_AND_ASSIGN(Grammar tagged, CompileSchema(Json::parse(R"({"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"]},
      {"$ref": "#/$defs/b"}],
      "$defs": {"b": {"type": "object", "properties": {"kind": {"enum": ["b", "c"]}}, "required": ["kind"]}}})")));
  EXPECT_TRUE(Accepts(tagged, R"({"kind": "a", "x": 1})"));
  EXPECT_TRUE(Accepts(tagged, R"({"kind": "c"})"));
  EXPECT_FALSE(Accepts(tagged, R"({"kind": "a"})"));
  ASSERT_OK(CompileSchema(Json::parse(R"({"oneOf": [{"const": 1}, {"enum": [2, "x"]}]})")).status());
}

TEST(JsonSchemaOneOf, OverlappingBranchesAreRefused) {
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})")),
                        "'oneOf' at #: branches 0 and 1 may both match");
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"oneOf": [{"type": "string"}, {"maxLength": 3}]})")),
                        "branches 0 and 1");
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"type": "object", "properties": {"v": {"oneOf": [
                            {"type": "object", "properties": {"a": {"type": "string"}}},
                            {"type": "object", "properties": {"b": {"type": "string"}}}]}}})")),
                        "'oneOf' at #/properties/v");
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"oneOf": [{"enum": [1, 2]}, {"const": 2.0}]})")),
                        "branches 0 and 1");
}

TEST(JsonSchema, DocumentsOfASchemaSuite) {
  const Json schema = Json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 3},
      "tags": {"type": "array", "items": {"enum": ["a", "é", "日本"]}, "minItems": 1, "maxItems": 2},
      "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2}$"},
      "next": {"anyOf": [{"type": "null"}, {"$ref": "#"}]},
      "score": {"type": ["integer", "null"], "minimum": -3, "exclusiveMaximum": 4}
    },
    "required": ["name", "tags"]})");
  ASSERT_OK_AND_ASSIGN(Grammar g, CompileSchema(schema));
  for (const char* valid :
       {R"({"name": "ab", "tags": ["a"]})", R"({"name":"日本","tags":["é","日本"],"code":"AB-12"})",
        R"({"name": "x", "tags": ["a"], "next": {"name": "y", "tags": ["a"], "next": null}})",
        R"({"name": "x", "tags": ["a"], "score": -3})", R"({"name": "x", "tags": ["a"], "score": null})",
        "{\n  \"name\": \"\\n\",\n  \"tags\": [\"a\"]\n}"}) {
    EXPECT_TRUE(Accepts(g, valid)) << valid;
  }
  for (const char* invalid :
       {R"({"name": "", "tags": ["a"]})", R"({"name": "abcd", "tags": ["a"]})", R"({"name": "a", "tags": []})",
        R"({"name": "a", "tags": ["a", "a", "a"]})", R"({"name": "a", "tags": ["b"]})", R"({"tags": ["a"]})",
        R"({"name": "a", "tags": ["a"], "code": "ab-12"})", R"({"name": "a", "tags": ["a"], "score": 4})",
        R"({"name": "a", "tags": ["a"], "score": 1.5})", R"({"name": "a", "tags": ["a"], "extra": 1})",
        R"({"name": "a", "tags": ["a"], "next": {"name": "y"}})"}) {
    EXPECT_FALSE(Accepts(g, invalid)) << invalid;
  }
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"type": "string", "contentEncoding": "base64"})")),
                        "unsupported JSON Schema keyword 'contentEncoding' at #");
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"properties": {"a": {"not": {}}}})")), "'not' at #/properties/a");
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"$ref": "#/$defs/missing"})")), "points at nothing");
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"type": "string", "pattern": "(a)\\1"})")), "backreferences");
  EXPECT_ERROR_CONTAINS(CompileSchema(Json::parse(R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})")),
                        "'allOf' at #");
}

}  // namespace
}  // namespace glint::server
