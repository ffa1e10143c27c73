#include "router/router.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <condition_variable>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "base/log.h"
#include "router/health.h"
#include "router/request_keys.h"
#include "router/router_metrics.h"
#include "server/anthropic_response.h"
#include "server/api_error.h"
#include "server/http_server.h"

namespace glint::router {
namespace {

using server::ClientConnection;
using server::HttpRequest;
using server::HttpResponse;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kJson = "application/json";
// The client headers a backend needs: the body's type, the API key, the Anthropic API version and betas, what the
// client accepts. No other header of the client's is passed on, so no client can send X-Glint-Prefill itself.
constexpr std::array<std::string_view, 6> kForwardedHeaders = {"Content-Type",      "Authorization",  "x-api-key",
                                                               "anthropic-version", "anthropic-beta", "Accept"};
// Backend response headers that describe one connection (RFC 9110 §7.6.1) or that the transport writes itself.
constexpr std::array<std::string_view, 6> kDroppedResponseHeaders = {
    "connection", "keep-alive", "transfer-encoding", "content-length", "content-type", "date"};
// Asking every backend (for an unknown id, or a list): answers that take a moment, not a generation, so a backend
// that hangs holds the request up for seconds, not for --backend-timeout.
constexpr UpstreamTimeouts kQuickTimeouts{.connect_seconds = 2, .idle_seconds = 10};
// /health checks: the same patience whatever --health-interval (how often to ask, not how fast a busy backend must
// answer). Each backend's checks run one after another on its own thread, so a slow answer delays only that
// backend's next check, and a refused connection (a dead server) still fails at once. Timeouts that shrank with
// the interval (0.5 s at 0.2 s) took healthy backends out whenever the machine was loaded.
constexpr UpstreamTimeouts kHealthTimeouts{.connect_seconds = 2, .idle_seconds = 5};
// A streamed /v1/responses reply names its id in its first event; this much of its start is searched for it.
constexpr size_t kResponseIdSearchBytes = 64 << 10;

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool IsMessagesPath(std::string_view path) { return path.starts_with("/v1/messages"); }

// GET /v1/files and GET /v1/batches: merged from every backend, or (with ?after=ID) the page of ID's backend.
bool IsListRequest(const HttpRequest& req) {
  return req.method == "GET" && (req.path == "/v1/files" || req.path == "/v1/batches");
}

bool IsStatefulPath(std::string_view path) {
  return path.starts_with("/v1/responses") || path.starts_with("/v1/files") || path.starts_with("/v1/batches");
}

// An error the router makes itself, in the shape of the API the client called.
void ReplyError(HttpResponse& res, std::string_view path, int status, std::string message, std::string code) {
  const std::string type = status == 401   ? "authentication_error"
                           : status >= 500 ? "server_error"
                                           : "invalid_request_error";
  const server::ApiError error{status, type, std::move(message), "", std::move(code)};
  res.status = status;
  if (status == 503) res.SetHeader("Retry-After", "1");
  res.SetContent(IsMessagesPath(path) ? server::AnthropicErrorBody(error) : server::ErrorBody(error),
                 std::string(kJson));
  res.log_note = error.message.substr(0, 300);
}

// What a client reads when its backend fails in the middle of an SSE stream: an `error` event in its API's shape
// (the OpenAI and Anthropic clients raise it), instead of a stream that merely stops.
std::string StreamErrorEvent(std::string_view path, const std::string& message) {
  const server::ApiError error{502, "server_error", message, "", "backend_failed"};
  const std::string body = IsMessagesPath(path) ? server::AnthropicErrorBody(error) : server::ErrorBody(error);
  return StrCat("event: error\ndata: ", body, "\n\n");
}

std::string QueryValue(std::string_view target, std::string_view name) {
  const size_t question = target.find('?');
  if (question == std::string_view::npos) return "";
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (pair.starts_with(name) && pair.size() > name.size() && pair[name.size()] == '=') {
      return std::string(pair.substr(name.size() + 1));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return "";
}

// Counts a request on a backend while it is in progress (outstanding) and in total.
class Lease {
 public:
  explicit Lease(Backend& backend) : backend_(backend) {
    backend_.outstanding.fetch_add(1);
    backend_.requests.fetch_add(1);
  }
  ~Lease() { backend_.outstanding.fetch_sub(1); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

 private:
  Backend& backend_;
};

// The leases of one proxied request: its backend's, and the prefill server's named for it. Shared with the stream.
struct Leases {
  std::unique_ptr<Lease> serving;
  std::unique_ptr<Lease> prefill;
};

// Where a request must go: pinned to the backend holding an id it names, or placed by its prefix key and load.
struct Target {
  std::optional<size_t> pinned;
  std::string pinned_id;
  std::optional<uint64_t> prefix;
};

// How one attempt on one backend ended.
struct Attempt {
  enum Kind { kAnswered, kBackendFailed, kClientLeft } kind = kAnswered;
  std::string error;  // kBackendFailed: what failed
};

}  // namespace

Result<std::vector<BackendSpec>> BackendsFromFlags(const std::vector<std::string>& prefill,
                                                   const std::vector<std::string>& decode,
                                                   const std::vector<std::string>& replica) {
  if (prefill.empty() && decode.empty() && replica.empty()) {
    return InvalidArgument("no backends: give --replica URL (glint serve), or --prefill URL and --decode URL ",
                           "(glint serve --role prefill / --role decode), each repeatable");
  }
  if (!prefill.empty() && decode.empty()) {
    return InvalidArgument("--prefill needs at least one --decode server: a prefill server only computes prompt ",
                           "states that a decode server continues from");
  }
  if (!decode.empty() && prefill.empty()) {
    return InvalidArgument("--decode needs at least one --prefill server (to serve without disaggregation, list ",
                           "the servers with --replica)");
  }
  std::vector<BackendSpec> specs;
  std::set<std::string> seen;
  auto add = [&](const std::vector<std::string>& urls, BackendRole role, const char* flag) -> Status {
    for (const std::string& text : urls) {
      Result<BackendUrl> url = ParseBackendUrl(text);
      if (!url.ok()) return InvalidArgument(flag, ": ", url.status().message());
      if (!seen.insert(url->text).second) return InvalidArgument(flag, ": ", url->text, " is listed twice");
      specs.push_back({*url, role});
    }
    return Status::Ok();
  };
  GLINT_RETURN_IF_ERROR(add(replica, BackendRole::kReplica, "--replica"));
  GLINT_RETURN_IF_ERROR(add(decode, BackendRole::kDecode, "--decode"));
  GLINT_RETURN_IF_ERROR(add(prefill, BackendRole::kPrefill, "--prefill"));
  return specs;
}

class Router::Handler final : public server::HttpHandler {
 public:
  explicit Handler(RouterOptions options);
  ~Handler() override { StopHealthChecks(); }

  bool RunsOnEventLoop(const HttpRequest& request) const override {
    return request.path == "/health" || request.path == "/metrics";
  }
  size_t BodyLimit(const HttpRequest& head) const override {
    return head.method == "POST" && head.path == "/v1/files" ? options.max_upload_bytes : 0;
  }
  void Handle(const HttpRequest& req, HttpResponse& res, ClientConnection& client) override;
  void Finished(const HttpRequest& req, const HttpResponse& res, double seconds) override;
  HttpResponse ErrorResponse(const HttpRequest& req, int status, std::string_view message,
                             std::string_view code) override {
    HttpResponse res;
    ReplyError(res, req.path, status, std::string(message), std::string(code));
    return res;
  }

  void CheckAll();
  void StartHealthChecks();
  void StopHealthChecks();

  const RouterOptions options;
  server::TransportGauges gauges;

 private:
  void Health(HttpResponse& res) const;
  bool Authorized(const HttpRequest& req, HttpResponse& res) const;
  std::optional<Target> Resolve(const HttpRequest& req, HttpResponse& res, ClientConnection& client);
  std::optional<size_t> FindOwner(const StatefulId& id, const HttpRequest& req, ClientConnection& client);
  void Proxy(const HttpRequest& req, HttpResponse& res, ClientConnection& client, const Target& target);
  Attempt Forward(const HttpRequest& req, HttpResponse& res, ClientConnection& client, size_t index,
                  const Target& target);
  Attempt Failed(Backend& backend, const Status& status, ClientConnection& client, HttpResponse& res);
  void RelayStream(const HttpRequest& req, HttpResponse& res, std::shared_ptr<UpstreamCall> call,
                   std::shared_ptr<Leases> leases, size_t index, Clock::time_point start);
  void Learn(const HttpRequest& req, size_t index, const Target& target, int status, const std::string& body);
  UpstreamRequest BuildRequest(const HttpRequest& req, Backend& backend, Leases& leases);
  Headers ForwardedHeaders(const HttpRequest& req) const;
  void ListFromEveryBackend(const HttpRequest& req, HttpResponse& res, ClientConnection& client);
  void NoBackend(const HttpRequest& req, HttpResponse& res,
                 const std::vector<std::pair<size_t, std::string>>& failures);

  BackendPool pool_;
  RouterCounters counters_;
  std::vector<std::thread> health_threads_;  // one a backend
  std::mutex health_mutex_;
  std::condition_variable health_wake_;
  bool health_stop_ = false;
  std::atomic<bool> stopping_{false};
};

namespace {

std::vector<std::unique_ptr<Backend>> MakeBackends(const std::vector<BackendSpec>& specs) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.reserve(specs.size());
  for (const BackendSpec& spec : specs) backends.push_back(std::make_unique<Backend>(spec.url, spec.role));
  return backends;
}

}  // namespace

Router::Handler::Handler(RouterOptions options)
    : options(std::move(options)),
      pool_(MakeBackends(this->options.backends), this->options.affinity_capacity, this->options.id_capacity,
            this->options.affinity_max_lead) {}

// ---- health ----

// Once, at the start, every backend at the same time (a backend that hangs delays the others by nothing).
void Router::Handler::CheckAll() {
  std::vector<std::thread> checks;
  checks.reserve(pool_.size());
  for (size_t i = 0; i < pool_.size(); ++i) {
    checks.emplace_back(
        [this, i] { CheckBackend(pool_.at(i), kHealthTimeouts, [this] { return !stopping_.load(); }); });
  }
  for (std::thread& check : checks) check.join();
}

// One thread per backend, each checking its backend every health_interval_seconds: a backend whose check hangs
// until its timeout does not hold up the checks of the others.
void Router::Handler::StartHealthChecks() {
  for (size_t i = 0; i < pool_.size(); ++i) {
    health_threads_.emplace_back([this, i] {
      const auto interval = std::chrono::milliseconds(static_cast<int64_t>(options.health_interval_seconds * 1000));
      std::unique_lock<std::mutex> lock(health_mutex_);
      while (!health_wake_.wait_for(lock, interval, [this] { return health_stop_; })) {
        lock.unlock();
        CheckBackend(pool_.at(i), kHealthTimeouts, [this] { return !stopping_.load(); });
        lock.lock();
      }
    });
  }
}

void Router::Handler::StopHealthChecks() {
  stopping_.store(true);
  {
    std::lock_guard<std::mutex> lock(health_mutex_);
    health_stop_ = true;
  }
  health_wake_.notify_all();
  for (std::thread& thread : health_threads_) thread.join();
  health_threads_.clear();
}

void Router::Handler::Health(HttpResponse& res) const {
  Json backends = Json::array();
  bool any_serving = false;
  for (size_t i = 0; i < pool_.size(); ++i) {
    const Backend& backend = pool_.at(i);
    Json entry = {{"url", backend.url.text},
                  {"role", HealthRoleName(backend.role)},
                  {"healthy", backend.healthy.load()},
                  {"outstanding", backend.outstanding.load()}};
    if (!backend.healthy.load()) entry["reason"] = backend.reason();
    backends.push_back(std::move(entry));
    any_serving = any_serving || (backend.role != BackendRole::kPrefill && backend.healthy.load());
  }
  Json body = {{"status", any_serving ? "ok" : "unavailable"}, {"role", "router"}, {"backends", std::move(backends)}};
  if (!any_serving) body["reason"] = "no healthy backend answers the API (replica or decode server)";
  res.status = any_serving ? 200 : 503;
  res.SetContent(body.dump(), std::string(kJson));
}

// ---- routing ----

bool Router::Handler::Authorized(const HttpRequest& req, HttpResponse& res) const {
  constexpr std::string_view kBearer = "Bearer ";
  const std::string_view authorization = req.Header("Authorization");
  const std::string_view api_key_header = req.Header("x-api-key");
  const bool bearer = authorization.starts_with(kBearer) && authorization.size() > kBearer.size();
  if (bearer && server::ConstantTimeEquals(authorization.substr(kBearer.size()), options.api_key)) return true;
  if (!api_key_header.empty() && server::ConstantTimeEquals(api_key_header, options.api_key)) return true;
  res.SetHeader("WWW-Authenticate", "Bearer");
  ReplyError(res, req.path, 401,
             bearer || !api_key_header.empty() ? "invalid API key"
                                               : "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key'",
             "invalid_api_key");
  return false;
}

void Router::Handler::Handle(const HttpRequest& req, HttpResponse& res, ClientConnection& client) {
  if (req.path == "/health") return Health(res);
  if (!options.api_key.empty() && !Authorized(req, res)) return;
  if (req.path == "/metrics")
    return res.SetContent(RenderRouterMetrics(pool_, counters_, gauges), "text/plain; version=0.0.4");
  if (IsListRequest(req) && QueryValue(req.target, "after").empty()) return ListFromEveryBackend(req, res, client);
  const std::optional<Target> target = Resolve(req, res, client);
  if (target) Proxy(req, res, client, *target);
}

std::optional<Target> Router::Handler::Resolve(const HttpRequest& req, HttpResponse& res, ClientConnection& client) {
  Target target;
  if (req.method == "POST") target.prefix = ConversationPrefixKey(req.path, req.body);
  std::optional<StatefulId> stateful = RequestStatefulId(req.method, req.path, req.body);
  const std::string after = IsListRequest(req) ? QueryValue(req.target, "after") : "";
  if (!stateful && IsRoutableId(after)) stateful = StatefulId{after, StrCat(req.path, "/", after), false};
  if (!stateful) return target;
  std::optional<size_t> owner = pool_.OwnerOf(stateful->id);
  if (!owner) owner = FindOwner(*stateful, req, client);
  if (owner) {
    target.pinned = owner;
    target.pinned_id = stateful->id;
    // A pinned request's conversation is where its id is; its own prefix (a follow-up's "And?") names no session.
    target.prefix.reset();
    return target;
  }
  if (!stateful->in_path) return target;  // the backend chosen answers for the unknown reference in its API's words
  counters_.unknown_ids.fetch_add(1);
  ReplyError(res, req.path, 404,
             StrCat("no backend holds '", server::EscapeForLog(stateful->id),
                    "' (the router asked every healthy backend); it may have expired or been deleted"),
             "not_found");
  return std::nullopt;
}

// An id the router has not seen (it restarted, or forgot the id): asks each healthy backend for the item.
std::optional<size_t> Router::Handler::FindOwner(const StatefulId& id, const HttpRequest& req,
                                                 ClientConnection& client) {
  counters_.id_probes.fetch_add(1);
  for (size_t index : pool_.serving()) {
    Backend& backend = pool_.at(index);
    if (!backend.healthy.load()) continue;
    UpstreamCall call(backend.url, kQuickTimeouts, &backend.connections);
    if (!call.Start({"GET", id.probe_path, ForwardedHeaders(req), ""}, [&] { return client.Alive(); }).ok()) continue;
    if (call.status() == 200) {
      pool_.RememberId(id.id, index);
      return index;
    }
  }
  return std::nullopt;
}

void Router::Handler::Proxy(const HttpRequest& req, HttpResponse& res, ClientConnection& client, const Target& target) {
  std::vector<size_t> failed;
  std::vector<std::pair<size_t, std::string>> failures;
  for (int attempt = 0; attempt < 2; ++attempt) {  // one retry, on another backend, after a connection failure
    size_t index = 0;
    if (target.pinned) {
      if (attempt > 0) break;  // only the backend that holds the id can answer
      index = *target.pinned;
      Backend& owner = pool_.at(index);
      if (!owner.healthy.load()) {
        counters_.unavailable.fetch_add(1);
        return ReplyError(res, req.path, 503,
                          StrCat("the backend that holds '", server::EscapeForLog(target.pinned_id), "' (",
                                 owner.url.text, ") is unavailable: ", owner.reason()),
                          "backend_unavailable");
      }
    } else {
      const std::optional<Choice> choice = pool_.ChooseServing(target.prefix, failed);
      if (!choice) break;
      index = choice->backend;
      if (attempt == 0 && target.prefix) {
        (choice->affinity_hit       ? counters_.affinity_hits
         : choice->affinity_yielded ? counters_.affinity_yields
                                    : counters_.affinity_misses)
            .fetch_add(1);
      }
    }
    if (attempt > 0) counters_.retries.fetch_add(1);
    const Attempt outcome = Forward(req, res, client, index, target);
    if (outcome.kind != Attempt::kBackendFailed) return;
    failed.push_back(index);
    failures.emplace_back(index, outcome.error);
  }
  NoBackend(req, res, failures);
}

// 503 naming every backend that could have answered and why it did not: the attempts' failures, and the reasons
// the others were skipped.
void Router::Handler::NoBackend(const HttpRequest& req, HttpResponse& res,
                                const std::vector<std::pair<size_t, std::string>>& failures) {
  counters_.unavailable.fetch_add(1);
  std::string message = "no backend could take the request: ";
  bool first = true;
  for (size_t index : pool_.serving()) {
    const Backend& backend = pool_.at(index);
    auto failed = std::find_if(failures.begin(), failures.end(), [&](const auto& f) { return f.first == index; });
    const std::string why = failed != failures.end() ? StrCat("failed just now: ", failed->second)
                            : backend.healthy.load() ? std::string("healthy, not tried")
                                                     : StrCat("skipped: ", backend.reason());
    message += StrCat(first ? "" : "; ", backend.url.text, " (", why, ")");
    first = false;
  }
  ReplyError(res, req.path, 503, message, "no_backend");
}

// ---- one attempt on one backend ----

Headers Router::Handler::ForwardedHeaders(const HttpRequest& req) const {
  Headers headers;
  for (std::string_view name : kForwardedHeaders) {
    const std::string_view value = req.Header(name);
    if (!value.empty()) headers.emplace_back(std::string(name), std::string(value));
  }
  if (!req.remote_address.empty()) headers.emplace_back("X-Forwarded-For", req.remote_address);
  return headers;
}

UpstreamRequest Router::Handler::BuildRequest(const HttpRequest& req, Backend& backend, Leases& leases) {
  const size_t question = req.target.find('?');
  UpstreamRequest upstream{req.method, req.path + (question == std::string::npos ? "" : req.target.substr(question)),
                           ForwardedHeaders(req), req.body};
  if (backend.role != BackendRole::kDecode) return upstream;
  // The contract with decode servers (docs/router.md "Disaggregated serving"): which prefill server to ask for the
  // prompt's state (host of its URL, its transfer port), and below which prompt length to prefill locally.
  if (const std::optional<size_t> prefill = pool_.ChoosePrefill()) {
    Backend& server = pool_.at(*prefill);
    leases.prefill = std::make_unique<Lease>(server);
    const bool ipv6 = server.url.host.find(':') != std::string::npos;
    upstream.headers.emplace_back(
        "X-Glint-Prefill", StrCat(ipv6 ? "[" : "", server.url.host, ipv6 ? "]" : "", ":", server.transfer_port.load()));
  } else {
    counters_.decode_without_prefill.fetch_add(1);
  }
  if (options.local_prefill_below) {
    upstream.headers.emplace_back("X-Glint-Local-Prefill-Below", std::to_string(*options.local_prefill_below));
  }
  return upstream;
}

Attempt Router::Handler::Failed(Backend& backend, const Status& status, ClientConnection& client, HttpResponse& res) {
  if (!client.Alive()) {
    res.status = 499;  // nobody reads it; the log says what happened
    res.log_note = StrCat(backend.url.text, " (client left; backend request closed)");
    return {Attempt::kClientLeft, ""};
  }
  backend.failures.fetch_add(1);
  // Skipped until its next /health check passes: a backend that refuses connections fails every request meanwhile.
  backend.SetHealth(false, status.message());
  LogWarning("router: backend ", backend.url.text, " failed a request: ", status.message());
  return {Attempt::kBackendFailed, status.message()};
}

Attempt Router::Handler::Forward(const HttpRequest& req, HttpResponse& res, ClientConnection& client, size_t index,
                                 const Target& target) {
  Backend& backend = pool_.at(index);
  auto leases = std::make_shared<Leases>();
  leases->serving = std::make_unique<Lease>(backend);
  const UpstreamRequest upstream = BuildRequest(req, backend, *leases);
  auto call = std::make_shared<UpstreamCall>(backend.url, options.upstream, &backend.connections);
  const Clock::time_point start = Clock::now();
  auto alive = [&client] { return client.Alive(); };
  if (Status started = call->Start(upstream, alive); !started.ok()) {
    if (call->reused() && client.Alive()) {
      // A pooled connection died under a request that is not sent twice (IsIdempotentMethod): the backend may have
      // taken it, so it is neither sent again nor held against the backend's health.
      backend.failures.fetch_add(1);
      ReplyError(res, req.path, 502,
                 StrCat("the connection to ", backend.url.text, " closed before it answered (", started.message(),
                        "); a ", req.method, " is not sent twice"),
                 "backend_connection_closed");
      return {};
    }
    return Failed(backend, started, client, res);
  }
  if (!call->reused()) backend.connect_latency.Observe(call->connect_seconds());
  backend.head_latency.Observe(std::chrono::duration<double>(Clock::now() - start).count());
  res.status = call->status();
  for (const auto& header : call->headers()) {
    const bool dropped = std::any_of(kDroppedResponseHeaders.begin(), kDroppedResponseHeaders.end(),
                                     [&](std::string_view d) { return EqualsIgnoringCase(header.first, d); });
    if (!dropped) res.SetHeader(header.first, header.second);
  }
  res.content_type = std::string(call->Header("Content-Type"));
  if (res.status >= 500) backend.failures.fetch_add(1);
  const bool sse = res.content_type.starts_with("text/event-stream");
  const std::optional<uint64_t> length = call->content_length();
  if (sse || !length || *length > options.max_buffered_response_bytes) {
    Learn(req, index, target, res.status, "");
    RelayStream(req, res, std::move(call), std::move(leases), index, start);
    return {};
  }
  Result<std::string> body = call->ReadAll(options.max_buffered_response_bytes, alive);
  if (!body.ok()) return Failed(backend, body.status(), client, res);
  res.body = std::move(*body);
  Learn(req, index, target, res.status, res.body);
  backend.latency.Observe(std::chrono::duration<double>(Clock::now() - start).count());
  res.log_note = backend.url.text;
  return {};
}

void Router::Handler::RelayStream(const HttpRequest& req, HttpResponse& res, std::shared_ptr<UpstreamCall> call,
                                  std::shared_ptr<Leases> leases, size_t index, Clock::time_point start) {
  const bool find_response_id = req.path == "/v1/responses" && res.status / 100 == 2;
  const bool sse = res.content_type.starts_with("text/event-stream");
  res.stream = [this, call = std::move(call), leases = std::move(leases), index, start, find_response_id, sse,
                path = req.path](ClientConnection& connection, std::string& note) mutable {
    Backend& backend = pool_.at(index);
    note = backend.url.text;
    std::string head;  // the stream's start, while its response id is not known
    bool id_known = !find_response_id;
    while (!call->done()) {
      Result<std::string> piece = call->ReadSome([&] { return connection.Alive(); });
      if (!piece.ok()) {
        if (!connection.Alive()) break;
        backend.failures.fetch_add(1);
        note += StrCat(" (backend failed mid-stream: ", piece.status().message(), ")");
        if (sse)
          connection.Write(StreamErrorEvent(path, StrCat("the backend failed mid-stream: ", piece.status().message())));
        break;
      }
      if (!id_known) {
        head += *piece;
        const std::optional<std::string> id = StreamedResponseId(head);
        if (id) pool_.RememberId(*id, index);
        id_known = id.has_value() || head.size() > kResponseIdSearchBytes;
        if (id_known) head = std::string();
      }
      if (!connection.Write(*piece)) break;
    }
    if (!connection.Alive()) note += " (client left; backend request closed)";
    call->Finish();  // whole: back to the pool; else closed (a backend still generating sees its client leave)
    backend.latency.Observe(std::chrono::duration<double>(Clock::now() - start).count());
    leases.reset();  // before the stream's last chunk goes out: a client that saw the end sees the count drop
  };
}

// After a 2xx answer: the prefix now lives on this backend, and so do the ids the answer made.
void Router::Handler::Learn(const HttpRequest& req, size_t index, const Target& target, int status,
                            const std::string& body) {
  if (status / 100 != 2) return;
  if (target.prefix) pool_.RememberPrefix(*target.prefix, index);
  if (!IsStatefulPath(req.path)) return;
  for (const std::string& id : ResponseIds(body)) pool_.RememberId(id, index);
  if (req.method == "DELETE") {
    if (auto deleted = RequestStatefulId(req.method, req.path, ""); deleted && deleted->in_path) {
      pool_.ForgetId(deleted->id);
    }
  }
}

// ---- lists: GET /v1/files and GET /v1/batches ----

void Router::Handler::ListFromEveryBackend(const HttpRequest& req, HttpResponse& res, ClientConnection& client) {
  std::vector<Json> items;
  bool has_more = false;
  int answered = 0;
  std::vector<std::pair<size_t, std::string>> failures;
  for (size_t index : pool_.serving()) {
    Backend& backend = pool_.at(index);
    if (!backend.healthy.load()) continue;
    UpstreamCall call(backend.url, kQuickTimeouts, &backend.connections);
    auto alive = [&client] { return client.Alive(); };
    Status started = call.Start({"GET", req.target, ForwardedHeaders(req), ""}, alive);
    Result<std::string> body =
        started.ok() ? call.ReadAll(options.max_buffered_response_bytes, alive) : Result<std::string>(started);
    if (!body.ok()) {
      if (Failed(backend, body.status(), client, res).kind == Attempt::kClientLeft) return;
      failures.emplace_back(index, body.status().message());
      continue;
    }
    if (call.status() != 200) {  // the same request fails the same way everywhere (a bad limit, a wrong key)
      res.status = call.status();
      return res.SetContent(std::move(*body), std::string(call.Header("Content-Type")));
    }
    const Json list = Json::parse(*body, nullptr, /*allow_exceptions=*/false);
    if (!list.is_object() || !list.contains("data") || !list["data"].is_array()) continue;
    for (const std::string& id : ResponseIds(*body)) pool_.RememberId(id, index);
    for (const Json& item : list["data"]) items.push_back(item);
    has_more = has_more || list.value("has_more", false);
    ++answered;
  }
  if (answered == 0) return NoBackend(req, res, failures);
  // Newest first across backends, as each backend orders its own.
  std::stable_sort(items.begin(), items.end(), [](const Json& a, const Json& b) {
    return a.value("created_at", int64_t{0}) > b.value("created_at", int64_t{0});
  });
  Json body = {{"object", "list"}, {"has_more", has_more}};
  if (req.path == "/v1/batches") {
    const std::string limit_text = QueryValue(req.target, "limit");
    size_t limit = 20;  // the backends checked the value: they answered 200
    if (!limit_text.empty()) std::from_chars(limit_text.data(), limit_text.data() + limit_text.size(), limit);
    if (items.size() > limit) {
      items.resize(limit);
      body["has_more"] = true;
    }
    body["first_id"] = items.empty() ? Json(nullptr) : items.front()["id"];
    body["last_id"] = items.empty() ? Json(nullptr) : items.back()["id"];
  }
  body["data"] = std::move(items);
  res.SetContent(body.dump(), std::string(kJson));
}

void Router::Handler::Finished(const HttpRequest& req, const HttpResponse& res, double seconds) {
  if (!options.log_requests) return;
  LogInfo("router: ", req.method, " ", server::EscapeForLog(req.path.substr(0, 200)), " ", res.status, " ",
          static_cast<int64_t>(seconds * 1000), " ms ", server::EscapeForLog(res.log_note));
}

// ---- Router ----

Router::Router(RouterOptions options) : handler_(std::make_unique<Handler>(std::move(options))) {
  transport_ = std::make_unique<server::HttpTransport>(handler_->options.transport, *handler_, handler_->gauges);
}

Router::~Router() {
  handler_->StopHealthChecks();
  transport_.reset();  // joins the workers before the handler goes
}

Status Router::Bind() {
  GLINT_RETURN_IF_ERROR(transport_->Bind());
  handler_->CheckAll();
  handler_->StartHealthChecks();
  return Status::Ok();
}

int Router::port() const { return transport_->port(); }

Status Router::Run() { return transport_->Run(); }

void Router::Shutdown() {
  transport_->BeginShutdown();
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(handler_->options.shutdown_grace_seconds * 1000));
  while (transport_->busy() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  handler_->StopHealthChecks();
  transport_->Stop();
}

}  // namespace glint::router
