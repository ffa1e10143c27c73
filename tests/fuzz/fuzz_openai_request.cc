// libFuzzer target: the server's request parsing and the parsers of the model's output. The input is used twice:
// as a request body for every endpoint's parser (each must return a request or a 400-style error, never crash),
// and as model output for the reasoning and tool-call parsers, fed whole and cut in pieces, which must agree and
// produce tool-call arguments that are JSON objects (for calls that closed; a truncated call's are its text so far).
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"
#include "tokenizer/reasoning_parser.h"
#include "tokenizer/tool_call_parser.h"
#include "tokenizer/utf8.h"

namespace {

struct Parsed {
  std::string reasoning, content;
  std::vector<std::string> names, arguments;
  std::vector<bool> truncated;
  bool operator==(const Parsed&) const = default;
};

Parsed Feed(std::string_view text, size_t piece, const glint::ToolParameterTypes& types) {
  glint::ReasoningParser reasoning(glint::ReasoningParser::Start::kReasoning);
  glint::ToolCallParser tools(&types);
  Parsed parsed;
  auto absorb = [&](const std::string& content, const std::vector<glint::ToolCallDelta>& calls) {
    parsed.content += content;
    for (const auto& delta : calls) {
      if (delta.index >= static_cast<int>(parsed.names.size())) {
        parsed.names.push_back(delta.name);
        parsed.arguments.emplace_back();
        parsed.truncated.push_back(false);
      }
      parsed.arguments[static_cast<size_t>(delta.index)] += delta.arguments;
      if (delta.truncated) parsed.truncated[static_cast<size_t>(delta.index)] = true;
    }
  };
  for (size_t at = 0; at < text.size(); at += piece) {
    std::string text_content, content;
    std::vector<glint::ToolCallDelta> calls;
    reasoning.Push(text.substr(at, piece), parsed.reasoning, text_content);
    tools.Push(text_content, content, calls);
    absorb(content, calls);
  }
  std::string text_content, content;
  std::vector<glint::ToolCallDelta> calls;
  reasoning.Finish(parsed.reasoning, text_content);
  tools.Push(text_content, content, calls);
  tools.Finish(content, calls);
  absorb(content, calls);
  return parsed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  glint::server::RequestPolicy policy;
  policy.vocab_size = 1000;
  (void)glint::server::ParseChatRequest(input, policy);
  (void)glint::server::ParseCompletionRequest(input, policy);
  (void)glint::server::ParseTokenizeRequest(input, policy);
  (void)glint::server::ParseDetokenizeRequest(input, policy);

  glint::ToolParameterTypes types;
  types.string_parameters["f"] = {"s", "text"};
  const Parsed whole = Feed(input, input.size() + 1, types);
  const size_t piece = size == 0 ? 1 : 1 + data[0] % 7;
  if (!(Feed(input, piece, types) == whole)) std::abort();  // the result must not depend on the chunking
  for (size_t i = 0; i < whole.arguments.size(); ++i) {
    const std::string& arguments = whole.arguments[i];
    // Ill-formed UTF-8 in the input is copied into string values; the server's text is always well-formed.
    if (whole.truncated[i] || !glint::IsValidUtf8(arguments)) continue;
    if (!nlohmann::json::parse(arguments, nullptr, false).is_object()) std::abort();
  }
  return 0;
}
