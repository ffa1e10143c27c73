// A backend's address as given on the command line (`--replica http://host:port`): what the router connects to.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace glint::router {

struct BackendUrl {
  std::string host;  // a name or an address; IPv6 without its brackets
  int port = 80;
  std::string text;  // "http://host:port", as metrics and messages name the backend
};

// `http://host[:port][/]`. The router speaks plain HTTP to its backends (they sit on a private network or
// loopback), so https, a path, a query or credentials are refused with a message saying what was expected.
Result<BackendUrl> ParseBackendUrl(std::string_view url);

}  // namespace glint::router
