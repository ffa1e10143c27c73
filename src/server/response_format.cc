#include "server/response_format.h"

#include <random>

#include "tokenizer/utf8.h"

namespace glint::server {
namespace {

// Characters (code points) of valid UTF-8 text: OpenAI's text_offset counts characters.
int64_t CountCharacters(std::string_view text) {
  int64_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

Json FinishJson(const std::string& name) { return name.empty() ? Json(nullptr) : Json(name); }

class ChatFormatter final : public ResponseFormatter {
 public:
  std::string_view api() const override { return "chat"; }
  ChatFormatter(ResponseIdentity identity, const ChatPrompt& prompt, int64_t n, const ChatFormatOptions& options,
                const Tokenizer& tokenizer)
      : identity_(std::move(identity)),
        options_(options),
        tokenizer_(tokenizer),
        tool_types_(prompt.tool_types),
        parse_tools_(prompt.parse_tool_calls) {
    for (int64_t i = 0; i < n; ++i) {
      auto choice = std::make_unique<Choice>(prompt.reasoning_start, &tool_types_);
      if (prompt.forced_call) choice->tools.StartInsideCall(*prompt.forced_call);
      choices_.push_back(std::move(choice));
    }
  }

  void OnOutput(int /*tag*/, const GenerationOutput& output, std::vector<Json>& chunks) override {
    if (output.index < 0 || output.index >= static_cast<int64_t>(choices_.size())) return;
    Choice& choice = *choices_[static_cast<size_t>(output.index)];
    const bool finished = output.finish != GenerationFinish::kNone;
    std::string reasoning;
    std::string text;
    choice.reasoning.Push(output.text, reasoning, text);
    if (finished) choice.reasoning.Finish(reasoning, text);
    std::string content;
    std::vector<ToolCallDelta> deltas;
    if (parse_tools_) {
      choice.tools.Push(text, content, deltas);
      if (finished) choice.tools.Finish(content, deltas);
    } else {
      content = std::move(text);
    }
    choice.reasoning_text += reasoning;
    choice.content_text += content;
    Json tool_call_deltas = Json::array();
    for (const ToolCallDelta& delta : deltas) {
      Json entry = {{"index", delta.index}};
      if (!delta.name.empty()) {
        choice.calls.push_back({RandomId("call_"), delta.name, ""});
        entry["id"] = choice.calls.back().id;
        entry["type"] = "function";
        entry["function"] = {{"name", delta.name}, {"arguments", delta.arguments}};
      } else {
        entry["function"] = {{"arguments", delta.arguments}};
      }
      if (delta.index < static_cast<int>(choice.calls.size())) {
        choice.calls[static_cast<size_t>(delta.index)].arguments += delta.arguments;
      }
      if (delta.truncated) choice.truncated_call = true;
      // A delta that only says "done" carries nothing for the chat API.
      if (!delta.name.empty() || !delta.arguments.empty()) tool_call_deltas.push_back(std::move(entry));
    }
    Json logprob_entries =
        options_.logprobs ? OutputLogprobsJson(tokenizer_, output, options_.top_logprobs) : Json::array();
    for (const Json& entry : logprob_entries) choice.logprobs.push_back(entry);
    if (finished) choice.finish = output.finish;

    Json delta = Json::object();
    if (!choice.started) {
      delta["role"] = "assistant";
      choice.started = true;
      if (reasoning.empty() && content.empty() && tool_call_deltas.empty()) delta["content"] = "";
    }
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!content.empty()) delta["content"] = content;
    if (!tool_call_deltas.empty()) delta["tool_calls"] = std::move(tool_call_deltas);
    const bool has_logprobs = !logprob_entries.empty();
    if (!delta.empty() || has_logprobs) {
      chunks.push_back(Chunk(output.index, std::move(delta),
                             has_logprobs ? Json{{"content", std::move(logprob_entries)}} : Json(nullptr), nullptr));
    }
    if (finished) {
      chunks.push_back(
          Chunk(output.index, Json::object(), nullptr, FinishJson(FinishName(choice.finish, choice.MadeCalls()))));
    }
  }

  Json FinalResponse(const Json& usage) const override {
    Json choices = Json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Choice& choice = *choices_[i];
      Json message = {{"role", "assistant"}};
      if (choice.content_text.empty() && !choice.calls.empty()) {
        message["content"] = nullptr;
      } else {
        message["content"] = choice.content_text;
      }
      message["reasoning_content"] = choice.reasoning_text.empty() ? Json(nullptr) : Json(choice.reasoning_text);
      if (!choice.calls.empty()) {
        Json calls = Json::array();
        for (const auto& call : choice.calls) {
          calls.push_back({{"id", call.id},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        }
        message["tool_calls"] = std::move(calls);
      }
      choices.push_back({{"index", i},
                         {"message", std::move(message)},
                         {"logprobs", options_.logprobs ? Json{{"content", choice.logprobs}} : Json(nullptr)},
                         {"finish_reason", FinishJson(FinishName(choice.finish, choice.MadeCalls()))}});
    }
    return {{"id", identity_.id},       {"object", "chat.completion"},   {"created", identity_.created},
            {"model", identity_.model}, {"choices", std::move(choices)}, {"usage", usage}};
  }

  Json UsageChunk(const Json& usage) const override {
    return {{"id", identity_.id},       {"object", "chat.completion.chunk"}, {"created", identity_.created},
            {"model", identity_.model}, {"choices", Json::array()},          {"usage", usage}};
  }

  std::vector<std::string> FinishReasons() const override {
    std::vector<std::string> reasons;
    for (const auto& choice : choices_) reasons.push_back(FinishName(choice->finish, choice->MadeCalls()));
    return reasons;
  }

 private:
  struct Call {
    std::string id;
    std::string name;
    std::string arguments;
  };
  struct Choice {
    Choice(ReasoningParser::Start start, const ToolParameterTypes* types) : reasoning(start), tools(types) {}
    ReasoningParser reasoning;
    ToolCallParser tools;
    std::string reasoning_text;
    std::string content_text;
    std::vector<Call> calls;
    Json logprobs = Json::array();
    bool started = false;
    bool truncated_call = false;  // the output ended inside a call
    GenerationFinish finish = GenerationFinish::kNone;
    bool MadeCalls() const { return !calls.empty() && !truncated_call; }
  };

  Json Chunk(int64_t index, Json delta, Json logprobs, Json finish_reason) const {
    return {{"id", identity_.id},
            {"object", "chat.completion.chunk"},
            {"created", identity_.created},
            {"model", identity_.model},
            {"choices", Json::array({{{"index", index},
                                      {"delta", std::move(delta)},
                                      {"logprobs", std::move(logprobs)},
                                      {"finish_reason", std::move(finish_reason)}}})}};
  }

  ResponseIdentity identity_;
  ChatFormatOptions options_;
  const Tokenizer& tokenizer_;
  ToolParameterTypes tool_types_;  // the choices' parsers point here
  bool parse_tools_;
  std::vector<std::unique_ptr<Choice>> choices_;
};

class CompletionFormatter final : public ResponseFormatter {
 public:
  std::string_view api() const override { return "completions"; }
  CompletionFormatter(ResponseIdentity identity, int num_prompts, int64_t n, const CompletionFormatOptions& options,
                      const Tokenizer& tokenizer)
      : identity_(std::move(identity)), n_(n), options_(options), tokenizer_(tokenizer) {
    choices_.resize(static_cast<size_t>(num_prompts * n));
  }

  void OnOutput(int tag, const GenerationOutput& output, std::vector<Json>& chunks) override {
    const int64_t index = tag * n_ + output.index;
    if (output.index < 0 || output.index >= n_ || index >= static_cast<int64_t>(choices_.size())) return;
    Choice& choice = choices_[static_cast<size_t>(index)];
    std::string text = output.text;
    if (!choice.echoed && tag < static_cast<int>(options_.echo_texts.size())) {
      text = options_.echo_texts[static_cast<size_t>(tag)] + text;
    }
    choice.echoed = true;
    Json piece = nullptr;
    if (options_.logprobs) {
      piece = {{"tokens", Json::array()},
               {"token_logprobs", Json::array()},
               {"top_logprobs", Json::array()},
               {"text_offset", Json::array()}};
      for (size_t t = 0; t < output.tokens.size() && t < output.logprobs.size(); ++t) {
        const std::string token_text = SanitizeUtf8(tokenizer_.TokenText(output.tokens[t]));
        Json top = Json::object();
        top[token_text] = output.logprobs[t].logprob;
        if (t < output.top_logprobs.size()) {
          int64_t added = 0;
          for (const TokenLogprob& alternative : output.top_logprobs[t]) {
            if (added++ >= *options_.logprobs) break;
            top[SanitizeUtf8(tokenizer_.TokenText(alternative.token))] = alternative.logprob;
          }
        }
        piece["tokens"].push_back(token_text);
        piece["token_logprobs"].push_back(output.logprobs[t].logprob);
        piece["top_logprobs"].push_back(std::move(top));
        piece["text_offset"].push_back(choice.text_characters);
      }
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        for (const Json& item : piece[key]) choice.logprobs[key].push_back(item);
      }
    }
    choice.text += text;
    choice.text_characters += CountCharacters(text);
    if (!text.empty() || (options_.logprobs && !output.tokens.empty())) {
      chunks.push_back(Chunk(index, text, std::move(piece), nullptr));
    }
    if (output.finish != GenerationFinish::kNone) {
      choice.finish = output.finish;
      chunks.push_back(Chunk(index, "", nullptr, FinishJson(FinishName(choice.finish, false))));
    }
  }

  Json FinalResponse(const Json& usage) const override {
    Json choices = Json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Choice& choice = choices_[i];
      choices.push_back({{"index", i},
                         {"text", choice.text},
                         {"logprobs", options_.logprobs ? choice.logprobs : Json(nullptr)},
                         {"finish_reason", FinishJson(FinishName(choice.finish, false))}});
    }
    return {{"id", identity_.id},       {"object", "text_completion"},   {"created", identity_.created},
            {"model", identity_.model}, {"choices", std::move(choices)}, {"usage", usage}};
  }

