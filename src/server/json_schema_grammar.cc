#include "server/json_schema_grammar.h"

#include <array>
#include <cmath>
#include <set>
#include <tuple>

#include "grammar/regex.h"
#include "server/json_schema_number.h"
#include "server/json_schema_oneof.h"

namespace glint::server {
namespace {

using grammar::Element;
using grammar::Grammar;
using grammar::Sequence;

constexpr int kMaxSchemaDepth = 64;

const std::set<std::string>& Annotations() {
  static const std::set<std::string> names = {"title", "description", "default",    "examples", "$schema",
                                              "$id",   "$comment",    "deprecated", "readOnly", "writeOnly",
                                              "$defs", "definitions", "strict"};
  return names;
}

const std::set<std::string>& Supported() {
  static const std::set<std::string> names = {"type",
                                              "properties",
                                              "required",
                                              "additionalProperties",
                                              "enum",
                                              "const",
                                              "anyOf",
                                              "oneOf",
                                              "allOf",
                                              "$ref",
                                              "items",
                                              "minItems",
                                              "maxItems",
                                              "minLength",
                                              "maxLength",
                                              "pattern",
                                              "format",
                                              "minimum",
                                              "maximum",
                                              "exclusiveMinimum",
                                              "exclusiveMaximum"};
  return names;
}

std::string Digits(int64_t value) { return std::to_string(value); }

// Decimal strings of equal length lo ≤ hi (leading zeros kept): the sequence of digit ranges.
Sequence FixedDigits(Grammar& g, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return {};
  if (lo[0] == hi[0]) {
    Sequence sequence = {Element::Byte(static_cast<uint8_t>(lo[0]))};
    Sequence rest = FixedDigits(g, lo.substr(1), hi.substr(1));
    sequence.insert(sequence.end(), rest.begin(), rest.end());
    return sequence;
  }
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  const bool all_low = lo_rest.find_first_not_of('0') == std::string::npos;
  const bool all_high = hi_rest.find_first_not_of('9') == std::string::npos;
  const auto any_digits = [&](size_t n) {
    Sequence s;
    for (size_t i = 0; i < n; ++i) s.push_back(Element::Bytes('0', '9'));
    return s;
  };
  if (all_low && all_high) {
    Sequence sequence = {Element::Bytes(static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(hi[0]))};
    Sequence rest = any_digits(lo_rest.size());
    sequence.insert(sequence.end(), rest.begin(), rest.end());
    return sequence;
  }
  std::vector<Sequence> alternatives;
  Sequence first = {Element::Byte(static_cast<uint8_t>(lo[0]))};
  Sequence first_rest = FixedDigits(g, lo_rest, std::string(lo_rest.size(), '9'));
  first.insert(first.end(), first_rest.begin(), first_rest.end());
  alternatives.push_back(std::move(first));
  if (hi[0] - lo[0] > 1) {
    Sequence middle = {Element::Bytes(static_cast<uint8_t>(lo[0] + 1), static_cast<uint8_t>(hi[0] - 1))};
    Sequence rest = any_digits(lo_rest.size());
    middle.insert(middle.end(), rest.begin(), rest.end());
    alternatives.push_back(std::move(middle));
  }
  Sequence last = {Element::Byte(static_cast<uint8_t>(hi[0]))};
  Sequence last_rest = FixedDigits(g, std::string(hi_rest.size(), '0'), hi_rest);
  last.insert(last.end(), last_rest.begin(), last_rest.end());
  alternatives.push_back(std::move(last));
  return {Element::Rule(g.AddRuleWith("digits", std::move(alternatives)))};
}

// Alternatives for the non-negative integers in [lo, hi] (0 ≤ lo ≤ hi), split by digit count.
void NonNegativeRange(Grammar& g, int64_t lo, int64_t hi, std::vector<Sequence>& out) {
  int64_t length_start = 0, length_end = 9;
  for (size_t length = 1; length <= 19 && length_start <= hi; ++length) {
    const int64_t a = std::max(lo, length_start), b = std::min(hi, length_end);
    if (a <= b) out.push_back(FixedDigits(g, Digits(a), Digits(b)));
    if (length == 18) break;  // 10^18 − 1 is the largest bound accepted
    length_start = length_end + 1;
    length_end = length_end * 10 + 9;
  }
}

Sequence Literal(std::string_view text) { return Grammar::Literal(text); }

Result<double> NumberField(const Json& schema, const char* name, const std::string& path) {
  const Json& value = schema[name];
  if (!value.is_number()) return InvalidArgument("'", name, "' at ", path, " must be a number");
  return value.get<double>();
}

}  // namespace

int32_t AddIntegerRange(Grammar& g, int64_t lo, int64_t hi) {
  std::vector<Sequence> alternatives;
  if (hi >= 0) NonNegativeRange(g, std::max<int64_t>(lo, 0), hi, alternatives);
  if (lo < 0) {
    std::vector<Sequence> negative;
    NonNegativeRange(g, std::max<int64_t>(-hi, 1), -lo, negative);
    if (!negative.empty()) {
      alternatives.push_back({Element::Byte('-'), Element::Rule(g.AddRuleWith("int", std::move(negative)))});
    }
  }
  return g.AddRuleWith("integer", std::move(alternatives));
}

int32_t JsonSchemaCompiler::Whitespace() {
  if (ws_ < 0) {
    // Nothing, one space, or a newline and an indent (llama.cpp's bound): a model that loops on blanks must write
    // a token instead, and pretty-printed JSON up to 10 levels of two-space indent still fits.
    const Element indent_char = Element::Rule(g_.AddRuleWith("ws.indent", {Literal(" "), Literal("\t")}));
    Sequence newline = Literal("\n");
    newline.push_back(g_.Repeat({indent_char}, 0, kMaxIndent, "ws.indent").value());
    ws_ = g_.AddRuleWith("ws", {{}, Literal(" "), std::move(newline)});
  }
  return ws_;
}

int32_t JsonSchemaCompiler::Keyword(std::string_view text) {
  return g_.AddRuleWith(std::string(text), {Literal(text)});
}

int32_t JsonSchemaCompiler::StringRule() {
  if (string_ < 0) {
    if (char_ < 0) char_ = grammar::AddJsonStringCharacter(g_);
    string_ =
        g_.AddRuleWith("string", {{Element::Byte('"'), g_.Star({Element::Rule(char_)}, "chars"), Element::Byte('"')}});
  }
  return string_;
}

int32_t JsonSchemaCompiler::IntegerRule() {
  if (integer_ < 0) integer_ = AddIntegerRange(g_, -kMaxIntegerPart, kMaxIntegerPart);
  return integer_;
}

int32_t JsonSchemaCompiler::NumberRule() {
  if (number_ < 0) {
    const Element digit = Element::Bytes('0', '9');
    const Element fraction =
        g_.Optional({Element::Byte('.'), g_.Repeat({digit}, 1, kMaxFractionDigits, "frac").value()}, "frac");
    const Element sign = g_.Optional({Element::Rule(g_.AddRuleWith("sign", {Literal("+"), Literal("-")}))}, "sign");
    const Element exponent = g_.Optional({Element::Rule(g_.AddRuleWith("e", {Literal("e"), Literal("E")})), sign,
                                          g_.Repeat({digit}, 1, kMaxExponentDigits, "exp").value()},
                                         "exp");
    number_ = g_.AddRuleWith("number", {{Element::Rule(IntegerRule()), fraction, exponent}});
  }
  return number_;
}

int32_t JsonSchemaCompiler::AnyValue() {
  if (value_ >= 0) return value_;
  value_ = g_.AddRule("value");
  const Element ws = Element::Rule(Whitespace());
  const Element value = Element::Rule(value_);
  const int32_t elements =
      g_.AddRuleWith("elements", {{value, ws, g_.Star({Element::Byte(','), ws, value, ws}, "elements")}});
  const int32_t array = g_.AddRuleWith(
      "array", {{Element::Byte('['), ws, g_.Optional({Element::Rule(elements)}, "elements"), Element::Byte(']')}});
  for (int32_t rule :
       {AnyObject(), array, StringRule(), NumberRule(), Keyword("true"), Keyword("false"), Keyword("null")}) {
    g_.AddAlternative(value_, {Element::Rule(rule)});
  }
  return value_;
}

int32_t JsonSchemaCompiler::AnyObject() {
  if (object_ >= 0) return object_;
  object_ = g_.AddRule("object");
  const Element ws = Element::Rule(Whitespace());
  const Sequence pair = {Element::Rule(StringRule()), ws, Element::Byte(':'), ws, Element::Rule(AnyValue()), ws};
  Sequence more = {Element::Byte(','), ws};
  more.insert(more.end(), pair.begin(), pair.end());
  Sequence members = pair;
  members.push_back(g_.Star(more, "members"));
  g_.AddAlternative(object_, {Element::Byte('{'), ws, g_.Optional(members, "members"), Element::Byte('}')});
  return object_;
}

Result<int32_t> JsonSchemaCompiler::AddSchema(const Json& schema) {
  root_ = &schema;
  return Compile(schema, "#", 0);
}

Status JsonSchemaCompiler::CheckKeywords(const Json& schema, const std::string& path) const {
  for (const auto& [key, value] : schema.items()) {
    if (Supported().count(key) == 0 && Annotations().count(key) == 0) {
      return InvalidArgument("unsupported JSON Schema keyword '", key, "' at ", path,
                             " (docs/server.md lists the supported keywords)");
    }
  }
  return Status::Ok();
}

Result<int32_t> JsonSchemaCompiler::Compile(const Json& schema, const std::string& path, int depth) {
  if (depth > kMaxSchemaDepth) return InvalidArgument("the schema nests deeper than ", kMaxSchemaDepth, " at ", path);
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return AnyValue();
    return InvalidArgument("the schema at ", path, " is false: no value matches it");
  }
  if (!schema.is_object()) return InvalidArgument("the schema at ", path, " must be an object or a boolean");
  GLINT_RETURN_IF_ERROR(CheckKeywords(schema, path));
  size_t validators = 0;
  for (const auto& [key, value] : schema.items()) validators += Annotations().count(key) == 0;
  const auto alone = [&](const char* keyword) -> Status {
    if (validators > 1) {
      return InvalidArgument("'", keyword, "' at ", path,
                             " beside other validation keywords is not supported (only annotations may sit beside it)");
    }
    return Status::Ok();
  };
  if (schema.contains("$ref")) {
    GLINT_RETURN_IF_ERROR(alone("$ref"));
    if (!schema["$ref"].is_string()) return InvalidArgument("'$ref' at ", path, " must be a string");
    return CompileRef(schema["$ref"].get<std::string>(), path, depth);
  }
  for (const char* keyword : {"anyOf", "oneOf", "allOf"}) {
    if (!schema.contains(keyword)) continue;
    GLINT_RETURN_IF_ERROR(alone(keyword));
    const Json& list = schema[keyword];
    if (!list.is_array() || list.empty())
      return InvalidArgument("'", keyword, "' at ", path, " must be a non-empty array");
    if (std::string(keyword) == "allOf" && list.size() != 1) {
      return InvalidArgument("'allOf' at ", path, " with more than one schema is not supported");
    }
    if (std::string(keyword) == "oneOf") GLINT_RETURN_IF_ERROR(CheckOneOfDisjoint(list, *root_, path));
    std::vector<Sequence> alternatives;
    for (size_t i = 0; i < list.size(); ++i) {
      GLINT_ASSIGN_OR_RETURN(int32_t rule, Compile(list[i], StrCat(path, "/", keyword, "/", i), depth + 1));
      alternatives.push_back({Element::Rule(rule)});
    }
    return g_.AddRuleWith(keyword, std::move(alternatives));
  }
  if (schema.contains("const")) return Literals(Json::array({schema["const"]}), path);
  if (schema.contains("enum")) return Literals(schema["enum"], path);
  std::vector<std::string> types;
  if (schema.contains("type")) {
    const Json& type = schema["type"];
    if (type.is_string()) {
      types.push_back(type.get<std::string>());
    } else if (type.is_array() && !type.empty()) {
      for (const Json& t : type) {
        if (!t.is_string()) return InvalidArgument("'type' at ", path, " must list type names");
        types.push_back(t.get<std::string>());
      }
    } else {
      return InvalidArgument("'type' at ", path, " must be a type name or a non-empty list of them");
    }
  } else if (schema.contains("properties") || schema.contains("required") || schema.contains("additionalProperties")) {
    types = {"object"};
  } else if (schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems")) {
    types = {"array"};
  } else if (schema.contains("minLength") || schema.contains("maxLength") || schema.contains("pattern") ||
             schema.contains("format")) {
    types = {"string"};
  } else if (schema.contains("minimum") || schema.contains("maximum") || schema.contains("exclusiveMinimum") ||
             schema.contains("exclusiveMaximum")) {
    types = {"number"};
  } else {
    return AnyValue();
  }
  std::vector<Sequence> alternatives;
  for (const std::string& type : types) {
    GLINT_ASSIGN_OR_RETURN(int32_t rule, CompileType(schema, type, path, depth));
    alternatives.push_back({Element::Rule(rule)});
  }
  return g_.AddRuleWith("type", std::move(alternatives));
}

