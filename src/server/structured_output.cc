#include "server/structured_output.h"

#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "base/log.h"
#include "base/timer.h"
#include "grammar/gbnf.h"
#include "grammar/regex.h"
#include "server/openai_request.h"

namespace glint::server {
namespace {

using grammar::CompiledGrammar;
using grammar::Element;
using grammar::Grammar;
using grammar::Sequence;

constexpr size_t kMaxChoices = 1024;

// The process-wide cache of compiled grammars, keyed by the canonical text of what was compiled.
class GrammarCache {
 public:
  GrammarPtr Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = entries_.find(key);
    if (found == entries_.end()) return nullptr;
    ++stats_.hits;
    return found->second;
  }
  void Insert(const std::string& key, GrammarPtr grammar, double compile_seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.misses;
    stats_.compile_seconds += compile_seconds;
    if (!entries_.emplace(key, std::move(grammar)).second) return;
    order_.push_back(key);
    while (order_.size() > kGrammarCacheEntries) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
  }
  GrammarCacheStats Stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    GrammarCacheStats stats = stats_;
    stats.entries = static_cast<int64_t>(entries_.size());
    return stats;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, GrammarPtr> entries_;
  std::deque<std::string> order_;
  GrammarCacheStats stats_;
};

GrammarCache& Cache() {
  static GrammarCache cache;
  return cache;
}

std::string ContextKey(const ConstraintContext& context) {
  return StrCat(context.reasoning_first ? "R" : "-", context.special_tokens_are_text ? "S" : "-", "\x1f");
}

// Compiles `body` (which adds the constrained part and returns its rule) behind the reasoning prefix, with the
// cache in front. Errors are 400s naming `param`.
template <typename Body>
ApiOr<GrammarPtr> CompileCached(const std::string& key, const ConstraintContext& context, const std::string& param,
                                Body&& body) {
  const std::string full_key = ContextKey(context) + key;
  if (GrammarPtr cached = Cache().Find(full_key)) return cached;
  Stopwatch clock;
  Grammar g;
  Result<int32_t> constrained = body(g);
  if (!constrained.ok()) return BadRequest(StrCat("'", param, "': ", constrained.status().message()), param);
  Sequence root;
  if (context.reasoning_first) root.push_back(Element::Rule(g.AddTextUntil("</think>", "reasoning")));
  root.push_back(Element::Rule(constrained.value()));
  g.set_root(g.AddRuleWith("root", {std::move(root)}));
  auto compiled = CompiledGrammar::Compile(g, context.special_tokens_are_text);
  if (!compiled.ok()) return BadRequest(StrCat("'", param, "': ", compiled.status().message()), param);
  GrammarPtr grammar = std::move(compiled).value();
  const double seconds = clock.Seconds();
  LogInfo("structured output: compiled '", param, "' (", g.rules().size(), " rules, ", g.num_elements(),
          " elements) in ", StrCat(1000 * seconds), " ms; cached by its canonical text");
  Cache().Insert(full_key, grammar, seconds);
  return grammar;
}

std::optional<ApiError> ReadResponseFormat(const Json& format, std::optional<ConstraintSpec>& out) {
  if (!format.is_object()) return BadRequest("'response_format' must be an object", "response_format");
  const auto type = format.find("type");
  if (type == format.end() || !type->is_string()) {
    return BadRequest("'response_format.type' must be a string", "response_format");
  }
  const std::string name = type->get<std::string>();
  if (name == "text") return std::nullopt;
  ConstraintSpec spec;
  spec.param = "response_format";
  if (name == "json_object") {
    spec.kind = ConstraintSpec::Kind::kJsonObject;
  } else if (name == "json_schema") {
    const auto wrapper = format.find("json_schema");
    if (wrapper == format.end() || !wrapper->is_object()) {
      return BadRequest("'response_format.json_schema' must be an object with a 'schema'", "response_format");
    }
    const auto schema = wrapper->find("schema");
    if (schema == wrapper->end() || !(schema->is_object() || schema->is_boolean())) {
      return BadRequest("'response_format.json_schema.schema' must be a JSON Schema object", "response_format");
    }
    if (const auto strict = wrapper->find("strict");
        strict != wrapper->end() && !strict->is_boolean() && !strict->is_null()) {
      return BadRequest("'response_format.json_schema.strict' must be a boolean", "response_format");
    }
    spec.kind = ConstraintSpec::Kind::kJsonSchema;
    spec.schema = *schema;
  } else {
    return BadRequest(StrCat("response_format type '", name, "' is unknown; expected text, json_object or json_schema"),
                      "response_format");
  }
  out = std::move(spec);
  return std::nullopt;
}

// One vLLM field (`structured_outputs.X` or `guided_X`) into a spec.
std::optional<ApiError> ReadGuided(const std::string& kind, const Json& value, const std::string& param,
                                   ConstraintSpec& spec) {
  spec.param = param;
  if (kind == "json") {
    spec.kind = ConstraintSpec::Kind::kJsonSchema;
    if (value.is_string()) {  // vLLM accepts the schema as a JSON string too
      spec.schema = Json::parse(value.get<std::string>(), nullptr, false);
      if (spec.schema.is_discarded()) return BadRequest(StrCat("'", param, "' is not valid JSON"), param);
    } else {
      spec.schema = value;
    }
    if (!spec.schema.is_object() && !spec.schema.is_boolean()) {
      return BadRequest(StrCat("'", param, "' must be a JSON Schema object"), param);
    }
  } else if (kind == "regex" || kind == "grammar") {
    if (!value.is_string() || value.get<std::string>().empty()) {
      return BadRequest(StrCat("'", param, "' must be a non-empty string"), param);
    }
    spec.kind = kind == "regex" ? ConstraintSpec::Kind::kRegex : ConstraintSpec::Kind::kGrammar;
    spec.text = value.get<std::string>();
  } else if (kind == "choice") {
    if (!value.is_array() || value.empty() || value.size() > kMaxChoices) {
      return BadRequest(StrCat("'", param, "' must be an array of 1 to ", kMaxChoices, " strings"), param);
    }
    for (const Json& choice : value) {
      if (!choice.is_string()) return BadRequest(StrCat("'", param, "' must be an array of strings"), param);
      spec.choices.push_back(choice.get<std::string>());
    }
    spec.kind = ConstraintSpec::Kind::kChoice;
  } else if (kind == "json_object") {
    if (!value.is_boolean()) return BadRequest(StrCat("'", param, "' must be a boolean"), param);
    spec.kind = ConstraintSpec::Kind::kJsonObject;
  } else {
    return BadRequest(StrCat("'", param, "' is not supported (structural_tag and whitespace_pattern are not); ",
                             "expected json, regex, choice, grammar or json_object"),
                      param);
  }
  return std::nullopt;
}

// After a call's name: its arguments as GLM writes them, `<arg_key>K</arg_key><arg_value>V</arg_value>` per
// property (schema order; required ones present, optional ones may be left out; no others), then
// `</tool_call>`. Optional newlines where the chat template puts them.
Result<int32_t> AddToolBody(Grammar& g, const Json& function, const std::string& path) {
  static const Json kNoParameters = {{"type", "object"}, {"properties", Json::object()}};
  const Json& parameters = function.contains("parameters") ? function["parameters"] : kNoParameters;
  JsonSchemaCompiler compiler(g);
  GLINT_RETURN_IF_ERROR(compiler.CheckKeywords(parameters, path));
  if (parameters.contains("type") && parameters["type"] != "object") {
    return InvalidArgument(path, " must be an object schema (type \"object\")");
  }
  if (parameters.contains("additionalProperties") && parameters["additionalProperties"] != false) {
    return InvalidArgument(path,
                           ".additionalProperties: extra arguments cannot be constrained; only false is "
                           "supported for tool parameters");
  }
  for (const char* keyword : {"anyOf", "oneOf", "allOf", "$ref", "enum", "const"}) {
    if (parameters.contains(keyword))
      return InvalidArgument(path, ".", keyword, " is not supported for tool parameters");
  }
  const Json empty = Json::object();
  const Json& properties = parameters.contains("properties") ? parameters["properties"] : empty;
  if (!properties.is_object()) return InvalidArgument(path, ".properties must be an object");
  std::set<std::string> required;
  if (parameters.contains("required") && parameters["required"].is_array()) {
    for (const Json& name : parameters["required"]) {
      if (name.is_string()) required.insert(name.get<std::string>());
    }
  }
  for (const std::string& name : required) {
    if (!properties.contains(name)) return InvalidArgument(path, ".required names '", name, "', not a property");
  }
  const Element newline = g.Optional(Grammar::Literal("\n"), "nl");
  std::vector<Sequence> arguments;
  std::vector<bool> is_required;
  for (const auto& [key, schema] : properties.items()) {
    const std::string where = path + ".properties." + key;
    int32_t value = -1;
    if (IsStringSchema(schema)) {
      GLINT_ASSIGN_OR_RETURN(value, compiler.AddRawString(schema, "</arg_value>", parameters));
    } else {
      GLINT_ASSIGN_OR_RETURN(int32_t json, compiler.AddSubschema(schema, parameters, where));
      Sequence closed = {Element::Rule(json)};
      const Sequence tag = Grammar::Literal("</arg_value>");
      closed.insert(closed.end(), tag.begin(), tag.end());
      value = g.AddRuleWith("value", {std::move(closed)});
    }
    Sequence argument = Grammar::Literal("<arg_key>" + key + "</arg_key>");
    argument.push_back(newline);
    const Sequence open = Grammar::Literal("<arg_value>");
    argument.insert(argument.end(), open.begin(), open.end());
    argument.insert(argument.end(), {Element::Rule(value), newline});
    arguments.push_back(std::move(argument));
    is_required.push_back(required.count(key) != 0);
  }
  int32_t rest = g.AddRuleWith("arguments", {{}});
  for (size_t i = arguments.size(); i-- > 0;) {
    Sequence with = arguments[i];
    with.push_back(Element::Rule(rest));
    std::vector<Sequence> alternatives = {std::move(with)};
    if (!is_required[i]) alternatives.push_back({Element::Rule(rest)});
    rest = g.AddRuleWith("arguments", std::move(alternatives));
  }
  Sequence body = {newline, Element::Rule(rest)};
  const Sequence close = Grammar::Literal("</tool_call>");
  body.insert(body.end(), close.begin(), close.end());
  return g.AddRuleWith("call_body", {std::move(body)});
}

// NAME then its body, for each of `tools` (a body is constrained when `constrain(function)`, free otherwise).
template <typename Constrain>
Result<int32_t> AddNamedCalls(Grammar& g, const Json& tools, Constrain&& constrain) {
  std::vector<Sequence> alternatives;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& function = tools[i]["function"];
    int32_t body = -1;
    if (constrain(function)) {
      GLINT_ASSIGN_OR_RETURN(body, AddToolBody(g, function, StrCat("tools[", i, "].function.parameters")));
    } else {
      body = g.AddTextUntil("</tool_call>", "free_call");
    }
    Sequence call = Grammar::Literal(function["name"].get<std::string>());
    call.push_back(Element::Rule(body));
    alternatives.push_back(std::move(call));
  }
  return g.AddRuleWith("call", std::move(alternatives));
}

