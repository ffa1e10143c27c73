// libFuzzer target: what glint router reads from client requests and backend answers (router/request_keys.h) and
// from its command line (router/backend_url.h). Input: a path line, then a body. Ids taken from a request or a
// response must be non-empty, bounded and free of '/', so they can never widen a route; a parsed URL names a port
// in [1, 65535] and a host. Crashes, sanitizer reports and hangs (deep nesting) are failures.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "router/backend_url.h"
#include "router/request_keys.h"

namespace {

void CheckId(std::string_view id) {
  if (id.empty() || id.size() > 256 || id.find('/') != std::string_view::npos) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace glint::router;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string_view path = input.substr(0, newline);
  const std::string_view body = newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);
  (void)ConversationPrefixKey(path, body);
  for (std::string_view method : {"GET", "POST", "DELETE"}) {
    if (auto stateful = RequestStatefulId(method, path, body)) {
      CheckId(stateful->id);
      if (!stateful->probe_path.starts_with("/v1/")) std::abort();
    }
  }
  for (const std::string& id : ResponseIds(body)) CheckId(id);
  if (auto id = StreamedResponseId(body)) CheckId(*id);
  if (auto url = ParseBackendUrl(path); url.ok()) {
    if (url->host.empty() || url->port < 1 || url->port > 65535 || !url->text.starts_with("http://")) std::abort();
  }
  return 0;
}
