#include "router/upstream.h"

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

class UpstreamCall::Impl {
 public:
  Impl(const BackendUrl& url, UpstreamTimeouts timeouts) : url(url), timeouts(timeouts), stream(io) {
    parser.header_limit(kMaxResponseHeaderBytes);
    // Bounded by the caller: ReadAll's limit, or a stream relayed as it comes. (Not boost::none: Beast 1.74
    // compares a Content-Length against the optional itself, and any length is "greater" than none.)
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  }

  // Runs the loop until the operation in flight has finished. The connection is closed (which finishes it with an
  // error) when `keep_going` says the client left or `deadline` passes.
  Status Wait(const bool& finished, const BoostError& error, double seconds, const KeepGoing& keep_going,
              std::string_view what) {
    const Clock::time_point deadline = After(seconds);
    bool client_left = false;
    bool timed_out = false;
    while (!finished) {
      io.restart();
      io.run_for(kSlice);
      if (finished || client_left || timed_out) continue;
      if (keep_going && !keep_going()) {
        client_left = true;
        Close();
      } else if (Clock::now() >= deadline) {
        timed_out = true;
        Close();
      }
    }
    if (client_left) return FailedPrecondition("the client left (", what, ")");
    if (timed_out) return Unavailable(what, ": nothing happened within ", seconds, " s");
    if (error) return Unavailable(what, " failed: ", error.message());
    return Status::Ok();
  }

  Status Connect(const KeepGoing& keep_going) {
    bool finished = false;
    BoostError error;
    tcp::resolver::results_type endpoints;
    tcp::resolver resolver(io);
    resolver.async_resolve(url.host, std::to_string(url.port), [&](BoostError e, tcp::resolver::results_type results) {
      error = e;
      endpoints = std::move(results);
      finished = true;
    });
    GLINT_RETURN_IF_ERROR(Wait(finished, error, timeouts.connect_seconds, keep_going, "resolving the host"));
    finished = false;
    stream.async_connect(endpoints, [&](BoostError e, const tcp::endpoint&) {
      error = e;
      finished = true;
    });
    GLINT_RETURN_IF_ERROR(Wait(finished, error, timeouts.connect_seconds, keep_going, "connecting"));
    BoostError ignored;
    stream.socket().set_option(tcp::no_delay(true), ignored);
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
    if (request.method == "HEAD") parser.skip(true);
    bool finished = false;
    BoostError error;
    http::async_write(stream, message, [&](BoostError e, size_t) {
      error = e;
      finished = true;
    });
    return Wait(finished, error, timeouts.idle_seconds, keep_going, "sending the request");
  }

  Status ReadHead(const KeepGoing& keep_going) {
    bool finished = false;
    BoostError error;
    http::async_read_header(stream, buffer, parser, [&](BoostError e, size_t) {
      error = e;
      finished = true;
    });
    return Wait(finished, error, timeouts.idle_seconds, keep_going, "waiting for the response");
  }

  Result<std::string> ReadSome(const KeepGoing& keep_going) {
    std::string out;
    while (out.empty() && !parser.is_done()) {
      auto& body = parser.get().body();
      body.data = piece.data();
      body.size = piece.size();
      bool finished = false;
      BoostError error;
      http::async_read_some(stream, buffer, parser, [&](BoostError e, size_t) {
        error = e == http::error::need_buffer ? BoostError() : e;  // a full piece is not an error
        finished = true;
      });
      GLINT_RETURN_IF_ERROR(Wait(finished, error, timeouts.idle_seconds, keep_going, "reading the response body"));
      out.append(piece.data(), piece.size() - body.size);
    }
    return out;
  }

  void Close() {
    BoostError ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.socket().close(ignored);
  }

  const BackendUrl url;
  const UpstreamTimeouts timeouts;
  asio::io_context io;
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  std::array<char, kPieceBytes> piece{};
};

UpstreamCall::UpstreamCall(const BackendUrl& url, UpstreamTimeouts timeouts)
    : impl_(std::make_unique<Impl>(url, timeouts)) {}

UpstreamCall::~UpstreamCall() { impl_->Close(); }

Status UpstreamCall::Start(const UpstreamRequest& request, const KeepGoing& keep_going) {
  GLINT_RETURN_IF_ERROR(impl_->Connect(keep_going));
  GLINT_RETURN_IF_ERROR(impl_->Send(request, keep_going));
  GLINT_RETURN_IF_ERROR(impl_->ReadHead(keep_going));
  const auto& head = impl_->parser.get();
  status_ = static_cast<int>(head.result_int());
  for (const auto& field : head.base()) headers_.emplace_back(field.name_string(), field.value());
  if (auto length = impl_->parser.content_length()) content_length_ = *length;
  return Status::Ok();
}

std::string_view UpstreamCall::Header(std::string_view name) const {
  for (const auto& [key, value] : headers_) {
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0) return value;
  }
  return "";
}

Result<std::string> UpstreamCall::ReadSome(const KeepGoing& keep_going) { return impl_->ReadSome(keep_going); }

bool UpstreamCall::done() const { return impl_->parser.is_done(); }

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

}  // namespace glint::router