const Json* FindTool(const Json& tools, const std::string& name) {
  for (const Json& tool : tools) {
    if (tool["function"]["name"] == name) return &tool["function"];
  }
  return nullptr;
}

}  // namespace

std::optional<ApiError> ReadConstraint(const Json& body, std::optional<ConstraintSpec>& out) {
  std::vector<ConstraintSpec> found;
  if (const auto format = body.find("response_format"); format != body.end() && !format->is_null()) {
    std::optional<ConstraintSpec> spec;
    if (auto error = ReadResponseFormat(*format, spec)) return error;
    if (spec) found.push_back(std::move(*spec));
  }
  if (const auto outputs = body.find("structured_outputs"); outputs != body.end() && !outputs->is_null()) {
    if (!outputs->is_object()) return BadRequest("'structured_outputs' must be an object", "structured_outputs");
    for (const auto& [key, value] : outputs->items()) {
      if (value.is_null() || key == "disable_any_whitespace" || key == "disable_fallback" ||
          key == "disable_additional_properties") {
        continue;  // vLLM's tuning switches: glint's behaviour is fixed (docs/server.md)
      }
      ConstraintSpec spec;
      if (auto error = ReadGuided(key, value, "structured_outputs." + key, spec)) return error;
      found.push_back(std::move(spec));
    }
  }
  for (const char* kind : {"json", "regex", "choice", "grammar"}) {
    const std::string param = std::string("guided_") + kind;
    if (const auto value = body.find(param); value != body.end() && !value->is_null()) {
      ConstraintSpec spec;
      if (auto error = ReadGuided(kind, *value, param, spec)) return error;
      found.push_back(std::move(spec));
    }
  }
  if (found.size() > 1) {
    return BadRequest(
        StrCat("'", found[0].param, "' and '", found[1].param, "' both constrain the output; give at most one"),
        found[1].param);
  }
  if (!found.empty()) out = std::move(found[0]);
  return std::nullopt;
}

