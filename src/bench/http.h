// The HTTP side of glint bench: the server's address, plain JSON calls for setup (/v1/models, /tokenize,
// /metrics), and the streaming call that measures one request. httplib stays inside http.cc.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "bench/metrics.h"

namespace httplib {
class Client;
}

namespace glint::bench {

using Clock = std::chrono::steady_clock;

// `http://host:port[/prefix]` (https too). The prefix is prepended to every path; it must not end in /v1 because
// glint bench appends /v1/completions itself (the same convention as `vllm bench serve --base-url`).
struct BaseUrl {
  std::string origin;       // scheme://host:port, what httplib connects to
  std::string path_prefix;  // "" or "/something", no trailing slash
};
Result<BaseUrl> ParseBaseUrl(std::string_view url);

struct HttpOptions {
  BaseUrl base;
  std::string api_key;  // sent as "Authorization: Bearer <key>" when not empty
  double connect_timeout_s = 10;
  // Streams: time tokens by their logprob entries (TokenCounting::kLogprobs) instead of by content chunks.
  bool count_logprob_tokens = false;
};

struct HttpReply {
  int status = 0;
  std::string body;
};

// Blocking non-streaming calls for everything that is not measured.
class HttpClient {
 public:
  HttpClient(const HttpOptions& options, double timeout_s);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // A transport failure (connection refused, timeout) is an error; any HTTP status is a reply.
  Result<HttpReply> Get(const std::string& path);
  Result<HttpReply> Post(const std::string& path, const std::string& json_body);
  // POST, then require status 200 and a JSON object body.
  Result<nlohmann::json> PostJson(const std::string& path, const nlohmann::json& body);

  const HttpOptions& options() const { return options_; }

 private:
  HttpOptions options_;
  std::unique_ptr<httplib::Client> client_;
};

// One keep-alive connection that runs streaming requests one at a time and records their timings. Another thread
// (the runner's watchdog) calls Poll() to end a request whose deadline passed, or every request on Ctrl-C.
class StreamingClient {
 public:
  explicit StreamingClient(const HttpOptions& options);
  ~StreamingClient();
  StreamingClient(const StreamingClient&) = delete;
  StreamingClient& operator=(const StreamingClient&) = delete;

  // POSTs `json_body` to `path` with an SSE reply expected, and fills record.start_s, end_s, content_times_s,
  // usage, outcome, http_status and error (times in seconds since `epoch`). `generated_text` receives the content
  // (for multi-turn history). Never throws; every failure becomes record.outcome.
  void Run(const std::string& path, const std::string& json_body, double timeout_s, Clock::time_point epoch,
           RequestRecord& record, std::string& generated_text);

  // Thread-safe. Aborts the request in flight if `cancel` (→ kCancelled) or if its deadline passed (→ kTimeout).
  void Poll(Clock::time_point now, bool cancel);

 private:
  HttpOptions options_;
  std::unique_ptr<httplib::Client> client_;
  std::mutex mutex_;  // guards active_ and deadline_, and serialises stop() calls
  bool active_ = false;
  Clock::time_point deadline_;
  std::atomic<bool> timed_out_{false};
  std::atomic<bool> cancelled_{false};
};

}  // namespace glint::bench
