// The OpenAI-compatible HTTP server (docs/server.md): routes, access control, limits, streaming, shutdown.
//
// Threads: the transport (http_transport.h) reads and writes every socket on one event loop; a request that may
// block runs on a worker thread, which parses and validates it, renders the chat template and tokenizes, then
// hands token ids to the backend (whose own thread runs the model) and waits for outputs, writing SSE events as
// they come. This file holds the routes; it sees HTTP only through http_message.h. Only this layer touches JSON.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/backend.h"
#include "server/batch_files.h"
#include "server/batch_jobs.h"
#include "server/image_input.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/responses_store.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace glint::server {

// Batch options whose concurrency is left to the server (what its backend runs at once).
inline BatchOptions NoBatchConcurrency() {
  BatchOptions options;
  options.concurrency = 0;
  return options;
}

struct ServerOptions {
  std::string host = "127.0.0.1";                    // loopback unless told otherwise
  int port = 8080;                                   // 0: any free port (see HttpServer::port)
  std::vector<std::string> model_names = {"glint"};  // the first is reported by /v1/models and in responses
  std::string api_key;  // non-empty: every endpoint but /health needs "Authorization: Bearer <key>"
  std::vector<std::string> allowed_origins;        // CORS; empty: no CORS headers; "*" allows any origin
  size_t max_body_bytes = size_t{16} << 20;        // after de-chunking; 413 beyond
  size_t max_header_bytes = size_t{32} << 10;      // request line and headers together; 431 beyond
  int max_connections = 4096;                      // open connections; one more is answered 503 and closed
  int64_t max_queued_sequences = 512;              // sequences that may wait beyond what the backend runs; then 429
  double header_timeout_seconds = 10;              // first byte of a request → end of its headers (408)
  double read_timeout_seconds = 30;                // end of the headers → end of the body (408)
  double write_timeout_seconds = 30;               // a write without progress, or a stream buffer that stays full
  double keep_alive_seconds = 5;                   // idle time between requests on a connection
  size_t stream_buffer_bytes = size_t{256} << 10;  // per stream: events not yet taken by the client
  size_t worker_threads = 1024;                    // requests handled (tokenizing, generating) at once; more wait
  double shutdown_grace_seconds = 30;              // SIGTERM: in-flight requests get this long, then they are cancelled
  // /health answers 503 "stalled" when one engine step has run this long (a blocked read, a hung model) with
  // requests queued (--health-stall-seconds).
  double health_stall_seconds = 60;
  // Prefill/decode disaggregation (docs/disaggregation.md): /health reports the role ("both", "prefill", "decode")
  // and a prefill server's transfer port; a decode server takes the router's X-Glint-Prefill and
  // X-Glint-Local-Prefill-Below headers (other roles ignore them).
  std::string role = "both";
  int transfer_port = 0;
  bool log_requests = true;  // one line per request; never the prompt text unless log_prompts
  bool log_prompts = false;
  bool webui = true;  // the chat page at / (webui.h); --no-webui turns it off
  // A stream that has written nothing for this long gets its API's keep-alive event (Anthropic's ping), so that
  // clients with idle timeouts wait through a long prefill.
  std::chrono::milliseconds stream_keep_alive{5000};
  // Special-token text in message content ("<|user|>") becomes the special token (off: plain text, so a user
  // cannot forge roles or tool calls). --allow-special-tokens-in-content.
  bool allow_special_tokens_in_content = false;
  // Responses API responses kept for previous_response_id and GET /v1/responses/{id} (responses_store.h): the
  // newest up to this many and this many bytes of JSON (--responses-store-max, --responses-store-bytes).
  size_t responses_store_max_responses = 1024;
  size_t responses_store_max_bytes = size_t{64} << 20;
  // Batch jobs (docs/batch.md): where their files live (--batch-dir; created on first use), the Files API's limits,
  // and how batches run (concurrency 0: what the backend runs at once, at most 64).
  std::string batch_dir;
  FileLimits batch_files;
  BatchOptions batches = NoBatchConcurrency();
  RequestPolicy policy;
  jinja::RenderLimits template_limits;
  ImageInputOptions images;  // image_url parts: limits, the processor config, --allowed-local-media-path
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
  // From any thread (e.g. the SIGTERM handler's): stop accepting and close connections that are not being
  // answered (idle keep-alive, slow senders); requests arriving from now on get 503; let in-flight requests finish
  // for up to shutdown_grace_seconds, cancel what is left; Run() then returns. Blocks until then. Idempotent.
  void Shutdown();

  const ServerMetrics& metrics() const;

  // Runs one request through the route of `url` as a batch job's request (batch priority, no HTTP): the status
  // and JSON body a client would have got. `keep_going` false cancels it. `glint batch` runs its lines with this;
  // the server's own batches too.
  BatchResponse ExecuteBatchRequest(const std::string& url, std::string body, const std::function<bool()>& keep_going);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Constant-time comparison (the API key check must not leak, through timing, how much of a guess was right).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace glint::server
