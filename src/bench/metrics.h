// Per-request timing records and the metrics of one concurrency level (docs/bench.md "Metrics").
//
// Definitions (serving.md §3, the same as vLLM's and InferenceX's):
//   TTFT  = arrival of the first streamed chunk that carries content − send time
//   ITL   = gaps between the arrivals of consecutive content chunks (pooled over all requests of a level)
//   E2E   = arrival of the end of the stream ([DONE]) − send time
//   TPOT  = (E2E − TTFT) / (output tokens − 1), per request; undefined for one-token replies
//   output tokens = the server's usage.completion_tokens (the client's count of content chunks when the server
//                   sends no usage; such requests are counted in usage_check.requests_without_usage)
//   duration = last end − first send over the level's measured requests (failed ones included)
//   throughput = tokens of completed requests / duration; per chip = throughput / chips
//   interactivity = 1000 / TPOT(ms) tokens/s per user, from the median TPOT (InferenceX's "median_intvty") and
//                   from the mean TPOT
//   normalised E2E interactivity = 1 / p90 over requests of (E2E / output tokens), tokens/s (InferenceX AgentX)
//   cost per million tokens = price per chip-hour / (tokens/s per chip × 3600 / 10⁶)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/prometheus.h"
#include "bench/stats.h"

namespace glint::bench {

enum class Outcome {
  kOk,
  kHttpError,         // a non-200 status
  kTimeout,           // --request-timeout passed before the stream ended
  kDisconnected,      // the connection broke or the stream ended before [DONE]
  kConnectionFailed,  // could not connect
  kBadResponse,       // unparsable SSE/JSON, or an error object inside the stream
  kNoContent,         // the stream ended normally without any generated content
  kCancelled,         // abandoned because of Ctrl-C
};
std::string_view OutcomeName(Outcome outcome);  // "ok", "http_error", "timeout", ...

struct RequestRecord {
  int64_t index = 0;                    // dispatch order within the level's measured phase
  int64_t session = 0;                  // session id (a random-workload request is a one-turn session)
  int turn = 0;                         // turn within the session
  bool subagent = false;                // a turn of a sub-agent session (multi-turn workload)
  int64_t expected_prompt_tokens = -1;  // the prompt length the workload built; -1 when unknown (chat templates)
  int64_t max_tokens = 0;
  double start_s = 0;  // send time, seconds since the level's measurement epoch
  double end_s = 0;    // end of stream (or failure), same clock
  // Arrival of each output event, same clock: each chunk with content (--count-tokens content), or each token, a
  // chunk of k logprob entries counting k times (--count-tokens logprobs).
  std::vector<double> content_times_s;
  std::optional<int64_t> usage_prompt_tokens;
  std::optional<int64_t> usage_completion_tokens;
  Outcome outcome = Outcome::kOk;
  int http_status = 0;
  std::string error;                 // what went wrong, for the error examples of a level
  int stale_connection_retries = 0;  // sent again on a fresh connection: the kept-alive one was closed (http.cc)
};

// Output tokens of a request: usage.completion_tokens, or the content chunks counted when usage is missing.
int64_t OutputTokens(const RequestRecord& record);

struct RequestTiming {
  double ttft_s = kNaN;
  double e2e_s = kNaN;
  double tpot_s = kNaN;  // NaN when output tokens < 2
  std::vector<double> itl_s;
};
RequestTiming ComputeRequestTiming(const RequestRecord& record);

struct UsageCheck {
  int64_t requests_without_usage = 0;           // completed requests whose stream had no usage object
  int64_t usage_completion_tokens = 0;          // sum of usage.completion_tokens (completed requests)
  int64_t content_chunks = 0;                   // sum of content chunks counted by the client (completed requests)
  int64_t completion_vs_chunks_mismatches = 0;  // requests where usage.completion_tokens ≠ chunks (normal with
                                                // speculative decoding: a chunk may carry several tokens)
  int64_t prompt_mismatches = 0;                // usage.prompt_tokens ≠ the length the workload built
  int64_t output_length_mismatches = 0;         // usage.completion_tokens ≠ max_tokens (ignore_eos was not honoured)
};

struct LevelResult {
  int concurrency = 0;
  bool interrupted = false;  // Ctrl-C arrived during this level: the figures cover the requests that finished
  int64_t sessions_planned = 0;
  int64_t requests_planned = 0;
  int64_t requests_sent = 0;
  int64_t completed = 0;
  int64_t failed = 0;     // sent, did not complete, not cancelled
  int64_t cancelled = 0;  // abandoned at Ctrl-C
  int64_t skipped = 0;    // never sent: later turns of a session whose turn failed, or stopped by Ctrl-C
  int64_t resent = 0;     // sent again on a fresh connection after the server closed the kept-alive one
  std::map<std::string, int64_t> errors;    // error kind ("timeout", "http_500", ...) → count
  std::vector<std::string> error_examples;  // the first few error messages
  int64_t warmup_requests = 0;
  int64_t warmup_failed = 0;

  double duration_s = kNaN;
  int64_t input_tokens = 0;          // usage.prompt_tokens (or the built length) of completed requests
  int64_t output_tokens = 0;         // output tokens of completed requests
  double request_throughput = kNaN;  // completed requests / s
  double output_throughput = kNaN;   // output tokens / s
  double total_throughput = kNaN;    // (input + output tokens) / s
  double output_throughput_per_chip = kNaN;
  double total_throughput_per_chip = kNaN;

  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  Summary e2e_per_output_token_ms;      // E2E / output tokens per request
  double interactivity_median = kNaN;   // 1000 / median TPOT(ms)
  double interactivity_mean = kNaN;     // 1000 / mean TPOT(ms)
  double e2e_interactivity_p90 = kNaN;  // 1 / p90(E2E / output tokens), tokens/s
  double cost_per_million_output_tokens = kNaN;
  double cost_per_million_total_tokens = kNaN;

  UsageCheck usage;
  std::optional<SpecDecodeMetrics> spec_decode;
  std::string spec_decode_note;  // why spec_decode is empty, when it is
};

struct CostModel {
  int chips = 1;
  std::optional<double> price_per_chip_hour;
};

// Cost per million tokens at `tokens_per_s_per_chip`: price / (rate × 3600 / 10⁶). NaN without a price or rate.
double CostPerMillionTokens(std::optional<double> price_per_chip_hour, double tokens_per_s_per_chip);

// Fills the request counts, token totals, throughputs, latency summaries, interactivity, cost and usage check of a
// level from its measured requests. Leaves planned/skipped/warm-up counts and spec_decode to the caller.
void ComputeLevelMetrics(const std::vector<RequestRecord>& records, const CostModel& cost, LevelResult& level);

}  // namespace glint::bench
