// OpenAI request JSON → native structs, with full validation: wrong types and invalid values are 400s naming the
// field (`param`), unknown fields are ignored, null means "not given". Only the server layer touches JSON.
//
// Chat (POST /v1/chat/completions) and completions (POST /v1/completions) share the sampling fields:
// temperature [0, 2], top_p (0, 1], top_k (−1 or 0 = off, else ≥ 1), min_p [0, 1], seed (integer),
// presence_penalty / frequency_penalty [−2, 2], repetition_penalty (0, 2], max_tokens / max_completion_tokens ≥ 1,
// stop (a string or up to 16 non-empty strings), stop_token_ids, ignore_eos, n [1, 16], stream,
// stream_options.include_usage, logit_bias ({"token id": bias in [−100, 100]}). Defaults for temperature/top_p/top_k
// come from the checkpoint's generation_config.json.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/backend.h"
#include "server/json_body.h"
#include "server/structured_output.h"

namespace glint::server {

// What requests may ask for, and the defaults they get.
struct RequestPolicy {
  GenerationSampling default_sampling;  // from generation_config.json
  int64_t max_n = 16;
  int64_t max_stop_strings = 16;
  int64_t max_top_logprobs = 20;
  int64_t max_prompts = 16;  // completions with a list of prompts
  int64_t vocab_size = 0;    // token ids must be below this (prompts, stop_token_ids, detokenize)
  // Caps on every list a request carries (docs/server.md "Limits"). Validation is linear in the body; these keep
  // what a request can make the server build and render (template, prompt) proportionate.
  int64_t max_messages = 4096;
  int64_t max_content_parts = 1024;  // per message
  int64_t max_tools = 512;
  int64_t max_tool_calls = 512;     // per assistant message
  int64_t max_token_ids = 1 << 20;  // per token list: a prompt, detokenize's tokens
  int64_t max_stop_token_ids = 1024;
  int64_t max_stop_bytes = 1024;  // per stop string
  int64_t max_logit_bias = 1024;  // entries of logit_bias
  int64_t max_images = 16;        // image_url parts in one conversation (serve --max-images-per-request)
};

// An image content part as parsed, not yet loaded (server/image_input.h loads, decodes and preprocesses it).
// In the message's flattened content the part becomes kImageMarker, the markers the released GLM-5.3-Flash
// template writes for an image part; BuildChatPrompt keeps them special tokens while client text stays plain.
struct ImagePart {
  std::string url;     // image_url.url: a data: URL, a file:// URL, or http(s):// (refused when loaded)
  std::string param;   // "messages[i].content[j]": errors name it
  size_t message = 0;  // index into ChatRequest::messages
  size_t offset = 0;   // byte offset of its marker in that message's content string
};
inline constexpr std::string_view kImageMarker = "<|begin_of_image|><|image|><|end_of_image|>";

struct SamplingFields {
  GenerationSampling sampling;
  std::optional<int64_t> max_tokens;  // absent: up to the context limit
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // response_format / structured_outputs / guided_* (structured_output.h); empty: unconstrained text.
  std::optional<ConstraintSpec> constraint;
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatRequest {
  std::optional<std::string> model;
  SamplingFields fields;
  bool logprobs = false;
  int64_t top_logprobs = 0;
  // The conversation as the chat template sees it: role, content (a string; consecutive text parts joined with
  // "\n", an image part as kImageMarker with no separator, as the released template concatenates parts; null
  // for an assistant turn with only tool calls), and where given reasoning_content, tool_calls (arguments as
  // objects, parsed from the JSON strings OpenAI sends), tool_call_id, name. "developer" becomes "system".
  Json messages = Json::array();
  Json tools = Json::array();                   // [{"type": "function", "function": {name, description?, parameters?}}]
  ToolChoice tool_choice = ToolChoice::kNone;   // default: auto with tools, none without
  std::string tool_choice_name;                 // kNamed
  std::set<std::string> strict_tools;           // functions declared "strict": true (their calls are constrained)
  std::optional<std::string> reasoning_effort;  // "Low", "High" or "Max" (the request's low / high / max)
  Json chat_template_kwargs = Json::object();
  bool add_generation_prompt = true;
  std::vector<ImagePart> images;  // in conversation order, the order their placeholders take in the prompt
};

struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

struct CompletionRequest {
  std::optional<std::string> model;
  SamplingFields fields;
  std::vector<PromptInput> prompts;  // one or more (a list of prompts gives n choices per prompt)
  std::optional<int64_t> logprobs;   // completions' integer logprobs: the k most likely per token
  bool echo = false;
};

// Field readers the API parsers share (chat, completions, Responses). `param` / `name` is what errors call the field.
std::string TypeName(const Json& value);  // "a string", "an integer", ...
ApiError WrongType(const std::string& param, const char* expected, const Json& value);
// The field's value when present and not null.
const Json* Field(const Json& object, const char* name);
std::optional<ApiError> ReadBool(const Json& object, const char* name, bool& out);
std::optional<ApiError> ReadString(const Json& object, const char* name, std::optional<std::string>& out);
// An integer in [min, max] (a float with an integral value is accepted, as pydantic does in OpenAI-compatible
// servers).
std::optional<ApiError> ToInteger(const Json& value, const std::string& param, int64_t min, int64_t max, int64_t& out);
std::optional<ApiError> ReadInteger(const Json& object, const char* name, int64_t min, int64_t max,
                                    std::optional<int64_t>& out);

// Both parse the JSON body text (malformed JSON, invalid UTF-8 or nesting deeper than 64 → 400).
ApiOr<ChatRequest> ParseChatRequest(std::string_view body, const RequestPolicy& policy);
ApiOr<CompletionRequest> ParseCompletionRequest(std::string_view body, const RequestPolicy& policy);
// The chat request of a parsed body: the one internal request the other APIs (Anthropic's Messages,
// anthropic_request.h; OpenAI's Responses, responses_request.h) translate into, so templates, tools, constraints and
// images behave the same.
ApiOr<ChatRequest> ParseChatRequestJson(const Json& body, const RequestPolicy& policy);

// POST /tokenize: {"prompt": "..."} or {"messages": [...]} (+ add_generation_prompt, tools, chat_template_kwargs,
// reasoning_effort as in chat); add_special_tokens (default true) parses special tokens in a prompt.
struct TokenizeRequest {
  std::optional<std::string> model;
  std::optional<std::string> prompt;
  ChatRequest chat;  // when messages were given
  bool add_special_tokens = true;
  bool return_token_strs = false;
};
ApiOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body, const RequestPolicy& policy);

// POST /detokenize: {"tokens": [ids]}.
struct DetokenizeRequest {
  std::optional<std::string> model;
  std::vector<int32_t> tokens;
};
ApiOr<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body, const RequestPolicy& policy);

}  // namespace glint::server
