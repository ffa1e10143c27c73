// Backend outputs → OpenAI response JSON: stream chunks as outputs arrive, and the whole response at the end.
//
// Chat: each choice's text goes through the reasoning parser (reasoning_content vs content) and, when tools are
// in play, the GLM tool-call parser (tool_calls with arguments as a JSON string, streamed incrementally). Stream
// chunks: the first delta of a choice carries role "assistant"; then reasoning_content / content / tool_calls
// deltas (a call's first delta has its id, type and name); then an empty delta with the finish_reason ("stop",
// "length", "tool_calls" when calls were made, "error"). logprobs use OpenAI's {"content": [{token, logprob,
// bytes, top_logprobs}]} shape, per chunk when streaming.
// Completions: text per choice (choice index = prompt index × n + sample), optional echo of the prompt, logprobs
// in the legacy {tokens, token_logprobs, top_logprobs, text_offset} shape.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/backend.h"
#include "server/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace glint::server {

struct ResponseIdentity {
  std::string id;       // chatcmpl-… / cmpl-…
  int64_t created = 0;  // unix seconds
  std::string model;
};

// One API's view of a generation: chat and completions here, Anthropic's Messages in anthropic_response.h, the
// Responses API in responses_response.h. The
// session (generation_session.h) feeds it outputs and writes what it makes; the SSE framing is the formatter's, so
// each API keeps its own event shape.
class ResponseFormatter {
 public:
  virtual ~ResponseFormatter() = default;
  // The /metrics label of the API: "chat", "completions", "messages", ...
  virtual std::string_view api() const = 0;
  // Written once before any output (Anthropic's message_start); `usage` knows the prompt tokens only.
  virtual std::string StreamStart(const Json& /*usage*/) { return ""; }
  // One stream chunk as SSE text: `data: {json}\n\n` unless the API names its events.
  virtual std::string EncodeEvent(const Json& chunk) const;
  // Written after the last output (the usage chunk when asked for, then `data: [DONE]`).
  virtual std::string StreamEnd(const Json& usage, bool include_usage) const;
  // The chunk that reports a failure in the middle of a stream.
  virtual Json StreamError(const ApiError& error) const;
  // Written when a stream has sent nothing for a while (a long prefill); empty: nothing (SSE clients need none).
  virtual std::string KeepAlive() const { return ""; }
  // Records one output of request `tag` (the index of the prompt) and appends the stream chunks it makes.
  virtual void OnOutput(int tag, const GenerationOutput& output, std::vector<Json>& chunks) = 0;
  // The non-streaming response, with `usage`.
  virtual Json FinalResponse(const Json& usage) const = 0;
  // The last stream chunk when stream_options.include_usage: no choices, the usage.
  virtual Json UsageChunk(const Json& usage) const = 0;
  // The finish reason of every choice, "" while unfinished (for logs and metrics).
  virtual std::vector<std::string> FinishReasons() const = 0;
};

// The OpenAI-style finish reason of a sample (stop, tool_calls, length, abort, error; "" while unfinished), which
// /metrics counts for every API. `made_calls`: the sample made tool calls, all of them complete.
std::string FinishName(GenerationFinish finish, bool made_calls);

// One token of a logprobs list in OpenAI's shape: {token, logprob, bytes} (the chat and Responses APIs share it).
Json TokenLogprobJson(const Tokenizer& tokenizer, int32_t token, float logprob);
// An output's tokens as such entries, each with its `top_logprobs` (at most `top_logprobs` alternatives).
Json OutputLogprobsJson(const Tokenizer& tokenizer, const GenerationOutput& output, int64_t top_logprobs);

struct ChatFormatOptions {
  bool logprobs = false;
  int64_t top_logprobs = 0;
};

std::unique_ptr<ResponseFormatter> MakeChatFormatter(ResponseIdentity identity, const ChatPrompt& prompt, int64_t n,
                                                     const ChatFormatOptions& options, const Tokenizer& tokenizer);

struct CompletionFormatOptions {
  std::vector<std::string> echo_texts;  // [prompts]: prepended to each choice's text when echo is on; else empty
  std::optional<int64_t> logprobs;      // the k of completions' logprobs
};

std::unique_ptr<ResponseFormatter> MakeCompletionFormatter(ResponseIdentity identity, int num_prompts, int64_t n,
                                                           const CompletionFormatOptions& options,
                                                           const Tokenizer& tokenizer);

// "call_" + 24 random letters and digits; "chatcmpl-"/"cmpl-" ids use RandomId too.
std::string RandomId(std::string_view prefix, int length = 24);

}  // namespace glint::server