Result<int32_t> JsonSchemaCompiler::CompileRef(const std::string& ref, const std::string& path, int depth) {
  if (ref.empty() || ref[0] != '#') {
    return InvalidArgument("'$ref' '", ref, "' at ", path,
                           " is not supported: only references inside the schema (#...)");
  }
  const auto found = refs_.find(ref);
  if (found != refs_.end()) return found->second;
  const Json* target = nullptr;
  try {
    const Json::json_pointer pointer(ref.substr(1));
    if (root_->contains(pointer)) target = &root_->at(pointer);
  } catch (const std::exception& e) {
    return InvalidArgument("'$ref' '", ref, "' at ", path, " is not a valid JSON pointer: ", e.what());
  }
  if (target == nullptr) return InvalidArgument("'$ref' '", ref, "' at ", path, " points at nothing in the schema");
  const int32_t rule = g_.AddRule("ref " + ref);
  refs_[ref] = rule;  // before the body: a recursive reference finds it
  GLINT_ASSIGN_OR_RETURN(int32_t body, Compile(*target, ref, depth + 1));
  g_.AddAlternative(rule, {Element::Rule(body)});
  return rule;
}

Result<int32_t> JsonSchemaCompiler::Literals(const Json& values, const std::string& path) {
  if (!values.is_array() || values.empty()) return InvalidArgument("'enum' at ", path, " must be a non-empty array");
  std::vector<Sequence> alternatives;
  for (const Json& value : values) alternatives.push_back(Literal(value.dump()));
  return g_.AddRuleWith("enum", std::move(alternatives));
}

