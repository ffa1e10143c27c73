#include "router/backend_url.h"

#include <charconv>

namespace glint::router {
namespace {

constexpr std::string_view kExpected = " (expected http://host:port, e.g. http://127.0.0.1:8080)";

Result<int> ParsePort(std::string_view url, std::string_view text) {
  int port = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || port < 1 || port > 65535) {
    return InvalidArgument("backend URL '", url, "' has port '", text, "': expected an integer in [1, 65535]");
  }
  return port;
}

}  // namespace

Result<BackendUrl> ParseBackendUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) {
    if (url.starts_with("https://")) {
      return InvalidArgument("backend URL '", url, "': https is not supported (the router speaks plain HTTP to ",
                             "its backends)", kExpected);
    }
    return InvalidArgument("backend URL '", url, "' does not start with http://", kExpected);
  }
  std::string_view authority = url.substr(kScheme.size());
  if (authority.ends_with('/')) authority.remove_suffix(1);
  if (authority.find_first_of("/?#") != std::string_view::npos) {
    return InvalidArgument("backend URL '", url, "' has a path, query or fragment", kExpected);
  }
  if (authority.find('@') != std::string_view::npos) {
    return InvalidArgument("backend URL '", url, "' carries credentials; the router forwards each client's own");
  }
  BackendUrl parsed;
  std::string_view port_text;
  if (authority.starts_with('[')) {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgument("backend URL '", url, "' has an unclosed '['");
    parsed.host = std::string(authority.substr(1, close - 1));
    const std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && !rest.starts_with(':')) {
      return InvalidArgument("backend URL '", url, "' has text after ']'", kExpected);
    }
    if (!rest.empty()) port_text = rest.substr(1);
    if (rest == ":") port_text = ":";  // "[::1]:" names no port: refused below
  } else {
    const size_t colon = authority.find(':');
    parsed.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
    if (colon != std::string_view::npos && port_text.empty()) port_text = ":";
  }
  if (parsed.host.empty()) return InvalidArgument("backend URL '", url, "' has no host", kExpected);
  if (!port_text.empty()) {
    GLINT_ASSIGN_OR_RETURN(parsed.port, ParsePort(url, port_text));
  }
  const bool ipv6 = parsed.host.find(':') != std::string::npos;
  parsed.text = StrCat("http://", ipv6 ? "[" : "", parsed.host, ipv6 ? "]" : "", ":", parsed.port);
  return parsed;
}

}  // namespace glint::router
