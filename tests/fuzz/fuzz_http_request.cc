// libFuzzer target: the transport's request parsing (server/http_parse.h: Beast's parser under glint's limits, the
// request built from it, the status of each failure) over arbitrary bytes, then pipelined requests after it.
// Every outcome is a request within the limits, a refusal with a 4xx status, or "incomplete"; crashes, sanitizer
// reports and hangs are failures.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  glint::server::TransportOptions options;
  options.max_header_bytes = 2048;  // small limits, so the fuzzer reaches them
  options.max_body_bytes = 4096;
  std::string_view wire(reinterpret_cast<const char*>(data), size);
  for (int request = 0; request < 8 && !wire.empty(); ++request) {
    const auto parsed = glint::server::ParseRequestBytes(wire, options);
    if (parsed.consumed > wire.size()) std::abort();
    if (parsed.request) {
      if (parsed.request->body.size() > options.max_body_bytes) std::abort();
      if (parsed.request->method.empty()) std::abort();
      if (parsed.request->path.size() > parsed.request->target.size()) std::abort();
      // CheckFraming (issue 37): whatever is dispatched has a framing the parser and the server agree on.
      std::string encoding(parsed.request->Header("Transfer-Encoding"));
      for (char& c : encoding) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (encoding.find(',') != std::string::npos || encoding.find("identity") != std::string::npos) std::abort();
      (void)parsed.request->Header("Content-Length");
      (void)glint::server::EscapeForLog(parsed.request->path);
    } else if (!parsed.incomplete) {
      const int status = parsed.failure.status;
      if (status != 0 && status != 400 && status != 413 && status != 417 && status != 431) std::abort();
      return 0;
    }
    if (parsed.incomplete || parsed.consumed == 0) return 0;
    wire.remove_prefix(parsed.consumed);
  }
  return 0;
}
