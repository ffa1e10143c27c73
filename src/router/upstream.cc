#include "router/upstream.h"

#include <poll.h>
#include <strings.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <limits>

namespace glint::router {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using BoostError = boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMaxResponseHeaderBytes = 64 << 10;
constexpr size_t kPieceBytes = 64 << 10;

Clock::time_point After(double seconds) {
  return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, seconds) * 1000));
}

}  // namespace

struct UpstreamConnection {
  asio::io_context io;
  beast::tcp_stream stream{io};
  Clock::time_point idle_since;
};

namespace {

// A connection left idle is readable only when the backend closed it (FIN, RST) or sent what nobody asked for.
bool StillOpen(UpstreamConnection& connection) {
  pollfd entry{connection.stream.socket().native_handle(), POLLIN, 0};
  return ::poll(&entry, 1, 0) == 0;
}

}  // namespace

UpstreamPool::UpstreamPool(size_t max_idle, double max_idle_seconds)
    : max_idle_(max_idle), max_idle_seconds_(max_idle_seconds) {}

UpstreamPool::~UpstreamPool() = default;

std::unique_ptr<UpstreamConnection> UpstreamPool::Take() {
  const Clock::time_point oldest =
      Clock::now() - std::chrono::milliseconds(static_cast<int64_t>(max_idle_seconds_ * 1000));
  std::lock_guard<std::mutex> lock(mutex_);
  while (!idle_.empty()) {  // newest first: the least likely to have been closed
    std::unique_ptr<UpstreamConnection> connection = std::move(idle_.back());
    idle_.pop_back();
    if (connection->idle_since >= oldest && StillOpen(*connection)) {
      reused_.fetch_add(1);
      return connection;
    }
  }
  return nullptr;
}

void UpstreamPool::Give(std::unique_ptr<UpstreamConnection> connection) {
  connection->idle_since = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  idle_.push_back(std::move(connection));
  if (idle_.size() > max_idle_) idle_.pop_front();  // the oldest goes (closed by its destructor)
}

bool IsIdempotentMethod(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS" || method == "PUT" || method == "DELETE";
}

class UpstreamCall::Impl {
 public:
  Impl(const BackendUrl& url, UpstreamTimeouts timeouts, UpstreamPool* pool)
      : url(url), timeouts(timeouts), pool(pool) {}

  // Runs the loop until the operation in flight has finished. The connection is closed (which finishes it with an
  // error) when `keep_going` says the client left or `deadline` passes.
  Status Wait(const bool& finished, const BoostError& error, double seconds, const KeepGoing& keep_going,
              std::string_view what) {
    const Clock::time_point deadline = After(seconds);
    bool client_left = false;
    bool timed_out = false;
    while (!finished) {
      connection->io.restart();
      connection->io.run_for(kSlice);
      if (finished || client_left || timed_out) continue;
      if (keep_going && !keep_going()) {
        client_left = true;
        Close();
      } else if (Clock::now() >= deadline) {
        timed_out = true;
        Close();
      }
    }
    if (client_left) return Broken(FailedPrecondition("the client left (", what, ")"));
    if (timed_out) return Broken(Unavailable(what, ": nothing happened within ", seconds, " s"));
    if (error) return Broken(Unavailable(what, " failed: ", error.message()));
    return Status::Ok();
  }

  // A pooled connection (true), or a new one connected (false; always with `fresh`).
  Result<bool> TakeOrConnect(const KeepGoing& keep_going, bool fresh) {
    NewParser();
    connection = pool != nullptr && !fresh ? pool->Take() : nullptr;
    if (connection != nullptr) return true;
    connection = std::make_unique<UpstreamConnection>();
    GLINT_RETURN_IF_ERROR(Connect(keep_going));
    if (pool != nullptr) pool->CountOpened();
    return false;
  }

  Status Connect(const KeepGoing& keep_going) {
    bool finished = false;
    BoostError error;
    tcp::resolver::results_type endpoints;
    tcp::resolver resolver(connection->io);
    resolver.async_resolve(url.host, std::to_string(url.port), [&](BoostError e, tcp::resolver::results_type results) {
      error = e;
      endpoints = std::move(results);
      finished = true;
    });
    GLINT_RETURN_IF_ERROR(Wait(finished, error, timeouts.connect_seconds, keep_going, "resolving the host"));
    finished = false;
    connection->stream.async_connect(endpoints, [&](BoostError e, const tcp::endpoint&) {
      error = e;
      finished = true;
    });
    GLINT_RETURN_IF_ERROR(Wait(finished, error, timeouts.connect_seconds, keep_going, "connecting"));
    BoostError ignored;
    connection->stream.socket().set_option(tcp::no_delay(true), ignored);
    return Status::Ok();
  }

  Status Send(const UpstreamRequest& request, const KeepGoing& keep_going) {
    http::request<http::string_body> message;
    const http::verb verb = http::string_to_verb(request.method);
    if (verb == http::verb::unknown) {
      message.method_string(request.method);
    } else {
      message.method(verb);
    }
    message.target(request.target);
    message.version(11);
    message.set(http::field::host,
                StrCat(url.host.find(':') == std::string::npos ? url.host : "[" + url.host + "]", ":", url.port));
    for (const auto& [name, value] : request.headers) message.insert(name, value);
    message.body() = request.body;
    if (!request.body.empty() || request.method == "POST" || request.method == "PUT") message.prepare_payload();
    if (request.method == "HEAD") parser->skip(true);
    bool finished = false;
    BoostError error;
    http::async_write(connection->stream, message, [&](BoostError e, size_t) {
      error = e;
      finished = true;
    });
    return Wait(finished, error, timeouts.idle_seconds, keep_going, "sending the request");
  }

