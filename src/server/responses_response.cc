#include "server/responses_response.h"

#include <limits>

#include "base/status.h"

namespace glint::server {
namespace {

bool IsBlank(std::string_view text) { return text.find_first_not_of(" \t\r\n") == std::string_view::npos; }

// The end of the complete part of an escaped JSON string's text (no opening quote): before an escape cut by the
// end of `escaped`, before a \u high surrogate whose low half has not come, or at an unescaped quote (the end of
// the string: `closed`).
size_t CompleteEscapedPrefix(std::string_view escaped, bool& closed) {
  closed = false;
  size_t at = 0;
  while (at < escaped.size()) {
    const char c = escaped[at];
    if (c == '"') {
      closed = true;
      return at;
    }
    if (c != '\\') {
      ++at;
      continue;
    }
    if (at + 1 >= escaped.size()) return at;
    if (escaped[at + 1] != 'u') {
      at += 2;
      continue;
    }
    if (at + 6 > escaped.size()) return at;
    const std::string_view hex = escaped.substr(at + 2, 4);
    const bool high_surrogate =
        (hex[0] == 'd' || hex[0] == 'D') && std::string_view("89abAB").find(hex[1]) != std::string_view::npos;
    if (high_surrogate && at + 12 > escaped.size()) return at;
    at += high_surrogate ? 12 : 6;
  }
  return at;
}

// Where the value of the arguments' `input` member starts (just after its opening quote), when the arguments
// text begins `{"input": "` (whitespace allowed); npos when it does not or cannot be told yet.
size_t CustomInputStart(std::string_view arguments) {
  size_t at = 0;
  auto skip_blank = [&] {
    while (at < arguments.size() && std::string_view(" \t\r\n").find(arguments[at]) != std::string_view::npos) ++at;
  };
  auto expect = [&](std::string_view token) {
    skip_blank();
    if (arguments.substr(at, token.size()) != token) return false;
    at += token.size();
    return true;
  };
  if (!expect("{") || !expect("\"input\"") || !expect(":") || !expect("\"")) return std::string_view::npos;
  return at;
}

// A custom tool call's input from its JSON arguments: the `input` string, else the only string argument, else
// the arguments text itself (the model did not follow the one-argument form).
std::string CustomInputOf(const std::string& arguments) {
  const Json parsed = Json::parse(arguments, nullptr, false);
  if (!parsed.is_object()) return arguments;
  if (const auto it = parsed.find("input"); it != parsed.end() && it->is_string()) return it->get<std::string>();
  if (parsed.size() == 1 && parsed.begin()->is_string()) return parsed.begin()->get<std::string>();
  return arguments;
}

class ResponsesFormatter final : public ResponseFormatter {
 public:
  ResponsesFormatter(Json skeleton, const ChatPrompt& prompt, ResponsesOutputOptions options,
                     const Tokenizer& tokenizer, ResponseFinished on_finished)
      : skeleton_(std::move(skeleton)),
        options_(std::move(options)),
        tokenizer_(tokenizer),
        on_finished_(std::move(on_finished)),
        tool_types_(prompt.tool_types),
        reasoning_(prompt.reasoning_start),
        tools_(&tool_types_),
        parse_tools_(prompt.parse_tool_calls) {
    if (prompt.forced_call) tools_.StartInsideCall(*prompt.forced_call);
    const int64_t most = options_.max_tool_calls.value_or(std::numeric_limits<int64_t>::max());
    call_limit_ = options_.parallel_tool_calls ? most : std::min<int64_t>(most, 1);
  }

  std::string_view api() const override { return "responses"; }

  std::string StreamStart(const Json& /*usage*/) override {
    // Two statements: the events are numbered as they are encoded, and the operands of + have no order.
    std::string events = EncodeEvent({{"type", "response.created"}, {"response", skeleton_}});
    events += EncodeEvent({{"type", "response.in_progress"}, {"response", skeleton_}});
    return events;
  }

