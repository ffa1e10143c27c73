// Server metrics in the Prometheus text format (GET /metrics).
//
// Every series has a glint: name; the series vLLM dashboards and `vllm bench serve` read are exported again under
// their vllm: names with a model_name label, and the speculative-decoding counters exist (zero until speculative
// decoding does). The list with meanings is in docs/server.md. Request-level figures (TTFT, inter-token latency,
// end-to-end latency, token counts) are measured here, at the HTTP layer; engine-level ones (running/waiting,
// blocks, slots, prefix cache, preemptions) come from the backend's snapshot at scrape time.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/backend.h"
#include "server/transport_gauges.h"

namespace glint::server {

// A Prometheus histogram: cumulative bucket counts, sum and count. Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  HistogramFigures Figures() const;
  // Appends `name_bucket{le=...}`, `name_sum`, `name_count` lines; `labels` is "" or `key="value"`.
  void Render(const std::string& name, const std::string& labels, std::string& out) const;

 private:
  std::vector<double> upper_bounds_;
  mutable std::mutex mutex_;
  std::vector<int64_t> counts_;  // [upper_bounds + 1], not cumulative; the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

// Histogram::Render of figures taken before.
void RenderHistogram(const HistogramFigures& figures, const std::string& name, const std::string& labels,
                     std::string& out);

// What one finished generation request contributes.
struct RequestFigures {
  std::string api;            // "chat", "completions", "messages", ... (glint_api_requests_total)
  std::string finish_reason;  // "stop", "length", "tool_calls", "abort", "error"
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  double queue_seconds = 0;         // arrival → first output (prefill included; an upper bound on queueing)
  double first_token_seconds = -1;  // arrival → first generated token (TTFT); < 0 if none
  double e2e_seconds = 0;           // arrival → last output
};

class ServerMetrics {
 public:
  ServerMetrics();

  void CountHttpRequest(const std::string& endpoint, int status);
  void RequestFinished(const RequestFigures& figures);
  void ObserveInterTokenLatency(double seconds);
  void CountRejected() { rejected_total_.fetch_add(1); }
  // Kept by the transport (connections, requests in progress, refused connections).
  TransportGauges& transport() { return transport_; }
  void SetInFlight(int64_t requests, int64_t sequences) {
    in_flight_requests_.store(requests);
    in_flight_sequences_.store(sequences);
  }

  std::string Render(const BackendMetrics& backend, const std::string& model_name) const;

 private:
  // The counters kept under mutex_, copied at once so that one scrape is consistent.
  // Per API (chat, completions, messages, ...): the same request model underneath, so the figures compare.
  struct ApiTotals {
    int64_t requests = 0, prompt = 0, cached = 0;
  };
  struct Totals {
    std::map<std::pair<std::string, int>, int64_t> http_requests;
    std::map<std::string, int64_t> finished;  // every finish reason present, 0 when none yet
    std::map<std::string, ApiTotals> by_api;  // every API present, 0 when none yet
    int64_t prompt = 0, generation = 0, cached = 0;
  };
  Totals Snapshot() const;
  // The glint_ series of the server (HTTP, requests, tokens, latency histograms).
  void RenderServer(const Totals& totals, std::string& out) const;
  // The vllm: series: the same figures under vLLM's names, labelled with the model's name.
  void RenderVllm(const BackendMetrics& backend, const Totals& totals, const std::string& model,
                  std::string& out) const;

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> http_requests_;  // (endpoint, status) → count
  std::map<std::string, int64_t> finished_by_reason_;
  std::map<std::string, ApiTotals> by_api_;
  int64_t prompt_tokens_total_ = 0;
  int64_t generation_tokens_total_ = 0;
  int64_t cached_prompt_tokens_total_ = 0;
  std::atomic<int64_t> rejected_total_{0};
  TransportGauges transport_;
  std::atomic<int64_t> in_flight_requests_{0};
  std::atomic<int64_t> in_flight_sequences_{0};
  Histogram time_to_first_token_;
  Histogram inter_token_latency_;
  Histogram e2e_latency_;
  Histogram queue_time_;
  Histogram prompt_tokens_;
  Histogram generation_tokens_;
};

}  // namespace glint::server
