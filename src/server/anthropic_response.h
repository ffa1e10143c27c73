// Backend outputs → Anthropic Messages API responses (POST /v1/messages): the whole message, or its event stream.
//
// The model's output goes through the same parsers as the chat API (reasoning, then GLM tool calls: their
// ToolCallDelta stream), and becomes content blocks in the order generated: `thinking` (with a `signature`),
// `text`, `tool_use` (`toolu_…` ids, the arguments parsed as `input`). Blank text between blocks opens no block.
//
// Stream (`event:` equal to the data's `type`):
//   message_start (usage.input_tokens = the prompt's tokens) → ping while nothing else is written (a long prefill)
//   → per block: content_block_start → text_delta / thinking_delta (then a signature_delta before the thinking
//     block stops) / input_json_delta (the arguments as the model writes them) → content_block_stop, indices 0, 1, …
//   → message_delta (stop_reason, stop_sequence, usage: input, output, cache read / creation tokens) → message_stop;
//   or an `error` event ({"type": "error", "error": {type, message}}) when generation fails mid-stream, and nothing
//   after it.
// stop_reason: end_turn; tool_use (complete calls); stop_sequence (+ which); max_tokens; model_context_window_exceeded
// when the output stopped because the context was full before max_tokens.
// usage: input_tokens = prompt tokens not restored from the prefix cache, cache_read_input_tokens = restored ones,
// cache_creation_input_tokens = 0 (glint caches every prompt without being asked), output_tokens.
#pragma once

#include <memory>

#include "server/response_format.h"

namespace glint::server {

struct MessagesFormatOptions {
  int64_t max_tokens = 0;  // as the client asked
  bool thinking = false;   // thinking blocks may come (the prompt ends inside <think>)
  std::string api = "messages";
};

std::unique_ptr<ResponseFormatter> MakeMessagesFormatter(ResponseIdentity identity, const ChatPrompt& prompt,
                                                         const MessagesFormatOptions& options);

// {"type": "error", "error": {"type", "message"}} with Anthropic's error type for the status (400
// invalid_request_error, 401 authentication_error, 403 permission_error, 404 not_found_error, 413
// request_too_large, 429 rate_limit_error, 503 overloaded_error, other 5xx api_error).
Json AnthropicErrorJson(const ApiError& error);
std::string AnthropicErrorBody(const ApiError& error);

// The Messages usage object from the session's (OpenAI-shaped) usage.
Json AnthropicUsage(const Json& usage);

}  // namespace glint::server
