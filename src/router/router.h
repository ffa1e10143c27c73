// glint router (docs/router.md): one address for clients in front of several `glint serve` backends. Every API
// glint serves passes through unchanged; the router picks the backend (prefix affinity, least loaded, sticky ids),
// names a prefill server to a decode server (X-Glint-Prefill), health-checks every backend, retries a request
// whose backend failed before anything reached the client, and reports per-backend figures on /metrics.
//
// Threads: the server's HTTP transport (server/http_transport.h) owns the client sockets on one event loop; each
// proxied request runs on a worker thread, which talks to its backend through an UpstreamCall (upstream.h) and
// relays a stream through the transport's bounded stream buffer (backpressure: a slow client slows the reads from
// the backend). One more thread polls the backends' /health.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "router/placement.h"
#include "router/upstream.h"
#include "server/http_transport.h"

namespace glint::router {

struct BackendSpec {
  BackendUrl url;
  BackendRole role = BackendRole::kReplica;
};

struct RouterOptions {
  std::vector<BackendSpec> backends;
  server::TransportOptions transport;  // host, port and the client-side limits
  std::string api_key;                 // non-empty: every endpoint but /health needs it (forwarded as sent)
  // Prompts shorter than this many tokens are prefilled by the decode server itself (sent to decode servers as
  // X-Glint-Local-Prefill-Below); 0 sends every prompt to a prefill server. Unset: no header, so each decode server
  // applies its own --local-prefill-below.
  std::optional<int64_t> local_prefill_below;
  double health_interval_seconds = 1;
  UpstreamTimeouts upstream;
  size_t affinity_capacity = 65536;  // prefix keys remembered
  // A remembered prefix's backend with this many more outstanding requests than the least loaded one is passed
  // over (BackendPool::ChooseServing); 0: affinity wins whatever the load.
  int64_t affinity_max_lead = 8;
  size_t id_capacity = 65536;  // response, file and batch ids remembered
  // A response with a Content-Length up to this many bytes is read whole before it is sent (so a retry is still
  // possible and the ids it creates can be read); larger ones, and every SSE stream, are relayed as they arrive.
  size_t max_buffered_response_bytes = size_t{16} << 20;
  // POST /v1/files bodies may be this large (glint serve's own default limit for one upload, OpenAI's batch input
  // limit); every other body is held to transport.max_body_bytes.
  size_t max_upload_bytes = size_t{200} << 20;
  double shutdown_grace_seconds = 30;
  bool log_requests = true;
};

// The backends from the command line's lists, checked: at least one backend; --prefill and --decode only
// together; no URL twice.
Result<std::vector<BackendSpec>> BackendsFromFlags(const std::vector<std::string>& prefill,
                                                   const std::vector<std::string>& decode,
                                                   const std::vector<std::string>& replica);

class Router {
 public:
  explicit Router(RouterOptions options);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Binds the client address and checks every backend's /health once (so the first requests are placed well).
  Status Bind();
  int port() const;
  // Serves until Shutdown() has drained the router.
  Status Run();
  // From any thread: stop accepting, let requests in progress finish for up to shutdown_grace_seconds, then close
  // every connection (their backend requests are closed too, which cancels them). Blocks until then.
  void Shutdown();

  class Handler;  // the routes (router.cc)

 private:
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<server::HttpTransport> transport_;
};

}  // namespace glint::router
