// One HTTP/1.1 exchange with a backend, on the calling (worker) thread: connect, send the request, read the
// response's head, then its body piece by piece as it arrives (an SSE stream is relayed as it comes). Boost.Beast
// over a private io_context, run in slices of kSlice so that the caller's `keep_going` (is the client still
// there?) and the deadlines are checked while waiting: a client that leaves closes the backend connection within
// a slice, which is how the backend learns to cancel its generation.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "router/backend_url.h"

namespace glint::router {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct UpstreamRequest {
  std::string method;
  std::string target;  // path and query, as the client sent them
  Headers headers;     // besides Host and Content-Length, which the call sets
  std::string body;
};

struct UpstreamTimeouts {
  double connect_seconds = 5;
  // No byte from the backend for this long (a hung server; a generation still running sends its tokens, and a
  // non-streaming one that runs longer needs a larger value: --backend-timeout).
  double idle_seconds = 600;
};

class UpstreamCall {
 public:
  static constexpr std::chrono::milliseconds kSlice{50};
  using KeepGoing = std::function<bool()>;

  UpstreamCall(const BackendUrl& url, UpstreamTimeouts timeouts);
  ~UpstreamCall();
  UpstreamCall(const UpstreamCall&) = delete;
  UpstreamCall& operator=(const UpstreamCall&) = delete;

  // Connects, sends `request` and reads the response head. An error (kUnavailable) means no response arrived: the
  // connection failed, the backend closed it, or a deadline passed; kCancelled-like errors when `keep_going` said
  // stop are kFailedPrecondition.
  Status Start(const UpstreamRequest& request, const KeepGoing& keep_going);

  int status() const { return status_; }
  const Headers& headers() const { return headers_; }
  std::string_view Header(std::string_view name) const;  // case-insensitive; "" when absent
  std::optional<uint64_t> content_length() const { return content_length_; }

  // The next piece of the body (de-chunked), at most 64 KiB; empty once the body is complete (then done()).
  Result<std::string> ReadSome(const KeepGoing& keep_going);
  bool done() const;
  // The whole body; an error beyond `limit` bytes.
  Result<std::string> ReadAll(size_t limit, const KeepGoing& keep_going);
  // Closes the connection (the backend sees the client leave). Idempotent.
  void Close();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int status_ = 0;
  Headers headers_;
  std::optional<uint64_t> content_length_;
};

}  // namespace glint::router
