// Backend outputs → the OpenAI Responses API: the response object (POST /v1/responses without stream, GET
// /v1/responses/{id}) and its stream of named events. docs/server.md "Responses API" lists the sequence.
//
// The output is split as for chat (reasoning parser, then the GLM tool-call parser) into output items, in the
// order the model writes them: a `reasoning` item (its text as one reasoning_text content part), a `message`
// item (one output_text part; text that is only whitespace opens no item), then one `function_call` or
// `custom_tool_call` item per call. A custom tool's `input` is the raw text of the call's `input` argument (the
// tool is shown to the model as a function with that one string argument, responses_request.h); when the model
// used another argument name, the only string argument, else the arguments' JSON text.
//
// Stream: response.created, response.in_progress, then per item output_item.added → its deltas
// (content_part.added + output_text.delta ... for a message, content_part.added + reasoning_text.delta for
// reasoning, function_call_arguments.delta or custom_tool_call_input.delta for calls) → their .done events →
// output_item.done; last response.completed, response.incomplete (incomplete_details.reason max_output_tokens) or
// response.failed. Every event carries `sequence_number`, strictly increasing from 0. There is no `[DONE]`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "server/chat_prompt.h"
#include "server/response_format.h"
#include "server/responses_request.h"
#include "tokenizer/tokenizer.h"

namespace glint::server {

struct ResponsesOutputOptions {
  std::set<std::string> custom_tools;
  bool parallel_tool_calls = true;        // false: calls after the first are dropped (and not streamed)
  std::optional<int64_t> max_tool_calls;  // calls beyond are dropped
  bool logprobs = false;                  // output_text parts carry logprobs
  int64_t top_logprobs = 0;
  bool include_encrypted_reasoning = false;  // reasoning items carry encrypted_content (kEncryptedReasoningPrefix)
};

// The response object before any output: id, created_at, model, status "in_progress", and the request's fields
// as a response repeats them (instructions, tools, tool_choice, text, reasoning, sampling, store, ...).
Json ResponseSkeleton(const ResponsesRequest& request, const ChatRequest& chat, const std::string& id,
                      int64_t created_at, const std::string& model);

// Called once with the finished response object (completed, incomplete or failed), to store it.
using ResponseFinished = std::function<void(const Json& response)>;

std::unique_ptr<ResponseFormatter> MakeResponsesFormatter(Json skeleton, const ChatPrompt& prompt,
                                                          ResponsesOutputOptions options, const Tokenizer& tokenizer,
                                                          ResponseFinished on_finished);

// The Responses API's usage from the session's chat usage: input/output tokens, cached input tokens (prefix-cache
// hits) and reasoning tokens.
Json ResponsesUsage(const Json& chat_usage, int64_t reasoning_tokens);

}  // namespace glint::server
