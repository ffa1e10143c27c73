// The HTTP/1.1 transport of glint serve: one Boost.Asio event loop (io_context on the thread that calls Run())
// owns every socket; Boost.Beast's parser reads requests with their limits enforced while the bytes arrive.
// Handlers that may block (tokenizing, waiting for generation, streaming) run on a WorkerPool; cheap ones (health,
// metrics, the chat page, errors) run on the loop itself. Why this shape, and every limit: docs/server.md
// "Connections and limits".
//
// A connection is in one phase at a time, each with its own deadline:
//   idle     waiting for the first byte of a request        idle_timeout (keep-alive)
//   headers  first byte → end of the headers                header_timeout, max_header_bytes (431)
//   body     end of the headers → end of the body           body_timeout, max_body_bytes (413, chunked too)
//   handling the handler runs; the socket is watched so that a client that leaves is seen at once
//   writing  each write must progress within write_timeout; a stream may hold at most stream_buffer_bytes that
//            the client has not taken, beyond which the writer waits up to write_timeout, then the stream ends
// A client that half-closes (shutdown(SHUT_WR)) after its request is still answered: end-of-file on the socket
// is followed by a `100 Continue` probe, and only a reset (a peer that really closed) counts as gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/http_message.h"

namespace glint::server {

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                               // 0: any free port
  int max_connections = 4096;                    // open connections; one more is answered 503 and closed
  size_t max_header_bytes = size_t{32} << 10;    // request line and headers together (431 beyond)
  size_t max_body_bytes = size_t{16} << 20;      // after de-chunking (413 beyond)
  size_t max_any_body_bytes = 0;                 // the largest HttpHandler::BodyLimit may allow (0: max_body_bytes)
  double idle_timeout_seconds = 5;               // keep-alive: between requests
  double header_timeout_seconds = 10;            // first byte of a request → end of its headers (408)
  double body_timeout_seconds = 30;              // end of the headers → end of the body (408)
  double write_timeout_seconds = 30;             // a write that makes no progress, or a stream buffer that stays full
  size_t stream_buffer_bytes = size_t{1} << 20;  // per stream: written by the handler, not yet sent
  size_t worker_threads = 1024;                  // blocking handlers at once; more wait in order
};

class HttpTransport {
 public:
  // `handler` and `gauges` must outlive the transport.
  HttpTransport(TransportOptions options, HttpHandler& handler, TransportGauges& gauges);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens. Errors: the address is taken, the host is not an address.
  Status Bind();
  int port() const;
  // Runs the event loop on this thread until Stop().
  Status Run();
  // From any thread: stop accepting; close idle connections and those still sending a request; a request that
  // arrives from now on gets 503; responses in progress finish, then their connections close.
  void BeginShutdown();
  // From any thread: close every connection; Run() returns.
  void Stop();
  // Connections with a request in progress (0 once BeginShutdown's work is done).
  int64_t busy() const { return gauges_.requests.load(); }

  class Impl;  // the loop, the acceptor and the connections (http_transport.cc)

 private:
  TransportGauges& gauges_;
  std::unique_ptr<Impl> impl_;
};

// Raises the soft limit on open files to what `connections` need (or the hard limit); returns the new soft limit.
int64_t RaiseOpenFileLimit(int64_t connections);

}  // namespace glint::server
