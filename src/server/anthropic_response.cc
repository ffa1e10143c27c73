#include "server/anthropic_response.h"

#include <algorithm>

#include "server/json_body.h"
#include "tokenizer/reasoning_parser.h"
#include "tokenizer/tool_call_parser.h"

namespace glint::server {
namespace {

std::string Dump(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

class MessagesFormatter final : public ResponseFormatter {
 public:
  MessagesFormatter(ResponseIdentity identity, const ChatPrompt& prompt, const MessagesFormatOptions& options)
      : identity_(std::move(identity)),
        options_(options),
        tool_types_(prompt.tool_types),
        parse_tools_(prompt.parse_tool_calls),
        reasoning_(prompt.reasoning_start),
        tools_(&tool_types_) {
    if (prompt.forced_call) tools_.StartInsideCall(*prompt.forced_call);
  }

  std::string_view api() const override { return options_.api; }

  void OnOutput(int /*tag*/, const GenerationOutput& output, std::vector<Json>& chunks) override {
    if (output.index != 0) return;  // the Messages API has one sample
    const bool finished = output.finish != GenerationFinish::kNone;
    std::string reasoning, text, content;
    std::vector<ToolCallDelta> deltas;
    reasoning_.Push(output.text, reasoning, text);
    if (finished) reasoning_.Finish(reasoning, text);
    if (parse_tools_) {
      tools_.Push(text, content, deltas);
      if (finished) tools_.Finish(content, deltas);
    } else {
      content = std::move(text);
    }
    AddThinking(reasoning, chunks);
    AddText(content, chunks);
    for (const ToolCallDelta& delta : deltas) AddToolDelta(delta, chunks);
    if (!finished) return;
    finish_ = output.finish;
    stop_string_ = output.stop_string;
    generated_tokens_ = output.generated_tokens;
    if (finish_ != GenerationFinish::kError) CloseBlock(chunks);
  }

  std::string StreamStart(const Json& usage) override {
    Json message = MessageShell();
    message["content"] = Json::array();
    message["usage"] = {{"input_tokens", usage.value("prompt_tokens", 0)},
                        {"cache_creation_input_tokens", 0},
                        {"cache_read_input_tokens", 0},
                        {"output_tokens", 0}};
    return EncodeEvent({{"type", "message_start"}, {"message", std::move(message)}});
  }

  std::string EncodeEvent(const Json& chunk) const override {
    return "event: " + chunk.value("type", std::string("message")) + "\ndata: " + Dump(chunk) + "\n\n";
  }

  std::string StreamEnd(const Json& usage, bool /*include_usage*/) const override {
    if (finish_ == GenerationFinish::kError || finish_ == GenerationFinish::kNone) return "";
    const Json delta = {{"type", "message_delta"},
                        {"delta", {{"stop_reason", StopReason()}, {"stop_sequence", StopSequence()}}},
                        {"usage", AnthropicUsage(usage)}};
    return EncodeEvent(delta) + EncodeEvent({{"type", "message_stop"}});
  }

  Json StreamError(const ApiError& error) const override { return AnthropicErrorJson(error); }

  std::string KeepAlive() const override { return EncodeEvent({{"type", "ping"}}); }

  Json FinalResponse(const Json& usage) const override {
    Json message = MessageShell();
    Json content = Json::array();
    for (const Block& block : blocks_) content.push_back(FinalBlock(block));
    message["content"] = std::move(content);
    message["stop_reason"] = StopReason();
    message["stop_sequence"] = StopSequence();
    message["usage"] = AnthropicUsage(usage);
    return message;
  }

  Json UsageChunk(const Json& usage) const override { return AnthropicUsage(usage); }

  std::vector<std::string> FinishReasons() const override { return {FinishName(finish_, MadeCalls())}; }

 private:
  struct Block {
    std::string type;  // "thinking", "text", "tool_use"
    std::string text;  // thinking or text; tool_use: the arguments JSON text
    std::string id, name, signature;
    bool truncated = false;
  };

  static Block NewBlock(std::string type, std::string id = "", std::string name = "") {
    Block block;
    block.type = std::move(type);
    block.id = std::move(id);
    block.name = std::move(name);
    return block;
  }

  Json MessageShell() const {
    return {{"id", identity_.id},       {"type", "message"},      {"role", "assistant"},
            {"model", identity_.model}, {"stop_reason", nullptr}, {"stop_sequence", nullptr}};
  }

  bool Open(std::string_view type) const { return open_ && blocks_.back().type == type; }
  bool MadeCalls() const {
    return std::any_of(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.type == "tool_use"; }) &&
           !truncated_call_;
  }

  Json StopReason() const {
    switch (finish_) {
      case GenerationFinish::kStop:
        if (!stop_string_.empty()) return "stop_sequence";
        return MadeCalls() ? "tool_use" : "end_turn";
      case GenerationFinish::kLength:
        // The engine stops at max_tokens or when the context is full; only the first is the client's limit.
        return generated_tokens_ >= options_.max_tokens ? "max_tokens" : "model_context_window_exceeded";
      default:
        return nullptr;
    }
  }
  Json StopSequence() const { return stop_string_.empty() ? Json(nullptr) : Json(stop_string_); }

  void OpenBlock(Block block, std::vector<Json>& chunks) {
    CloseBlock(chunks);
    Json start;
    if (block.type == "thinking") {
      block.signature = RandomId("glint-thinking-", 32);
      start = {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
    } else if (block.type == "text") {
      start = {{"type", "text"}, {"text", ""}};
    } else {
      start = {{"type", "tool_use"}, {"id", block.id}, {"name", block.name}, {"input", Json::object()}};
    }
    blocks_.push_back(std::move(block));
    open_ = true;
    chunks.push_back({{"type", "content_block_start"}, {"index", Index()}, {"content_block", std::move(start)}});
  }

  void CloseBlock(std::vector<Json>& chunks) {
    if (!open_) return;
    if (blocks_.back().type == "thinking") {
      // Clients send thinking blocks back with their signature; glint's is an opaque token it does not check.
      chunks.push_back(Delta({{"type", "signature_delta"}, {"signature", blocks_.back().signature}}));
    }
    chunks.push_back({{"type", "content_block_stop"}, {"index", Index()}});
    open_ = false;
  }

  int64_t Index() const { return static_cast<int64_t>(blocks_.size()) - 1; }
  Json Delta(Json delta) const {
    return {{"type", "content_block_delta"}, {"index", Index()}, {"delta", std::move(delta)}};
  }

  void AddThinking(const std::string& text, std::vector<Json>& chunks) {
    if (text.empty()) return;
    if (!Open("thinking")) OpenBlock(NewBlock("thinking"), chunks);
    blocks_.back().text += text;
    chunks.push_back(Delta({{"type", "thinking_delta"}, {"thinking", text}}));
  }

  // Blank text opens no block (the newline GLM writes after </think> or before a call), and a text block starts at
  // its first non-blank character.
  void AddText(const std::string& text, std::vector<Json>& chunks) {
    std::string_view piece = text;
    if (!Open("text")) {
      piece.remove_prefix(std::min(piece.size(), piece.find_first_not_of(" \t\r\n")));
      if (piece.empty()) return;
      OpenBlock(NewBlock("text"), chunks);
    }
    if (piece.empty()) return;
    blocks_.back().text += piece;
    chunks.push_back(Delta({{"type", "text_delta"}, {"text", piece}}));
  }

  void AddToolDelta(const ToolCallDelta& delta, std::vector<Json>& chunks) {
    if (!delta.name.empty()) {
      OpenBlock(NewBlock("tool_use", RandomId("toolu_"), delta.name), chunks);
    }
    if (!Open("tool_use")) return;
    if (!delta.arguments.empty()) {
      blocks_.back().text += delta.arguments;
      chunks.push_back(Delta({{"type", "input_json_delta"}, {"partial_json", delta.arguments}}));
    }
    if (delta.truncated) {
      blocks_.back().truncated = true;
      truncated_call_ = true;
    }
    if (delta.done) CloseBlock(chunks);
  }

  static Json FinalBlock(const Block& block) {
    if (block.type == "thinking")
      return {{"type", "thinking"}, {"thinking", block.text}, {"signature", block.signature}};
    if (block.type == "text") return {{"type", "text"}, {"text", block.text}};
    // A call cut by max_tokens has unfinished arguments: `input` must be an object, so it is empty, and the
    // stop_reason (max_tokens) says the call is incomplete; the stream carried the text that was written.
    Json input = Json::parse(block.text, nullptr, /*allow_exceptions=*/false);
    if (input.is_discarded() || !input.is_object()) input = Json::object();
    return {{"type", "tool_use"}, {"id", block.id}, {"name", block.name}, {"input", std::move(input)}};
  }

  ResponseIdentity identity_;
  MessagesFormatOptions options_;
  ToolParameterTypes tool_types_;  // tools_ points here
  bool parse_tools_;
  ReasoningParser reasoning_;
  ToolCallParser tools_;
  std::vector<Block> blocks_;
  bool open_ = false;  // the last block is open (started, not stopped)
  bool truncated_call_ = false;
  GenerationFinish finish_ = GenerationFinish::kNone;
  std::string stop_string_;
  int64_t generated_tokens_ = 0;
};

std::string_view AnthropicErrorType(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status < 500 ? "invalid_request_error" : "api_error";
  }
}

}  // namespace

Json AnthropicErrorJson(const ApiError& error) {
  return {{"type", "error"},
          {"error", {{"type", std::string(AnthropicErrorType(error.status))}, {"message", error.message}}}};
}

std::string AnthropicErrorBody(const ApiError& error) { return Dump(AnthropicErrorJson(error)); }

Json AnthropicUsage(const Json& usage) {
  const int64_t prompt = usage.value("prompt_tokens", int64_t{0});
  const int64_t cached = usage.contains("prompt_tokens_details")
                             ? usage["prompt_tokens_details"].value("cached_tokens", int64_t{0})
                             : int64_t{0};
  return {{"input_tokens", prompt - cached},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached},
          {"output_tokens", usage.value("completion_tokens", int64_t{0})}};
}

std::unique_ptr<ResponseFormatter> MakeMessagesFormatter(ResponseIdentity identity, const ChatPrompt& prompt,
                                                         const MessagesFormatOptions& options) {
  return std::make_unique<MessagesFormatter>(std::move(identity), prompt, options);
}

}  // namespace glint::server
