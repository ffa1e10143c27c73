// A chat request → the prompt the model sees: the checkpoint's chat template rendered with the messages, tools
// and template options, tokenized; plus how to read the output (does it start inside <think>? which calls are
// forced?). Runs on the HTTP thread.
//
// tool_choice: "none" renders the tools (so past calls make sense) but does not parse calls; "auto" parses them;
// "required" and a named function end the prompt with `</think><tool_call>` (and the name): the assistant turn
// skips reasoning and starts inside a call. Arguments are not constrained to the schema (no grammar-constrained
// decoding yet).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/reasoning_parser.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tool_call_parser.h"

namespace glint::server {

struct ChatPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  ReasoningParser::Start reasoning_start = ReasoningParser::Start::kContent;
  bool parse_tool_calls = false;
  std::optional<std::string> forced_call;  // "" (required) or the function name (named)
  ToolParameterTypes tool_types;           // which arguments are strings, from the tools' schemas
};

// The template's variables for a request: chat_template_kwargs, then messages, tools (when given),
// add_generation_prompt and reasoning_effort (the request's fields win over the same names in the kwargs).
jinja::Object ChatTemplateVariables(const ChatRequest& request);

// Template errors (including its raise_exception) are 400s; so is a prompt that encodes to no tokens.
ApiOr<ChatPrompt> BuildChatPrompt(const ChatRequest& request, const ChatTemplate& chat_template,
                                  const Tokenizer& tokenizer);

}  // namespace glint::server