  void OnOutput(int /*tag*/, const GenerationOutput& output, std::vector<Json>& chunks) override {
    if (output.index != 0) return;  // the Responses API has one sample
    const bool finished = output.finish != GenerationFinish::kNone;
    if (reasoning_.in_reasoning()) reasoning_tokens_ += static_cast<int64_t>(output.tokens.size());
    std::string reasoning;
    std::string text;
    reasoning_.Push(output.text, reasoning, text);
    if (finished) reasoning_.Finish(reasoning, text);
    std::string content;
    std::vector<ToolCallDelta> calls;
    if (parse_tools_) {
      // parallel_tool_calls: false ends generation at the first call's closing tag, a stop string and so not in the
      // text: the parser gets it back, or the call would end as cut short.
      if (finished && output.finish == GenerationFinish::kStop && output.stop_string == "</tool_call>") {
        text += output.stop_string;
      }
      tools_.Push(text, content, calls);
      if (finished) tools_.Finish(content, calls);
    } else {
      content = std::move(text);
    }
    if (!reasoning.empty()) AppendReasoning(reasoning, chunks);
    if (!content.empty()) AppendText(content, LogprobEntries(output), chunks);
    for (const ToolCallDelta& delta : calls) AppendCallDelta(delta, chunks);
    if (finished) {
      finish_ = output.finish;
      if (finish_ == GenerationFinish::kError) error_ = output.error;
      CloseOpenItem(chunks);
    }
  }

  // No event of its own: response.failed, in the stream's end, carries the message (a null chunk encodes to nothing).
  Json StreamError(const ApiError& error) const override {
    error_ = error.message;
    return nullptr;
  }