ApiOr<GrammarPtr> CompileConstraint(const ConstraintSpec& spec, const ConstraintContext& context) {
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonObject:
      return CompileCached("object", context, spec.param,
                           [](Grammar& g) -> Result<int32_t> { return JsonSchemaCompiler(g).AnyObject(); });
    case ConstraintSpec::Kind::kJsonSchema:
      return CompileCached("schema\x1f" + spec.schema.dump(), context, spec.param,
                           [&](Grammar& g) { return JsonSchemaCompiler(g).AddSchema(spec.schema); });
    case ConstraintSpec::Kind::kRegex:
      return CompileCached("regex\x1f" + spec.text, context, spec.param,
                           [&](Grammar& g) { return grammar::AddRegex(g, spec.text, {}); });
    case ConstraintSpec::Kind::kChoice: {
      std::string key = "choice";
      for (const std::string& choice : spec.choices) key += "\x1f" + choice;
      return CompileCached(key, context, spec.param, [&](Grammar& g) -> Result<int32_t> {
        std::vector<Sequence> alternatives;
        for (const std::string& choice : spec.choices) alternatives.push_back(Grammar::Literal(choice));
        return g.AddRuleWith("choice", std::move(alternatives));
      });
    }
    case ConstraintSpec::Kind::kGrammar:
      return CompileCached("gbnf\x1f" + spec.text, context, spec.param, [&](Grammar& g) -> Result<int32_t> {
        // Parsed on its own, then appended to `g` with its rule ids shifted.
        GLINT_ASSIGN_OR_RETURN(Grammar parsed, grammar::ParseGbnf(spec.text));
        const int32_t offset = static_cast<int32_t>(g.rules().size());
        for (const grammar::Rule& rule : parsed.rules()) g.AddRule(rule.name);
        for (size_t r = 0; r < parsed.rules().size(); ++r) {
          for (Sequence sequence : parsed.rules()[r].alternatives) {
            for (Element& e : sequence) {
              if (e.kind == Element::Kind::kRule) e.rule += offset;
            }
            g.AddAlternative(offset + static_cast<int32_t>(r), std::move(sequence));
          }
        }
        return offset + parsed.root();
      });
  }
  return BadRequest("unknown structured output kind", spec.param);
}