Result<int32_t> JsonSchemaCompiler::CompileType(const Json& schema, const std::string& type, const std::string& path,
                                                int depth) {
  if (type == "null") return Keyword("null");
  if (type == "boolean") return g_.AddRuleWith("boolean", {Literal("true"), Literal("false")});
  if (type == "string") return CompileString(schema, path, /*raw=*/false, "");
  if (type == "integer") return CompileNumber(schema, path, true);
  if (type == "number") return CompileNumber(schema, path, false);
  if (type == "object") return CompileObject(schema, path, depth);
  if (type == "array") return CompileArray(schema, path, depth);
  return InvalidArgument("'type' at ", path, " is '", type,
                         "'; expected null, boolean, string, integer, number, object or array");
}

Result<int32_t> JsonSchemaCompiler::CompileObject(const Json& schema, const std::string& path, int depth) {
  const Json empty = Json::object();
  const Json& properties = schema.contains("properties") ? schema["properties"] : empty;
  if (!properties.is_object()) return InvalidArgument("'properties' at ", path, " must be an object");
  std::set<std::string> required;
  if (schema.contains("required")) {
    if (!schema["required"].is_array()) return InvalidArgument("'required' at ", path, " must be an array of names");
    for (const Json& name : schema["required"]) {
      if (!name.is_string()) return InvalidArgument("'required' at ", path, " must be an array of names");
      required.insert(name.get<std::string>());
    }
  }
  // Pairs in the schema's order; required names without a property schema accept any value, after them.
  std::vector<std::pair<std::string, const Json*>> members;
  for (const auto& [key, value] : properties.items()) members.emplace_back(key, &value);
  static const Json any = true;
  for (const std::string& name : required) {
    if (!properties.contains(name)) members.emplace_back(name, &any);
  }
  const Element ws = Element::Rule(Whitespace());
  std::vector<Sequence> pairs;
  for (const auto& [key, member_schema] : members) {
    GLINT_ASSIGN_OR_RETURN(int32_t value, Compile(*member_schema, StrCat(path, "/properties/", key), depth + 1));
    Sequence pair = Literal(Json(key).dump());
    pair.insert(pair.end(), {ws, Element::Byte(':'), ws, Element::Rule(value), ws});
    pairs.push_back(std::move(pair));
  }
  // The tail after the declared properties: additional pairs when allowed.
  Sequence extra_pair;
  bool additional = false;
  if (schema.contains("additionalProperties")) {
    const Json& extra = schema["additionalProperties"];
    if (!(extra.is_boolean() && !extra.get<bool>())) {
      additional = true;
      GLINT_ASSIGN_OR_RETURN(int32_t value, Compile(extra, path + "/additionalProperties", depth + 1));
      extra_pair = {Element::Rule(StringRule()), ws, Element::Byte(':'), ws, Element::Rule(value), ws};
    }
  }
  // Whitespace after each value (inside `pair`), none before ',' or '}': "value ws , ws" and "value ws }" would
  // otherwise both explain a space after a value, and every optional property skipped would add another parse.
  const Sequence comma = {Element::Byte(','), ws};
  // chain[i][c]: the members from i on, c = a comma is needed before the next one.
  const size_t n = pairs.size();
  std::vector<std::array<int32_t, 2>> chain(n + 1);
  for (int c = 0; c < 2; ++c) {
    Sequence tail;
    if (additional) {
      Sequence first = c ? comma : Sequence{};
      first.insert(first.end(), extra_pair.begin(), extra_pair.end());
      Sequence more = comma;
      more.insert(more.end(), extra_pair.begin(), extra_pair.end());
      first.push_back(g_.Star(more, "extra"));
      tail.push_back(g_.Optional(first, "extra"));
    }
    chain[n][c] = g_.AddRuleWith("members", {tail});
  }
  for (size_t i = n; i-- > 0;) {
    const bool is_required = required.count(members[i].first) != 0;
    for (int c = 0; c < 2; ++c) {
      Sequence with = c ? comma : Sequence{};
      with.insert(with.end(), pairs[i].begin(), pairs[i].end());
      with.push_back(Element::Rule(chain[i + 1][1]));
      std::vector<Sequence> alternatives = {std::move(with)};
      if (!is_required) alternatives.push_back({Element::Rule(chain[i + 1][c])});
      chain[i][c] = g_.AddRuleWith("members", std::move(alternatives));
    }
  }
  return g_.AddRuleWith("object", {{Element::Byte('{'), ws, Element::Rule(chain[0][0]), Element::Byte('}')}});
}