  // Named events, numbered in write order (the session encodes each event once, when it writes it).
  std::string EncodeEvent(const Json& chunk) const override {
    if (chunk.is_null()) return "";
    Json numbered = chunk;
    numbered["sequence_number"] = next_sequence_number_++;
    return StrCat("event: ", numbered["type"].get<std::string>(),
                  "\ndata: ", numbered.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n");
  }

  std::string StreamEnd(const Json& usage, bool /*include_usage*/) const override {
    Json response = Finished(usage);
    const std::string status = response["status"].get<std::string>();
    const std::string type = status == "completed"    ? "response.completed"
                             : status == "incomplete" ? "response.incomplete"
                                                      : "response.failed";
    return EncodeEvent({{"type", type}, {"response", std::move(response)}});
  }

  Json FinalResponse(const Json& usage) const override { return Finished(usage); }
  Json UsageChunk(const Json& usage) const override { return ResponsesUsage(usage, reasoning_tokens_); }

  std::vector<std::string> FinishReasons() const override { return {FinishName(finish_, kept_calls_ > 0)}; }

 private:
  enum class Open { kNone, kReasoning, kMessage, kFunctionCall, kCustomCall };

  static Json Event(const char* type, const Json& fields) {
    Json event = {{"type", type}};
    event.update(fields);
    return event;
  }

  Json& open_item() { return output_.back(); }
  int64_t open_index() const { return static_cast<int64_t>(output_.size()) - 1; }
  Json ItemFields() { return {{"item_id", open_item()["id"]}, {"output_index", open_index()}}; }
  Json PartFields() {
    Json fields = ItemFields();
    fields["content_index"] = 0;
    return fields;
  }

  void OpenItem(Open kind, Json item, std::vector<Json>& chunks) {
    CloseOpenItem(chunks);
    open_ = kind;
    open_text_.clear();
    open_logprobs_ = Json::array();
    custom_streamed_.clear();
    custom_value_start_ = std::string::npos;
    output_.push_back(std::move(item));
    chunks.push_back(Event("response.output_item.added", {{"output_index", open_index()}, {"item", open_item()}}));
    if (kind == Open::kMessage) {
      Json fields = PartFields();
      fields["part"] = {
          {"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
      chunks.push_back(Event("response.content_part.added", fields));
    } else if (kind == Open::kReasoning) {
      Json fields = PartFields();
      fields["part"] = {{"type", "reasoning_text"}, {"text", ""}};
      chunks.push_back(Event("response.content_part.added", fields));
    }
  }

  void AppendReasoning(const std::string& reasoning, std::vector<Json>& chunks) {
    if (open_ != Open::kReasoning) {
      OpenItem(Open::kReasoning,
               {{"id", RandomId("rs_")}, {"type", "reasoning"}, {"summary", Json::array()}, {"content", Json::array()}},
               chunks);
    }
    open_text_ += reasoning;
    Json fields = PartFields();
    fields["delta"] = reasoning;
    chunks.push_back(Event("response.reasoning_text.delta", fields));
  }

  // Whitespace alone opens no message (GLM often writes a newline between its reasoning and a call).
  void AppendText(const std::string& content, Json logprobs, std::vector<Json>& chunks) {
    if (open_ != Open::kMessage) {
      if (IsBlank(content)) {
        pending_blank_ += content;
        return;
      }
      OpenItem(Open::kMessage,
               {{"id", RandomId("msg_")},
                {"type", "message"},
                {"status", "in_progress"},
                {"role", "assistant"},
                {"content", Json::array()}},
               chunks);
    }
    const std::string delta = std::exchange(pending_blank_, "") + content;
    open_text_ += delta;
    for (const Json& entry : logprobs) open_logprobs_.push_back(entry);
    Json fields = PartFields();
    fields["delta"] = delta;
    fields["logprobs"] = std::move(logprobs);
    chunks.push_back(Event("response.output_text.delta", fields));
  }

  void AppendCallDelta(const ToolCallDelta& delta, std::vector<Json>& chunks) {
    if (!delta.name.empty()) {
      const bool keep = kept_calls_ < call_limit_;
      call_kept_.resize(static_cast<size_t>(delta.index) + 1, false);
      call_kept_[static_cast<size_t>(delta.index)] = keep;
      if (!keep) return;
      ++kept_calls_;
      pending_blank_.clear();
      const bool custom = options_.custom_tools.count(delta.name) != 0;
      Json item = {{"id", RandomId(custom ? "ctc_" : "fc_")},
                   {"type", custom ? "custom_tool_call" : "function_call"},
                   {"status", "in_progress"},
                   {"call_id", RandomId("call_")},
                   {"name", delta.name}};
      item[custom ? "input" : "arguments"] = "";
      OpenItem(custom ? Open::kCustomCall : Open::kFunctionCall, std::move(item), chunks);
    }
    const size_t index = static_cast<size_t>(delta.index);
    if (index >= call_kept_.size() || !call_kept_[index] || delta.arguments.empty()) return;
    if (open_ != Open::kFunctionCall && open_ != Open::kCustomCall) return;
    open_text_ += delta.arguments;
    if (open_ == Open::kFunctionCall) {
      Json fields = ItemFields();
      fields["delta"] = delta.arguments;
      chunks.push_back(Event("response.function_call_arguments.delta", fields));
    } else {
      StreamCustomInput(chunks);
    }
  }

  // A custom call's input streams as the decoded text of its `input` argument, as far as it is complete.
  void StreamCustomInput(std::vector<Json>& chunks) {
    if (custom_value_start_ == std::string::npos) {
      custom_value_start_ = CustomInputStart(open_text_);
      if (custom_value_start_ == std::string::npos) return;
      custom_value_end_ = custom_value_start_;
    }
    bool closed = false;
    const std::string_view rest = std::string_view(open_text_).substr(custom_value_end_);
    const size_t complete = CompleteEscapedPrefix(rest, closed);
    if (complete == 0) return;
    const Json decoded = Json::parse(StrCat("\"", rest.substr(0, complete), "\""), nullptr, false);
    custom_value_end_ += complete;
    if (!decoded.is_string() || decoded.get_ref<const std::string&>().empty()) return;
    custom_streamed_ += decoded.get<std::string>();
    Json fields = ItemFields();
    fields["delta"] = decoded;
    chunks.push_back(Event("response.custom_tool_call_input.delta", fields));
  }

  void CloseOpenItem(std::vector<Json>& chunks) {
    if (open_ == Open::kNone) return;
    const std::string status =
        finish_ == GenerationFinish::kStop || finish_ == GenerationFinish::kNone ? "completed" : "incomplete";
    Json& item = open_item();
    switch (open_) {
      case Open::kReasoning:
        CloseReasoning(item, chunks);
        break;
      case Open::kMessage:
        CloseMessage(item, status, chunks);
        break;
      case Open::kFunctionCall: {
        if (open_text_.empty()) open_text_ = "{}";
        Json fields = ItemFields();
        fields["name"] = item["name"];
        fields["arguments"] = open_text_;
        chunks.push_back(Event("response.function_call_arguments.done", fields));
        item["arguments"] = open_text_;
        item["status"] = status;
        break;
      }
      case Open::kCustomCall:
        CloseCustomCall(item, status, chunks);
        break;
      case Open::kNone:
        break;
    }
    chunks.push_back(Event("response.output_item.done", {{"output_index", open_index()}, {"item", item}}));
    open_ = Open::kNone;
  }

  void CloseReasoning(Json& item, std::vector<Json>& chunks) {
    Json part = {{"type", "reasoning_text"}, {"text", open_text_}};
    Json fields = PartFields();
    fields["text"] = open_text_;
    chunks.push_back(Event("response.reasoning_text.done", fields));
    fields = PartFields();
    fields["part"] = part;
    chunks.push_back(Event("response.content_part.done", fields));
    item["content"] = Json::array({std::move(part)});
    if (options_.include_encrypted_reasoning) item["encrypted_content"] = StrCat(kEncryptedReasoningPrefix, open_text_);
  }

  void CloseMessage(Json& item, const std::string& status, std::vector<Json>& chunks) {
    Json part = {
        {"type", "output_text"}, {"text", open_text_}, {"annotations", Json::array()}, {"logprobs", open_logprobs_}};
    Json fields = PartFields();
    fields["text"] = open_text_;
    fields["logprobs"] = open_logprobs_;
    chunks.push_back(Event("response.output_text.done", fields));
    fields = PartFields();
    fields["part"] = part;
    chunks.push_back(Event("response.content_part.done", fields));
    item["content"] = Json::array({std::move(part)});
    item["status"] = status;
  }

  void CloseCustomCall(Json& item, const std::string& status, std::vector<Json>& chunks) {
    // A call cut inside its `input` value (max_output_tokens): the text decoded so far, as streamed; a whole call:
    // its `input` argument (or the arguments themselves when the model did not use the one-argument form).
    const std::string arguments = open_text_.empty() ? "{}" : open_text_;
    const bool cut_in_value = custom_value_start_ != std::string::npos && !Json::accept(arguments);
    const std::string input = cut_in_value ? custom_streamed_ : CustomInputOf(arguments);
    // What was not streamed yet (all of it when the arguments did not have the `input` form).
    if (input.size() > custom_streamed_.size() && input.starts_with(custom_streamed_)) {
      Json fields = ItemFields();
      fields["delta"] = input.substr(custom_streamed_.size());
      chunks.push_back(Event("response.custom_tool_call_input.delta", fields));
    }
    Json fields = ItemFields();
    fields["input"] = input;
    chunks.push_back(Event("response.custom_tool_call_input.done", fields));
    item["input"] = input;
    item["status"] = status;
  }

  Json LogprobEntries(const GenerationOutput& output) const {
    return options_.logprobs ? OutputLogprobsJson(tokenizer_, output, options_.top_logprobs) : Json::array();
  }

  // The finished response object; reported (to be stored) the first time.
  Json Finished(const Json& chat_usage) const {
    Json response = skeleton_;
    response["output"] = output_;
    response["usage"] = ResponsesUsage(chat_usage, reasoning_tokens_);
    if (finish_ == GenerationFinish::kStop) {
      response["status"] = "completed";
    } else if (finish_ == GenerationFinish::kLength) {
      response["status"] = "incomplete";
      response["incomplete_details"] = {{"reason", "max_output_tokens"}};
    } else {
      response["status"] = "failed";
      response["error"] = {
          {"code", "server_error"},
          {"message", finish_ == GenerationFinish::kCancelled ? "the request was cancelled: the server is shutting down"
                      : error_.empty()                        ? "the engine failed on this request"
                                                              : error_}};
    }
    if (!reported_ && on_finished_) {
      reported_ = true;
      on_finished_(response);
    }
    return response;
  }

  Json skeleton_;
  ResponsesOutputOptions options_;
  const Tokenizer& tokenizer_;
  ResponseFinished on_finished_;
  ToolParameterTypes tool_types_;  // the parser points here
  ReasoningParser reasoning_;
  ToolCallParser tools_;
  bool parse_tools_;
  int64_t call_limit_ = 0;
  Json output_ = Json::array();  // the items so far; the open one (if any) last
  Open open_ = Open::kNone;
  std::string open_text_;  // the open item's text, reasoning or arguments
  Json open_logprobs_ = Json::array();
  std::string pending_blank_;    // whitespace content not yet in a message
  std::vector<bool> call_kept_;  // [parser's call index]: streamed, or dropped by parallel_tool_calls / max_tool_calls
  int64_t kept_calls_ = 0;
  size_t custom_value_start_ = std::string::npos;  // offset in open_text_ of the `input` value, once seen
  size_t custom_value_end_ = 0;                    // how far it has been decoded
  std::string custom_streamed_;                    // the input text sent in deltas
  GenerationFinish finish_ = GenerationFinish::kNone;
  mutable std::string error_;  // StreamError records it for response.failed
  int64_t reasoning_tokens_ = 0;
  mutable int64_t next_sequence_number_ = 0;  // EncodeEvent numbers the events it writes
  mutable bool reported_ = false;
};

Json OrNull(const Json& body, const char* key) {
  const Json* value = Field(body, key);
  return value != nullptr ? *value : Json(nullptr);
}

}  // namespace

Json ResponsesUsage(const Json& chat_usage, int64_t reasoning_tokens) {
  const int64_t input = chat_usage.value("prompt_tokens", int64_t{0});
  const int64_t output = chat_usage.value("completion_tokens", int64_t{0});
  int64_t cached = 0;
  if (const auto details = chat_usage.find("prompt_tokens_details"); details != chat_usage.end()) {
    cached = details->value("cached_tokens", int64_t{0});
  }
  return {{"input_tokens", input},
          {"input_tokens_details", {{"cached_tokens", cached}}},
          {"output_tokens", output},
          {"output_tokens_details", {{"reasoning_tokens", std::min(reasoning_tokens, output)}}},
          {"total_tokens", input + output}};
}

Json ResponseSkeleton(const ResponsesRequest& request, const ChatRequest& chat, const std::string& id,
                      int64_t created_at, const std::string& model) {
  const Json& body = request.body;
  Json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  if (const Json* given = Field(body, "reasoning"); given != nullptr && given->is_object()) {
    reasoning["effort"] = OrNull(*given, "effort");
    reasoning["summary"] = OrNull(*given, "summary");
  }
  const Json* text = Field(body, "text");
  const Json* tool_choice = Field(body, "tool_choice");
  const Json* metadata = Field(body, "metadata");
  const Json* tools = Field(body, "tools");
  return {{"id", id},
          {"object", "response"},
          {"created_at", created_at},
          {"status", "in_progress"},
          {"background", false},
          {"error", nullptr},
          {"incomplete_details", nullptr},
          {"instructions", request.instructions ? Json(*request.instructions) : Json(nullptr)},
          {"max_output_tokens", chat.fields.max_tokens ? Json(*chat.fields.max_tokens) : Json(nullptr)},
          {"max_tool_calls", request.max_tool_calls ? Json(*request.max_tool_calls) : Json(nullptr)},
          {"model", model},
          {"output", Json::array()},
          {"parallel_tool_calls", request.parallel_tool_calls},
          {"previous_response_id", request.previous_response_id ? Json(*request.previous_response_id) : Json(nullptr)},
          {"prompt_cache_key", OrNull(body, "prompt_cache_key")},
          {"reasoning", std::move(reasoning)},
          {"service_tier", "default"},
          {"store", request.store},
          {"temperature", chat.fields.sampling.temperature},
          {"text", text != nullptr ? *text : Json{{"format", {{"type", "text"}}}}},
          {"tool_choice", tool_choice != nullptr ? *tool_choice : Json(chat.tools.empty() ? "none" : "auto")},
          {"tools", tools != nullptr ? *tools : Json::array()},
          {"top_logprobs", request.top_logprobs},
          {"top_p", chat.fields.sampling.top_p},
          {"truncation", Field(body, "truncation") != nullptr ? OrNull(body, "truncation") : Json("disabled")},
          {"usage", nullptr},
          {"user", OrNull(body, "user")},
          {"metadata", metadata != nullptr ? *metadata : Json::object()}};
}

std::unique_ptr<ResponseFormatter> MakeResponsesFormatter(Json skeleton, const ChatPrompt& prompt,
                                                          ResponsesOutputOptions options, const Tokenizer& tokenizer,
                                                          ResponseFinished on_finished) {
  return std::make_unique<ResponsesFormatter>(std::move(skeleton), prompt, std::move(options), tokenizer,
                                              std::move(on_finished));
}

}  // namespace glint::server
