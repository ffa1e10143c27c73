// Anthropic Messages API requests (POST /v1/messages, /v1/messages/count_tokens) → the internal chat request.
//
// The Messages body is checked in Anthropic's terms (errors name its fields: `messages[2].content[0].type`), then
// translated into an OpenAI chat body and parsed by ParseChatRequestJson, so that the template, tool calls,
// structured output, images, prefix caching and metrics are the chat API's, whichever API a client speaks:
//   system (a string or text blocks) + `role: "system"` messages → one leading system message (Claude Code's
//     per-request `x-anthropic-billing-header:` line dropped: kBillingHeaderPrefix);
//   user text / image blocks → content parts (image base64 → a data: URL, url → the URL, with the image rules);
//   tool_result blocks → `tool` messages in place (is_error → the text prefixed "Error: ");
//   assistant text → content, thinking → reasoning_content, redacted_thinking → dropped (opaque),
//     tool_use → tool_calls (its `input` as the arguments);
//   tools (`input_schema`) → functions; server tools (a `type` other than "custom") skipped and listed;
//   tool_choice auto / any / tool / none → auto / required / named / none;
//   thinking enabled / adaptive → the template's enable_thinking true, disabled or absent → false;
//   output_config.effort low → Low, medium / high → High, max → Max (GLM's reasoning_effort levels);
//   output_config.format json_schema → response_format json_schema;
//   stop_sequences → stop; max_tokens, temperature, top_p, top_k as themselves; metadata and the fields
//     Claude Code sends that glint does not use (docs/server.md lists them) are accepted and ignored.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"

namespace glint::server {

// Claude Code starts its system prompt with a line that changes on every request; left in, it would end every
// prefix-cache match at the prompt's first tokens. It is billing metadata for Anthropic's servers, not an
// instruction, so it is dropped from the prompt (docs/agents.md "Prefix caching").
inline constexpr std::string_view kBillingHeaderPrefix = "x-anthropic-billing-header:";

struct MessagesRequest {
  ChatRequest chat;                  // the internal request (max_tokens in chat.fields)
  int64_t max_tokens = 0;            // as asked (the server may lower chat.fields.max_tokens to the context room)
  bool thinking = false;             // the template's thinking switch is on: thinking blocks may come
  std::vector<std::string> skipped;  // server tools (web_search, ...) glint cannot run: left out, logged
};

// `count_tokens`: the body of /v1/messages/count_tokens (no max_tokens, no stream).
ApiOr<MessagesRequest> ParseMessagesRequest(std::string_view body, const RequestPolicy& policy, bool count_tokens);

// The translation alone (exposed for tests): the Messages body → the OpenAI chat body it stands for.
ApiOr<Json> MessagesToChatBody(const Json& body, const RequestPolicy& policy, bool count_tokens,
                               std::vector<std::string>* skipped_tools = nullptr);

// `text` without its lines that start with kBillingHeaderPrefix.
std::string DropBillingHeader(std::string_view text);

}  // namespace glint::server