  Status ReadHead(const KeepGoing& keep_going) {
    bool finished = false;
    BoostError error;
    http::async_read_header(connection->stream, buffer, *parser, [&](BoostError e, size_t) {
      error = e;
      finished = true;
    });
    return Wait(finished, error, timeouts.idle_seconds, keep_going, "waiting for the response");
  }

  Result<std::string> ReadSome(const KeepGoing& keep_going) {
    std::string out;
    while (out.empty() && !parser->is_done()) {
      auto& body = parser->get().body();
      body.data = piece.data();
      body.size = piece.size();
      bool finished = false;
      BoostError error;
      http::async_read_some(connection->stream, buffer, *parser, [&](BoostError e, size_t) {
        error = e == http::error::need_buffer ? BoostError() : e;  // a full piece is not an error
        finished = true;
      });
      GLINT_RETURN_IF_ERROR(Wait(finished, error, timeouts.idle_seconds, keep_going, "reading the response body"));
      out.append(piece.data(), piece.size() - body.size);
    }
    return out;
  }

  void Close() {
    broken = true;
    if (connection == nullptr) return;
    BoostError ignored;
    connection->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    connection->stream.socket().close(ignored);
  }

  // Back to the pool when nothing of this exchange is left on the connection and the backend keeps it open.
  void Finish() {
    const bool reusable = pool != nullptr && connection != nullptr && !broken && parser && parser->is_done() &&
                          parser->keep_alive() && buffer.size() == 0;
    if (!reusable) return Close();
    pool->Give(std::move(connection));
  }

  // A fresh parser for the next response (a retry starts over).
  void NewParser() {
    parser.emplace();
    buffer.consume(buffer.size());
    broken = false;
    parser->header_limit(kMaxResponseHeaderBytes);
    // Bounded by the caller: ReadAll's limit, or a stream relayed as it comes. (Not boost::none: Beast 1.74
    // compares a Content-Length against the optional itself, and any length is "greater" than none.)
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
  }

  const BackendUrl url;
  const UpstreamTimeouts timeouts;
  UpstreamPool* const pool;
  std::unique_ptr<UpstreamConnection> connection;
  bool broken = false;  // an operation failed or the connection was closed: never pooled
  beast::flat_buffer buffer;
  std::optional<http::response_parser<http::buffer_body>> parser;
  std::array<char, kPieceBytes> piece{};

 private:
  Status Broken(Status status) {
    broken = true;
    return status;
  }
};

UpstreamCall::UpstreamCall(const BackendUrl& url, UpstreamTimeouts timeouts, UpstreamPool* pool)
    : impl_(std::make_unique<Impl>(url, timeouts, pool)) {}

UpstreamCall::~UpstreamCall() { impl_->Finish(); }

Status UpstreamCall::Start(const UpstreamRequest& request, const KeepGoing& keep_going) {
  for (int attempt = 0;; ++attempt) {
    const Clock::time_point start = Clock::now();
    GLINT_ASSIGN_OR_RETURN(reused_, impl_->TakeOrConnect(keep_going, /*fresh=*/attempt > 0));
    connect_seconds_ = std::chrono::duration<double>(Clock::now() - start).count();
    Status sent = impl_->Send(request, keep_going);
    if (sent.ok()) sent = impl_->ReadHead(keep_going);
    if (sent.ok()) break;
    impl_->Close();
    // A pooled connection the backend had closed (a restart; a keep-alive that ran out as it was taken): nothing of
    // the request was taken, or an idempotent one may be taken twice. Anything else fails the call.
    const bool client_left = sent.code() == ErrorCode::kFailedPrecondition;
    if (!reused_ || attempt > 0 || client_left || !IsIdempotentMethod(request.method)) return sent;
  }
  const auto& head = impl_->parser->get();
  status_ = static_cast<int>(head.result_int());
  for (const auto& field : head.base()) headers_.emplace_back(field.name_string(), field.value());
  if (auto length = impl_->parser->content_length()) content_length_ = *length;
  return Status::Ok();
}

std::string_view UpstreamCall::Header(std::string_view name) const {
  for (const auto& [key, value] : headers_) {
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0) return value;
  }
  return "";
}

Result<std::string> UpstreamCall::ReadSome(const KeepGoing& keep_going) { return impl_->ReadSome(keep_going); }

bool UpstreamCall::done() const { return impl_->parser->is_done(); }

Result<std::string> UpstreamCall::ReadAll(size_t limit, const KeepGoing& keep_going) {
  std::string body;
  while (!done()) {
    GLINT_ASSIGN_OR_RETURN(std::string piece, ReadSome(keep_going));
    body += piece;
    if (body.size() > limit) return ResourceExhausted("the response body is over ", limit, " bytes");
  }
  return body;
}

void UpstreamCall::Close() { impl_->Close(); }

void UpstreamCall::Finish() { impl_->Finish(); }

}  // namespace glint::router