  Json UsageChunk(const Json& usage) const override {
    return {{"id", identity_.id},       {"object", "text_completion"}, {"created", identity_.created},
            {"model", identity_.model}, {"choices", Json::array()},    {"usage", usage}};
  }

  std::vector<std::string> FinishReasons() const override {
    std::vector<std::string> reasons;
    for (const auto& choice : choices_) reasons.push_back(FinishName(choice.finish, false));
    return reasons;
  }

 private:
  struct Choice {
    std::string text;
    int64_t text_characters = 0;
    Json logprobs = {{"tokens", Json::array()},
                     {"token_logprobs", Json::array()},
                     {"top_logprobs", Json::array()},
                     {"text_offset", Json::array()}};
    bool echoed = false;
    GenerationFinish finish = GenerationFinish::kNone;
  };

  Json Chunk(int64_t index, const std::string& text, Json logprobs, Json finish_reason) const {
    return {{"id", identity_.id},
            {"object", "text_completion"},
            {"created", identity_.created},
            {"model", identity_.model},
            {"choices", Json::array({{{"index", index},
                                      {"text", text},
                                      {"logprobs", std::move(logprobs)},
                                      {"finish_reason", std::move(finish_reason)}}})}};
  }

  ResponseIdentity identity_;
  int64_t n_;
  CompletionFormatOptions options_;
  const Tokenizer& tokenizer_;
  std::vector<Choice> choices_;
};

}  // namespace

