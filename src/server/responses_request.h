// The OpenAI Responses API's request (POST /v1/responses) → the server's one chat request (openai_request.h), so
// that templates, tool-call parsing, structured output, images, prefix caching and metrics behave as they do for
// chat completions. docs/server.md "Responses API" has the field-by-field table.
//
// How it translates: the body's own fields are checked here (400s name the Responses field: `input[3].call_id`,
// `text.format`, `max_output_tokens`); the conversation (instructions, the stored items of previous_response_id,
// the input items) and the sampling fields are rewritten as a chat-completions body and parsed by
// ParseChatRequest, whose errors are renamed back to the Responses field they came from.
//
// Items → chat messages: a message keeps its role (developer → system); `function_call` and `custom_tool_call`
// items become tool calls of an assistant message (consecutive ones, and the assistant message and reasoning
// before them, make one assistant turn); `function_call_output` / `custom_tool_call_output` become tool messages;
// a `reasoning` item's text (its reasoning_text content, else its summary, else glint's own encrypted_content)
// becomes the reasoning_content of the assistant turn that follows it, which the template keeps or drops as it
// does for chat. Item types glint cannot act on (web_search_call, mcp_call, ...) are skipped and reported.
//
// Custom tools (free-form input, such as Codex's apply_patch) are shown to the model as a function with one string
// parameter, `input`: GLM writes `<tool_call>apply_patch<arg_key>input</arg_key><arg_value>RAW TEXT</arg_value>
// </tool_call>`, and the raw text of that value is the call's `input` (responses_response.h). A grammar the tool
// declares (lark or regex) is shown in the description, not enforced.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/json_body.h"
#include "server/openai_request.h"

namespace glint::server {

// glint's reasoning items carry their own text as encrypted_content (not encrypted: glint has no secret to hide
// it from the client that already saw it), so a client that keeps only encrypted_content (Codex with store:false)
// gets the reasoning back into the prompt. Other servers' encrypted_content is ignored.
inline constexpr std::string_view kEncryptedReasoningPrefix = "glint-reasoning-v1:";

struct ResponsesRequest {
  Json body;         // the request as sent (validated), for the response object's echoed fields
  Json input_items;  // the input as items (a string input is one user message item), for storing
  Json chat_body;    // the translated chat-completions body, without the conversation (added by Translate)
  std::optional<std::string> previous_response_id;
  std::optional<std::string> instructions;
  bool stream = false;
  bool store = true;
  bool include_encrypted_reasoning = false;  // include: ["reasoning.encrypted_content"]
  bool output_logprobs = false;              // include: ["message.output_text.logprobs"] or top_logprobs > 0
  int64_t top_logprobs = 0;
  bool parallel_tool_calls = true;         // false: calls after the first are dropped
  std::optional<int64_t> max_tool_calls;   // calls beyond are dropped
  std::set<std::string> custom_tools;      // names of the tools of type "custom"
  std::vector<size_t> tool_origin;         // [chat tools]: the index in `tools` each came from (errors name it)
  std::vector<std::string> skipped_tools;  // types of the tools glint cannot run (a log line, not a 400)
  std::vector<std::string> skipped_items;  // types of the input items skipped (idem)
};

// Checks the body and translates everything but the conversation. 400 for wrong types and values, for
// `background: true`, `conversation`, `prompt`, and input types glint cannot read (input_file, item_reference...).
ApiOr<ResponsesRequest> ParseResponsesRequest(std::string_view body, const RequestPolicy& policy);

// The chat request: instructions, then `previous_items` (the stored conversation of previous_response_id; null
// when none), then the input. Errors name the Responses fields.
ApiOr<ChatRequest> TranslateResponsesRequest(ResponsesRequest& request, const Json* previous_items,
                                             const RequestPolicy& policy);

}  // namespace glint::server