ApiOr<GrammarPtr> CompileToolConstraint(const Json& tools, ToolChoice choice, const std::string& forced_name,
                                        const std::set<std::string>& strict_tools, const ConstraintContext& context) {
  if (choice == ToolChoice::kNone || tools.empty()) return GrammarPtr(nullptr);
  if (choice == ToolChoice::kAuto && strict_tools.empty()) return GrammarPtr(nullptr);
  std::string key = StrCat("tools\x1f", static_cast<int>(choice), "\x1f", forced_name, "\x1f", tools.dump());
  for (const std::string& name : strict_tools) key += "\x1f" + name;
  const auto all = [](const Json&) { return true; };
  return CompileCached(key, context, "tools", [&](Grammar& g) -> Result<int32_t> {
    const Element space = g.Optional(Grammar::Literal("\n"), "nl");
    if (choice == ToolChoice::kNamed) {  // the prompt ends with `<tool_call>NAME`: one call's body
      const Json* function = FindTool(tools, forced_name);
      if (function == nullptr) return InvalidArgument("tool_choice names an unknown tool '", forced_name, "'");
      return AddToolBody(g, *function, "the named tool's parameters");
    }
    if (choice == ToolChoice::kRequired) {  // the prompt ends with `<tool_call>`: calls of the request's tools
      GLINT_ASSIGN_OR_RETURN(int32_t call, AddNamedCalls(g, tools, all));
      Sequence more = {space};
      const Sequence open = Grammar::Literal("<tool_call>");
      more.insert(more.end(), open.begin(), open.end());
      more.push_back(Element::Rule(call));
      return g.AddRuleWith("calls", {{Element::Rule(call), g.Star(more, "calls"), space}});
    }
    // auto: free text; each `<tool_call>` opens a call of a known tool, constrained when the tool is strict.
    GLINT_ASSIGN_OR_RETURN(int32_t call, AddNamedCalls(g, tools, [&](const Json& function) {
                             return strict_tools.count(function["name"].get<std::string>()) != 0;
                           }));
    const int32_t text = g.AddRule("text");
    g.AddAlternative(
        text, {Element::Rule(g.AddTextUntil("<tool_call>", "content")), Element::Rule(call), Element::Rule(text)});
    g.AddAlternative(text, {Element::Rule(g.AddTextUntil("<tool_call>", "content", /*open_ended=*/true))});
    return text;
  });
}

GrammarCacheStats GrammarCacheSnapshot() { return Cache().Stats(); }

}  // namespace glint::server