std::string ResponseFormatter::EncodeEvent(const Json& chunk) const {
  return "data: " + chunk.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

std::string ResponseFormatter::StreamEnd(const Json& usage, bool include_usage) const {
  std::string tail;
  if (include_usage) tail += EncodeEvent(UsageChunk(usage));
  return tail + "data: [DONE]\n\n";
}

Json ResponseFormatter::StreamError(const ApiError& error) const { return Json::parse(ErrorBody(error)); }

// A token's text as a JSON string must be valid UTF-8: a token that is part of a character shows U+FFFD, and
// "bytes" gives the exact bytes (OpenAI's shape).
Json TokenLogprobJson(const Tokenizer& tokenizer, int32_t token, float logprob) {
  const std::string_view bytes = tokenizer.TokenText(token);
  Json byte_list = Json::array();
  for (char c : bytes) byte_list.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return {{"token", SanitizeUtf8(bytes)}, {"logprob", logprob}, {"bytes", std::move(byte_list)}};
}

Json OutputLogprobsJson(const Tokenizer& tokenizer, const GenerationOutput& output, int64_t top_logprobs) {
  Json entries = Json::array();
  for (size_t t = 0; t < output.tokens.size() && t < output.logprobs.size(); ++t) {
    Json entry = TokenLogprobJson(tokenizer, output.tokens[t], output.logprobs[t].logprob);
    Json top = Json::array();
    if (t < output.top_logprobs.size()) {
      for (const TokenLogprob& alternative : output.top_logprobs[t]) {
        if (static_cast<int64_t>(top.size()) >= top_logprobs) break;
        top.push_back(TokenLogprobJson(tokenizer, alternative.token, alternative.logprob));
      }
    }
    entry["top_logprobs"] = std::move(top);
    entries.push_back(std::move(entry));
  }
  return entries;
}

// `made_calls`: the choice made tool calls, all of them complete (a call cut by a stop string is no call to run).
std::string FinishName(GenerationFinish finish, bool made_calls) {
  switch (finish) {
    case GenerationFinish::kNone:
      return "";
    case GenerationFinish::kStop:
      return made_calls ? "tool_calls" : "stop";
    case GenerationFinish::kLength:
      return "length";
    case GenerationFinish::kCancelled:
      return "abort";
    case GenerationFinish::kError:
      return "error";
  }
  return "";
}

std::string RandomId(std::string_view prefix, int length) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 generator(std::random_device{}());
  std::string id(prefix);
  for (int i = 0; i < length; ++i) id += kAlphabet[generator() % (sizeof(kAlphabet) - 1)];
  return id;
}

std::unique_ptr<ResponseFormatter> MakeChatFormatter(ResponseIdentity identity, const ChatPrompt& prompt, int64_t n,
                                                     const ChatFormatOptions& options, const Tokenizer& tokenizer) {
  return std::make_unique<ChatFormatter>(std::move(identity), prompt, n, options, tokenizer);
}

std::unique_ptr<ResponseFormatter> MakeCompletionFormatter(ResponseIdentity identity, int num_prompts, int64_t n,
                                                           const CompletionFormatOptions& options,
                                                           const Tokenizer& tokenizer) {
  return std::make_unique<CompletionFormatter>(std::move(identity), num_prompts, n, options, tokenizer);
}

}  // namespace glint::server
