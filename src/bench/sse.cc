#include "bench/sse.h"

#include <nlohmann/json.hpp>

namespace glint::bench {

Result<std::vector<std::string>> SseParser::Feed(std::string_view bytes) {
  std::vector<std::string> events;
  for (char c : bytes) {
    if (c == '\n' && after_cr_) {  // the \n of a \r\n whose \r already ended the line
      after_cr_ = false;
      continue;
    }
    after_cr_ = (c == '\r');
    if (c == '\n' || c == '\r') {
      EndLine(events);
      continue;
    }
    line_.push_back(c);
    if (line_.size() + data_.size() > kMaxEventBytes) {
      return InvalidArgument("a server-sent event exceeded ", kMaxEventBytes, " bytes without ending");
    }
  }
  return events;
}

void SseParser::EndLine(std::vector<std::string>& events) {
  if (line_.empty()) {  // blank line: dispatch the event, if it had data
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line_.front() != ':') {
    const size_t colon = line_.find(':');
    const std::string_view field = std::string_view(line_).substr(0, colon);
    if (field == "data") {
      std::string_view value;
      if (colon != std::string::npos) {
        value = std::string_view(line_).substr(colon + 1);
        if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      }
      if (has_data_) data_.push_back('\n');
      data_.append(value);
      has_data_ = true;
    }
  }
  line_.clear();
}

namespace {

using nlohmann::json;

bool NonEmptyString(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

Result<std::optional<int64_t>> OptionalCount(const json& usage, const char* key) {
  auto it = usage.find(key);
  if (it == usage.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return InvalidArgument("usage.", key, " is ", it->dump(), ", expected a non-negative integer");
  }
  return std::optional<int64_t>(it->get<int64_t>());
}

// The sampled tokens a choice's logprobs describe: completions carry parallel arrays with "tokens", chat an array
// "content" of one object per token. Absent or null logprobs: none.
Result<int64_t> LogprobTokens(const json& choice) {
  auto logprobs = choice.find("logprobs");
  if (logprobs == choice.end() || logprobs->is_null()) return int64_t{0};
  if (!logprobs->is_object()) return InvalidArgument("\"logprobs\" is ", logprobs->type_name(), ", expected an object");
  for (const char* key : {"tokens", "content"}) {
    auto entries = logprobs->find(key);
    if (entries == logprobs->end() || entries->is_null()) continue;
    if (!entries->is_array())
      return InvalidArgument("logprobs.", key, " is ", entries->type_name(), ", expected an array");
    return static_cast<int64_t>(entries->size());
  }
  return int64_t{0};
}

}  // namespace

Result<StreamChunk> ParseStreamChunk(std::string_view payload) {
  StreamChunk chunk;
  if (payload == "[DONE]") {
    chunk.done = true;
    return chunk;
  }
  json parsed = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return InvalidArgument("stream chunk is not a JSON object: ", payload.substr(0, 200));
  }
  if (auto error = parsed.find("error"); error != parsed.end() && !error->is_null()) {
    chunk.error = error->is_object() && error->contains("message") && (*error)["message"].is_string()
                      ? (*error)["message"].get<std::string>()
                      : error->dump();
    return chunk;
  }
  if (auto choices = parsed.find("choices"); choices != parsed.end() && !choices->is_null()) {
    if (!choices->is_array()) return InvalidArgument("\"choices\" is ", choices->type_name(), ", expected an array");
    for (const json& choice : *choices) {
      if (!choice.is_object()) return InvalidArgument("a choice is ", choice.type_name(), ", expected an object");
      if (NonEmptyString(choice, "text")) {  // /v1/completions
        chunk.has_content = true;
        chunk.text += choice["text"].get<std::string>();
      }
      if (auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) {  // chat
        if (NonEmptyString(*delta, "content")) {
          chunk.has_content = true;
          chunk.text += (*delta)["content"].get<std::string>();
        }
        if (NonEmptyString(*delta, "reasoning_content")) chunk.has_content = true;
        if (auto calls = delta->find("tool_calls"); calls != delta->end() && calls->is_array() && !calls->empty()) {
          chunk.has_content = true;
        }
      }
      GLINT_ASSIGN_OR_RETURN(const int64_t tokens, LogprobTokens(choice));
      chunk.logprob_tokens += tokens;
      if (auto finish = choice.find("finish_reason"); finish != choice.end() && finish->is_string()) {
        chunk.finish_reason = finish->get<std::string>();
      }
    }
  }
  if (auto usage = parsed.find("usage"); usage != parsed.end() && !usage->is_null()) {
    if (!usage->is_object()) return InvalidArgument("\"usage\" is ", usage->type_name(), ", expected an object");
    GLINT_ASSIGN_OR_RETURN(chunk.prompt_tokens, OptionalCount(*usage, "prompt_tokens"));
    GLINT_ASSIGN_OR_RETURN(chunk.completion_tokens, OptionalCount(*usage, "completion_tokens"));
  }
  return chunk;
}

}  // namespace glint::bench
