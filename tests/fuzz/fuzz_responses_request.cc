// libFuzzer target: the Responses API's request parser and its translation into the chat request
// (server/responses_request.h). The input is a request body; parsing must give a request or a 400-style error,
// never crash, and a request that parses must translate (with and without a stored conversation, which here is
// its own input items again) into a chat request or an error that names a field.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/responses_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  glint::server::RequestPolicy policy;
  policy.vocab_size = 1000;
  policy.max_messages = 64;
  policy.max_tools = 16;
  auto parsed = glint::server::ParseResponsesRequest(input, policy);
  if (!parsed.ok()) {
    if (parsed.error().status != 400 || parsed.error().message.empty()) std::abort();
    return 0;
  }
  for (const bool with_previous : {false, true}) {
    const glint::server::Json previous = parsed.value().input_items;
    auto chat = glint::server::TranslateResponsesRequest(parsed.value(), with_previous ? &previous : nullptr, policy);
    if (!chat.ok() && (chat.error().status != 400 || chat.error().message.empty())) std::abort();
    if (chat.ok() && chat.value().messages.empty()) std::abort();  // the chat parser refuses an empty conversation
  }
  return 0;
}
