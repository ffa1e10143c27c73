// glint router: one address in front of several `glint serve` backends (docs/router.md). Parses the backend lists
// and limits, binds (loopback unless told otherwise), checks every backend once, and serves until SIGTERM or
// SIGINT, which drain the router and exit 0.
#include <algorithm>

#include "cli/command.h"
#include "cli/stop_signals.h"
#include "router/router.h"

namespace glint::cli {
namespace {

struct RouterFlags {
  std::vector<std::string> prefill, decode, replica;
  router::RouterOptions options;
  bool no_request_log = false;
};

Status RunRouter(RouterFlags& flags) {
  GLINT_ASSIGN_OR_RETURN(flags.options.backends, router::BackendsFromFlags(flags.prefill, flags.decode, flags.replica));
  flags.options.log_requests = !flags.no_request_log;
  flags.options.transport.max_any_body_bytes =
      std::max(flags.options.transport.max_body_bytes, flags.options.max_upload_bytes);
  server::RaiseOpenFileLimit(2 * flags.options.transport.max_connections);  // a client and a backend socket each
  BlockStopSignals();
  router::Router router(flags.options);
  GLINT_RETURN_IF_ERROR(router.Bind());
  // The line tests and scripts wait for (the same shape as glint serve's).
  LogInfo("routing ", flags.options.backends.size(), " backends on http://", flags.options.transport.host, ":",
          router.port());
  Status status;
  {
    StopSignalWatcher watcher([&router] { router.Shutdown(); });
    status = router.Run();
  }
  LogInfo("stopped");
  return status;
}

void AddBackendFlags(CLI::App& command, RouterFlags& flags) {
  command.add_option("--replica", flags.replica,
                     "a `glint serve` (--role both) backend, http://host:port; repeatable: requests are spread by "
                     "conversation prefix and load");
  command.add_option("--decode", flags.decode,
                     "a `glint serve --role decode` backend, http://host:port; repeatable; needs --prefill");
  command.add_option("--prefill", flags.prefill,
                     "a `glint serve --role prefill` backend, http://host:port; repeatable; needs --decode");
  command
      .add_option("--local-prefill-below", flags.options.local_prefill_below,
                  "prompts shorter than this many tokens are prefilled by the decode server itself "
                  "(0: every prompt goes to a prefill server; unset: each decode server's own "
                  "--local-prefill-below)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  command
      .add_option("--health-interval", flags.options.health_interval_seconds,
                  "seconds between /health checks of every backend; a backend that fails one is skipped until "
                  "it passes again")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  command
      .add_option("--backend-connect-timeout", flags.options.upstream.connect_seconds,
                  "seconds to connect to a backend before trying another")
      ->check(CLI::Range(0.01, 600.0))
      ->capture_default_str();
  command
      .add_option("--backend-timeout", flags.options.upstream.idle_seconds,
                  "seconds a backend may send nothing (a non-streamed generation sends nothing until it ends)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  command
      .add_option("--max-remembered-ids", flags.options.id_capacity,
                  "response, file and batch ids remembered with their backend (oldest forgotten first; a "
                  "forgotten id is looked for on every backend)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30))
      ->capture_default_str();
  command
      .add_option("--max-remembered-prefixes", flags.options.affinity_capacity,
                  "conversation prefixes remembered with their backend (oldest forgotten first)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30))
      ->capture_default_str();
  command
      .add_option("--affinity-max-lead", flags.options.affinity_max_lead,
                  "a conversation's backend is passed over for the least loaded one when it has this many more "
                  "requests outstanding (0: the prefix's backend always, while healthy)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
}

void AddClientFlags(CLI::App& command, RouterFlags& flags) {
  server::TransportOptions& transport = flags.options.transport;
  command.add_option("--host", transport.host, "address to bind (loopback by default)")->capture_default_str();
  command.add_option("--port", transport.port, "port to bind (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  command.add_option("--api-key", flags.options.api_key,
                     "require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every endpoint but /health; the "
                     "header is forwarded as sent, so backends started with the same key accept it");
  command.add_option("--max-body-bytes", transport.max_body_bytes, "largest request body")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 32))
      ->capture_default_str();
  command.add_option("--max-upload-bytes", flags.options.max_upload_bytes, "largest POST /v1/files body")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 40))
      ->capture_default_str();
  command.add_option("--max-connections", transport.max_connections, "open client connections (503 beyond)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  command
      .add_option("--handler-threads", transport.worker_threads,
                  "requests relayed at once (each holds a thread while its backend answers); more wait in order")
      ->check(CLI::Range(size_t{1}, size_t{65536}))
      ->capture_default_str();
  command
      .add_option("--stream-buffer-bytes", transport.stream_buffer_bytes,
                  "per stream: bytes the client has not taken yet; beyond, the router stops reading from the "
                  "backend (up to --write-timeout, then the stream and its backend request are closed)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str();
  command
      .add_option("--write-timeout", transport.write_timeout_seconds,
                  "seconds a write to a client (or a full stream buffer) may make no progress")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  command
      .add_option("--shutdown-timeout", flags.options.shutdown_grace_seconds,
                  "SIGTERM: seconds requests in progress get to finish before they are closed")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  command.add_flag("--no-request-log", flags.no_request_log, "do not log each request");
}

GLINT_REGISTER_COMMAND("router",
                       "route clients to several glint serve backends: replicas, or prefill and decode servers "
                       "(docs/router.md)",
                       42, [](CLI::App& command) -> std::function<Status()> {
                         auto flags = std::make_shared<RouterFlags>();
                         AddBackendFlags(command, *flags);
                         AddClientFlags(command, *flags);
                         return [flags] { return RunRouter(*flags); };
                       });

}  // namespace
}  // namespace glint::cli