Result<int32_t> JsonSchemaCompiler::CompileArray(const Json& schema, const std::string& path, int depth) {
  int32_t item = -1;
  if (schema.contains("items")) {
    GLINT_ASSIGN_OR_RETURN(item, Compile(schema["items"], path + "/items", depth + 1));
  } else {
    item = AnyValue();
  }
  int64_t min = 0, max = -1;
  for (const auto& [name, target] : {std::pair<const char*, int64_t*>{"minItems", &min}, {"maxItems", &max}}) {
    if (!schema.contains(name)) continue;
    const Json& value = schema[name];
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      return InvalidArgument("'", name, "' at ", path, " must be a non-negative integer");
    }
    *target = value.get<int64_t>();
  }
  if (max >= 0 && max < min) return InvalidArgument("'maxItems' at ", path, " is below 'minItems'");
  const Element ws = Element::Rule(Whitespace());
  Sequence body;
  if (max != 0) {
    // Whitespace after each item, none before ',' or ']': one way to place it, so the matcher holds one parse.
    Sequence first = {Element::Rule(item), ws};
    const Sequence more = {Element::Byte(','), ws, Element::Rule(item), ws};
    Result<Element> rest = g_.Repeat(more, std::max<int64_t>(min - 1, 0), max < 0 ? -1 : max - 1, "items");
    if (!rest.ok()) return rest.status().WithContext(path);
    first.push_back(rest.value());
    if (min == 0) {
      body.push_back(g_.Optional(first, "items"));
    } else {
      body = std::move(first);
    }
  }
  Sequence array = {Element::Byte('['), ws};
  array.insert(array.end(), body.begin(), body.end());
  array.push_back(Element::Byte(']'));
  return g_.AddRuleWith("array", {std::move(array)});
}

