// The server's transport-independent view of HTTP: a request that has fully arrived (headers and body within
// their limits), the response a handler fills in, and the handler interface the transport (http_transport.h)
// calls. The route handlers (http_server.cc) see only these types, so the event loop underneath can change
// without touching them.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/generation_session.h"
#include "server/transport_gauges.h"

namespace glint::server {

struct HttpRequest {
  std::string method;  // as sent ("GET", "POST", ...)
  std::string target;  // as sent: path and query
  std::string path;    // target up to '?', not percent-decoded (routes are matched on the raw bytes)
  int version = 11;    // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote_address;
  int remote_port = 0;
  // Set only on the requests a batch job runs through the handlers (batch_jobs.h), never from the network: they
  // run at batch priority in the engine's scheduler.
  bool batch_job = false;

  // The first header of that name (case-insensitive), or "".
  std::string_view Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type/Length and Connection
  std::string content_type;
  std::string body;
  // A streamed response (SSE): the transport sends the status and headers with chunked encoding, then calls this
  // on the request's worker thread; each connection.Write() is one chunk. It returns once the response is
  // complete (or the client is gone) and leaves a note for the request log in `log_note`.
  std::function<void(ClientConnection& connection, std::string& log_note)> stream;
  // Appended to the request log line (token counts, an error message): never prompt text.
  std::string log_note;
  // Close the connection after this response (also set by the transport while shutting down).
  bool close = false;

  void SetHeader(std::string name, std::string value);
  void SetContent(std::string content, std::string type);
};

// What the transport calls for each request. Handle() runs on a worker thread unless RunsOnEventLoop() says the
// request is cheap (no tokenization, no waiting); it may block. `connection` says whether the client is still
// there (its Write() is not for the response: the transport writes that).
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual bool RunsOnEventLoop(const HttpRequest& request) const = 0;
  // The largest body this request may have, decided from its head before the body is read (413 beyond); 0: the
  // transport's max_body_bytes. A limit above max_body_bytes needs TransportOptions::max_any_body_bytes as high.
  virtual size_t BodyLimit(const HttpRequest& head) const { return 0; }
  virtual void Handle(const HttpRequest& request, HttpResponse& response, ClientConnection& connection) = 0;
  // Every response the transport sends, the ones it makes itself (413, 431, 503 ...) included: for the log and
  // the metrics. `seconds`: arrival of the request's first byte → last byte written.
  virtual void Finished(const HttpRequest& request, const HttpResponse& response, double seconds) = 0;
  // A response the transport makes without calling Handle (limits, shutdown, connection cap, a handler that
  // threw): the handler gives it its body (OpenAI-shaped error JSON). `request` is what arrived of it (its
  // method and path may be empty).
  virtual HttpResponse ErrorResponse(const HttpRequest& request, int status, std::string_view message,
                                     std::string_view code) = 0;
};

// `text` fit for one log line: printable ASCII and valid UTF-8 stay, a backslash becomes "\\", every other byte
// (control characters, CR, LF, NUL, DEL, bytes of invalid UTF-8) becomes "\xHH". So a client cannot forge lines.
std::string EscapeForLog(std::string_view text);

// The status line's reason phrase for `status`.
std::string_view ReasonPhrase(int status);

}  // namespace glint::server
