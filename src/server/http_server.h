// The OpenAI-compatible HTTP server (docs/server.md): routes, access control, limits, streaming, shutdown.
//
// Threads: cpp-httplib serves each connection on a thread of a bounded pool (ConnectionPool in http_server.cc).
// That thread parses and validates the request, renders the chat template and tokenizes, then hands token ids to
// the backend (whose own thread runs the model) and waits for outputs, writing SSE events as they come. Only this
// layer touches JSON.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/backend.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace glint::server {

struct ServerOptions {
  std::string host = "127.0.0.1";                    // loopback unless told otherwise
  int port = 8080;                                   // 0: any free port (see HttpServer::port)
  std::vector<std::string> model_names = {"glint"};  // the first is reported by /v1/models and in responses
  std::string api_key;  // non-empty: every endpoint but /health needs "Authorization: Bearer <key>"
  std::vector<std::string> allowed_origins;  // CORS; empty: no CORS headers; "*" allows any origin
  size_t max_body_bytes = size_t{16} << 20;
  size_t max_header_bytes = size_t{32} << 10;  // all request headers together (each line: at most 8 KiB)
  int max_connections = 256;           // connections served at once; more wait (up to as many again), then get 503
  int64_t max_queued_sequences = 512;  // sequences that may wait beyond what the backend runs; then 429
  int read_timeout_seconds = 30;
  int write_timeout_seconds = 30;
  int keep_alive_seconds = 5;
  double shutdown_grace_seconds = 30;  // SIGTERM: in-flight requests get this long, then they are cancelled
  bool log_requests = true;            // one line per request; never the prompt text unless log_prompts
  bool log_prompts = false;
  bool webui = true;  // the chat page at / (webui.h); --no-webui turns it off
  RequestPolicy policy;
  jinja::RenderLimits template_limits;
};

class HttpServer {
 public:
  // `chat_template` may be null: chat endpoints then answer 400 (the checkpoint has no template). All references
  // must outlive the server.
  HttpServer(ServerOptions options, const Tokenizer& tokenizer, const ChatTemplate* chat_template,
             GenerationBackend& backend);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port. Errors: the address is taken, the host does not resolve.
  Status Bind();
  int port() const;
  // Serves until Shutdown() has drained the server. Returns once every connection is closed.
  Status Run();
  // From any thread (e.g. the SIGTERM handler's): stop accepting, let in-flight requests finish for up to
  // shutdown_grace_seconds, cancel what is left; Run() then returns. Idempotent.
  void Shutdown();

  const ServerMetrics& metrics() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Constant-time comparison (the API key check must not leak, through timing, how much of a guess was right).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace glint::server
