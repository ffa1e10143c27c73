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

struct ChatPromptOptions {
  // Client text (message contents, names, tool calls and schemas, template kwargs) is tokenized as plain text:
  // a user's "<|assistant|>" or "</think>" stays text, and only the template's own text yields special tokens.
  // True restores the old behaviour (serve --allow-special-tokens-in-content).
  bool allow_special_tokens_in_content = false;
  // > 0: a rendered prompt that must have at least this many tokens (judged from its bytes, before tokenizing) is
  // a context_length_exceeded 400.
  int64_t max_model_len = 0;
  // The text one image part renders as: the checkpoint's start, placeholder and end tokens (ImageInputOptions::
  // marker_text). Empty: kImageMarker, the released template's spelling.
  std::string_view image_marker;
};

// Template errors (including its raise_exception) are 400s; so is a prompt that encodes to no tokens.
ApiOr<ChatPrompt> BuildChatPrompt(const ChatRequest& request, const ChatTemplate& chat_template,
                                  const Tokenizer& tokenizer, const ChatPromptOptions& options = {});

// How client text is kept plain (exposed for tests): a mark, U+E000 (private use), is put before every
// added-token string in the client's strings (a literal U+E000 is doubled), the template is rendered, and the
// marks are taken out again, remembering where they were; the tokenizer then reads an added token starting at
// a remembered position as text. Marks survive the string operations templates use (concatenation, split,
// strip, `in`, tojson without ensure_ascii).
std::string MarkAddedTokens(std::string_view text, const Tokenizer& tokenizer);
struct UnmarkedText {
  std::string text;
  std::vector<size_t> literal_positions;  // ascending byte offsets into text
};
UnmarkedText RemoveMarks(std::string_view marked);

}  // namespace glint::server
