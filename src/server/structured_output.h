// Structured output requests → compiled grammars for the engine's matcher (docs/server.md "Structured output").
//
// Fields read (at most one of them per request): `response_format` ({"type": "text" | "json_object" |
// "json_schema", "json_schema": {"name", "schema", "strict"}}), vLLM's `structured_outputs` ({"json" | "regex" |
// "choice" | "grammar"}) and its older `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`.
// Tool calls: tool_choice "required" or a named function constrains the GLM call text to the request's tools and
// their `parameters`; with "auto", functions declared `strict: true` have their calls constrained once the model
// writes `<tool_call>` (the names of the other tools are constrained too, their arguments are not).
//
// A chat whose prompt ends inside <think> leaves the reasoning free: the constraint starts after </think>.
// Compiled grammars are cached by their canonical text (schema JSON, pattern, grammar, tools and options), so
// repeated requests share the compilation and the per-state mask cache.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "server/api_error.h"
#include "server/json_schema_grammar.h"

namespace glint::server {

struct ConstraintSpec {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kJsonObject;
  Json schema;                       // kJsonSchema
  std::string text;                  // kRegex (the pattern), kGrammar (GBNF)
  std::vector<std::string> choices;  // kChoice
  std::string param;                 // the request field it came from, for errors
};

// Reads the structured-output fields of a request body; `out` stays empty when there are none (or "text").
std::optional<ApiError> ReadConstraint(const Json& body, std::optional<ConstraintSpec>& out);

struct ConstraintContext {
  bool reasoning_first = false;          // the output starts inside <think>: free text up to </think> comes first
  bool special_tokens_are_text = false;  // chat: tags such as <tool_call> may be generated as special tokens
};

using GrammarPtr = std::shared_ptr<const grammar::CompiledGrammar>;

ApiOr<GrammarPtr> CompileConstraint(const ConstraintSpec& spec, const ConstraintContext& context);

enum class ToolChoice;
// The constraint of tool calls, or null when there is none (none, or auto without strict functions).
// `forced_name`: the named function (its name is already in the prompt); empty for "required".
// `strict_tools`: the functions declared `strict: true`.
ApiOr<GrammarPtr> CompileToolConstraint(const Json& tools, ToolChoice choice, const std::string& forced_name,
                                        const std::set<std::string>& strict_tools, const ConstraintContext& context);

// The cache of compiled grammars (bounded; oldest out first).
struct GrammarCacheStats {
  int64_t hits = 0, misses = 0, entries = 0;  // misses = grammars compiled
  double compile_seconds = 0;                 // summed over the compilations
};
GrammarCacheStats GrammarCacheSnapshot();
inline constexpr size_t kGrammarCacheEntries = 64;

}  // namespace glint::server
