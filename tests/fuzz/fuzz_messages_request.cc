// libFuzzer target: Anthropic Messages request parsing (POST /v1/messages and /v1/messages/count_tokens). Any body
// must give a request or a 400-style error naming a field, never a crash, and a request's translation must hold
// the chat request's invariants (a non-empty message list, every message with a known role).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/anthropic_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  glint::server::RequestPolicy policy;
  policy.vocab_size = 1000;
  policy.max_tools = 64;
  policy.max_content_parts = 64;
  for (bool count_tokens : {false, true}) {
    auto parsed = glint::server::ParseMessagesRequest(input, policy, count_tokens);
    if (!parsed.ok()) {
      if (parsed.error().status != 400 || parsed.error().message.empty()) std::abort();
      continue;
    }
    const auto& messages = parsed.value().chat.messages;
    if (!messages.is_array() || messages.empty()) std::abort();
    for (const auto& message : messages) {
      const std::string role = message["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant" && role != "tool") std::abort();
    }
    if (!count_tokens && parsed.value().max_tokens < 1) std::abort();
  }
  return 0;
}
