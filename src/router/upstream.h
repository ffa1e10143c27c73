// One HTTP/1.1 exchange with a backend, on the calling (worker) thread: connect (or take an idle keep-alive
// connection from the backend's pool), send the request, read the response's head, then its body piece by piece as
// it arrives (an SSE stream is relayed as it comes). Boost.Beast over the connection's own io_context, run in slices
// of kSlice so that the caller's `keep_going` (is the client still there?) and the deadlines are checked while
// waiting: a client that leaves closes the backend connection within a slice, which is how the backend learns to
// cancel its generation.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
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

// A TCP connection to a backend with its own event loop (upstream.cc).
struct UpstreamConnection;

// The idle keep-alive connections to one backend (docs/router.md "Connections to backends"): a call takes one
// instead of connecting, and gives it back once it read its response whole and the backend keeps the connection
// open. At most `max_idle` are kept, each for at most `max_idle_seconds` — under a glint server's keep-alive of 5 s,
// so that the backend does not close one as it is taken; one the backend closed anyway (readable while idle: its
// FIN) is dropped when taken. Thread-safe.
class UpstreamPool {
 public:
  explicit UpstreamPool(size_t max_idle = 16, double max_idle_seconds = 2);
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // An idle connection still open, or null.
  std::unique_ptr<UpstreamConnection> Take();
  void Give(std::unique_ptr<UpstreamConnection> connection);
  int64_t opened() const { return opened_.load(); }  // connections made for calls that use this pool
  int64_t reused() const { return reused_.load(); }  // calls that took an idle connection
  void CountOpened() { opened_.fetch_add(1); }

 private:
  const size_t max_idle_;
  const double max_idle_seconds_;
  std::mutex mutex_;
  std::deque<std::unique_ptr<UpstreamConnection>> idle_;  // guarded by mutex_; oldest first
  std::atomic<int64_t> opened_{0}, reused_{0};
};

// GET, HEAD, OPTIONS, PUT and DELETE (RFC 9110 §9.2.2): sent again on a fresh connection when a reused one turns
// out dead. A POST is not (the backend may have started a generation or an upload before the connection died).
bool IsIdempotentMethod(std::string_view method);

class UpstreamCall {
 public:
  static constexpr std::chrono::milliseconds kSlice{50};
  using KeepGoing = std::function<bool()>;

  // `pool` (optional, outlives the call): where an idle connection is taken from and given back to.
  UpstreamCall(const BackendUrl& url, UpstreamTimeouts timeouts, UpstreamPool* pool = nullptr);
  ~UpstreamCall();
  UpstreamCall(const UpstreamCall&) = delete;
  UpstreamCall& operator=(const UpstreamCall&) = delete;

  // Connects (or takes an idle connection from the pool), sends `request` and reads the response head. An error
  // (kUnavailable) means no response arrived: the connection failed, the backend closed it, or a deadline passed;
  // kCancelled-like errors when `keep_going` said stop are kFailedPrecondition. A reused connection that fails
  // before the response head is replaced by a fresh one, once, for an idempotent request (IsIdempotentMethod).
  Status Start(const UpstreamRequest& request, const KeepGoing& keep_going);

  int status() const { return status_; }
  double connect_seconds() const { return connect_seconds_; }  // Start's connect (resolving the host included)
  bool reused() const { return reused_; }                      // the response came on a pooled connection
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
  // Ends the call: a connection whose response was read whole, and that the backend keeps open, goes back to the
  // pool; any other is closed. The destructor does it.
  void Finish();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int status_ = 0;
  double connect_seconds_ = 0;
  bool reused_ = false;
  Headers headers_;
  std::optional<uint64_t> content_length_;
};

}  // namespace glint::router