Result<int32_t> JsonSchemaCompiler::CompileString(const Json& schema, const std::string& path, bool raw,
                                                  std::string_view stop) {
  static const std::map<std::string, std::string> kFormats = {
      {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"},
      {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"date-time",
       R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"uuid", R"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"},
      {"email", R"([A-Za-z0-9._+-]{1,32}@[A-Za-z0-9-]{1,32}(\.[A-Za-z0-9-]{1,16}){1,3})"},
      {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"}};
  const bool has_length = schema.contains("minLength") || schema.contains("maxLength");
  const int given = static_cast<int>(has_length) + schema.contains("pattern") + schema.contains("format");
  if (given > 1) {
    return InvalidArgument("the string at ", path,
                           " combines two of minLength/maxLength, pattern and format; only one kind is supported");
  }
  grammar::RegexOptions options;
  options.json_string = !raw;
  Element content;
  if (schema.contains("pattern") || schema.contains("format")) {
    std::string pattern;
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) return InvalidArgument("'pattern' at ", path, " must be a string");
      pattern = schema["pattern"].get<std::string>();
      options.full_match = false;  // JSON Schema patterns match anywhere unless anchored
    } else {
      const Json& format = schema["format"];
      const auto found = format.is_string() ? kFormats.find(format.get<std::string>()) : kFormats.end();
      if (found == kFormats.end()) {
        return InvalidArgument("'format' ", format.dump(), " at ", path,
                               " is not supported; expected date, time, date-time, uuid, email or ipv4");
      }
      pattern = found->second;
    }
    Result<int32_t> rule = grammar::AddRegex(g_, pattern, options, "pattern");
    if (!rule.ok()) return rule.status().WithContext(StrCat("'pattern' at ", path));
    content = Element::Rule(rule.value());
  } else {
    int64_t min = 0, max = -1;
    for (const auto& [name, target] : {std::pair<const char*, int64_t*>{"minLength", &min}, {"maxLength", &max}}) {
      if (!schema.contains(name)) continue;
      if (!schema[name].is_number_integer() || schema[name].get<int64_t>() < 0) {
        return InvalidArgument("'", name, "' at ", path, " must be a non-negative integer");
      }
      *target = schema[name].get<int64_t>();
    }
    if (max >= 0 && max < min) return InvalidArgument("'maxLength' at ", path, " is below 'minLength'");
    if (raw && !has_length) return g_.AddTextUntil(stop, "raw");
    int32_t character = -1;
    if (raw) {
      character = g_.AddCodePointClass({{'<', '<'}}, true, "raw.char");  // '<' could start the closing tag
    } else {
      if (char_ < 0) char_ = grammar::AddJsonStringCharacter(g_);
      character = char_;
    }
    Result<Element> repeated = g_.Repeat({Element::Rule(character)}, min, max, "chars");
    if (!repeated.ok()) return repeated.status().WithContext(path);
    content = repeated.value();
  }
  if (raw)
    return g_.AddRuleWith("raw", {[&] {
                            Sequence sequence = {content};
                            const Sequence tail = Literal(stop);
                            sequence.insert(sequence.end(), tail.begin(), tail.end());
                            return sequence;
                          }()});
  return g_.AddRuleWith("string", {{Element::Byte('"'), content, Element::Byte('"')}});
}

Result<int32_t> JsonSchemaCompiler::CompileNumber(const Json& schema, const std::string& path, bool integer) {
  struct Bound {
    bool present = false, exclusive = false;
    double value = 0;
  };
  Bound lo, hi;
  for (const auto& [name, bound, exclusive] : {std::tuple<const char*, Bound*, bool>{"minimum", &lo, false},
                                               {"exclusiveMinimum", &lo, true},
                                               {"maximum", &hi, false},
                                               {"exclusiveMaximum", &hi, true}}) {
    if (!schema.contains(name)) continue;
    GLINT_ASSIGN_OR_RETURN(double value, NumberField(schema, name, path));
    const bool tighter = !bound->present || (bound == &lo ? value >= bound->value : value <= bound->value);
    if (tighter) *bound = {true, exclusive, value};
  }
  if (!lo.present && !hi.present) return integer ? IntegerRule() : NumberRule();
  constexpr double kLimit = 1e18;
  if ((lo.present && std::fabs(lo.value) >= kLimit) || (hi.present && std::fabs(hi.value) >= kLimit)) {
    return InvalidArgument("the bounds at ", path, " must be within ±1e18");
  }
  if (integer) {
    int64_t a = -kMaxIntegerPart, b = kMaxIntegerPart;
    if (lo.present) a = static_cast<int64_t>(lo.exclusive ? std::floor(lo.value) + 1 : std::ceil(lo.value));
    if (hi.present) b = static_cast<int64_t>(hi.exclusive ? std::ceil(hi.value) - 1 : std::floor(hi.value));
    if (a > b) return InvalidArgument("the bounds at ", path, " exclude every integer");
    return AddIntegerRange(g_, a, b);
  }
  // Numbers: a digit-level comparison with the bounds' exact decimals (json_schema_number.h).
  std::optional<NumberBound> lower, upper;
  for (const auto& [bound, target] :
       {std::pair<const Bound*, std::optional<NumberBound>*>{&lo, &lower}, {&hi, &upper}}) {
    if (!bound->present) continue;
    GLINT_ASSIGN_OR_RETURN(Decimal value, DecimalOf(bound->value));
    *target = NumberBound{std::move(value), bound->exclusive};
  }
  Result<int32_t> rule = AddBoundedNumber(g_, lower, upper);
  if (!rule.ok()) return rule.status().WithContext(StrCat("'number' at ", path));
  return rule;
}

Result<int32_t> JsonSchemaCompiler::AddSubschema(const Json& schema, const Json& root, const std::string& path) {
  root_ = &root;
  return Compile(schema, path, 0);
}

bool IsStringSchema(const Json& schema) {
  if (!schema.is_object()) return false;
  const auto type = schema.find("type");
  if (type == schema.end()) return false;
  if (type->is_string()) return type->get<std::string>() == "string";
  if (!type->is_array()) return false;
  bool has_string = false;
  for (const Json& t : *type) {
    if (!t.is_string()) return false;
    if (t.get<std::string>() == "string") {
      has_string = true;
    } else if (t.get<std::string>() != "null") {
      return false;
    }
  }
  return has_string;
}

Result<int32_t> JsonSchemaCompiler::AddRawString(const Json& schema, std::string_view terminator, const Json& root) {
  root_ = &root;
  if (schema.is_object() && (schema.contains("enum") || schema.contains("const"))) {
    const Json values = schema.contains("const") ? Json::array({schema["const"]}) : schema["enum"];
    if (!values.is_array() || values.empty()) return InvalidArgument("'enum' must be a non-empty array");
    std::vector<Sequence> alternatives;
    for (const Json& value : values) {
      Sequence text = Literal(value.is_string() ? value.get<std::string>() : value.dump());
      const Sequence tail = Literal(terminator);
      text.insert(text.end(), tail.begin(), tail.end());
      alternatives.push_back(std::move(text));
    }
    return g_.AddRuleWith("raw.enum", std::move(alternatives));
  }
  if (!schema.is_object()) return g_.AddTextUntil(terminator, "raw");
  GLINT_RETURN_IF_ERROR(CheckKeywords(schema, "#"));
  return CompileString(schema, "#", /*raw=*/true, terminator);
}

}  // namespace glint::server
