// What the HTTP layer needs from the thing that generates tokens: submit a request (token ids, sampling, stops, a
// sink for outputs), cancel it, read metrics. The engine (engine/engine.h) is adapted to it in engine_backend.cc;
// tests use a scripted fake. Outputs reach the sink on the backend's thread and must be handed off quickly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "grammar/matcher.h"
#include "vision/tower.h"

namespace glint::server {

using GenerationId = uint64_t;

struct GenerationSampling {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int64_t top_k = 0;  // 0 = off
  float min_p = 0.0f;
  std::optional<uint64_t> seed;  // absent: not reproducible
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::vector<std::pair<int32_t, float>> logit_bias = {};  // (token, bias in [−100, 100]) added to the logits
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

enum class GenerationFinish { kNone, kStop, kLength, kCancelled, kError };

// One step's worth of one sample.
struct GenerationOutput {
  int64_t index = 0;                   // which of the n samples
  std::vector<int32_t> tokens;         // generated since this sample's previous output
  std::string text;                    // their text: complete UTF-8 characters; never includes a stop string
  std::vector<TokenLogprob> logprobs;  // [tokens] when asked for
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // [tokens][k] when asked for
  GenerationFinish finish = GenerationFinish::kNone;    // set on the sample's last output
  std::string error;                                    // kError
  std::string stop_string;                              // kStop by a stop string: which one
  int64_t generated_tokens = 0;                         // on the last output: tokens this sample generated
  int64_t cached_prompt_tokens = 0;  // on the last output: prompt tokens restored from the prefix cache
  bool request_finished = false;     // the last output of the whole request (all n samples)
};

class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  virtual void OnOutput(GenerationOutput output) = 0;  // backend thread; must return quickly
};

// An image of the prompt: its placeholders are prompt positions [start, start + its image tokens).
struct GenerationImage {
  int64_t start = 0;
  std::shared_ptr<const VisionInput> input;
  uint64_t key = 0;  // XXH3-64 of the encoded bytes: the prefix-cache key
};

struct GenerationRequest {
  std::vector<int32_t> prompt;          // at least one token
  std::vector<GenerationImage> images;  // in prompt order
  GenerationSampling sampling;
  int64_t max_tokens = -1;                // −1: up to the context limit
  std::vector<std::string> stop_strings;  // finish when the text contains one (not included in the text)
  std::vector<int32_t> stop_token_ids;    // finish on these, besides the model's end ids
  bool ignore_eos = false;
  bool skip_special_tokens = true;  // false keeps <think>, <tool_call>... in the text for the parsers
  int64_t n = 1;
  int64_t logprobs = -1;  // −1: none; k ≥ 0: each token's logprob and the k most likely
  // Structured output: every sample's tokens are constrained to this grammar (null: unconstrained).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::shared_ptr<GenerationSink> sink;
  bool batch = false;  // a batch job's request: lower priority in the engine's scheduler (docs/batch.md)
  // Prefill/decode disaggregation (docs/disaggregation.md), from the router's headers on a decode server: the
  // prefill server's transfer address "host:port" (empty: prefill here), and the prompt length below which this
  // server prefills locally anyway (−1: its default).
  std::string prefill_from;
  int64_t local_prefill_below = -1;
};

// A histogram's figures at one moment (server/metrics.h Histogram::Figures renders them).
struct HistogramFigures {
  std::vector<double> upper_bounds;
  std::vector<int64_t> counts;  // [upper_bounds + 1], per bucket (not cumulative); the last is +Inf
  double sum = 0;
  int64_t count = 0;
};

// A snapshot for /metrics and admission. Cumulative counters only grow.
struct BackendMetrics {
  int64_t requests_running = 0;
  int64_t requests_waiting = 0;
  int64_t preemptions = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  int64_t state_slots_total = 0, state_slots_used = 0;
  // [ranks] the cache memory each rank holds: bytes of the slots and blocks held by live sequences, and of its
  // pools (docs/distributed.md "Attention data-parallel"). Under --dp-attention each rank's own partition; otherwise
  // every rank holds the same pools. One entry for one process.
  std::vector<int64_t> cache_bytes_by_rank, cache_capacity_bytes_by_rank;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;             // admissions
  int64_t prefix_cache_query_tokens = 0, prefix_cache_hit_tokens = 0;  // tokens
  // Prefix-cache checkpoints (KDA state copies): pool size and held ones in bytes, demoted by the spacing policy.
  int64_t checkpoint_bytes_total = 0, checkpoint_bytes_used = 0, checkpoints_used = 0, checkpoints_demoted = 0;
  int64_t checkpoint_evictions = 0;
  // The prefix cache's disk tier (all 0 without one).
  int64_t disk_bytes_total = 0, disk_bytes_used = 0, disk_files = 0;
  int64_t disk_reads = 0, disk_writes = 0, disk_read_bytes = 0, disk_write_bytes = 0;
  int64_t disk_read_failures = 0, disk_write_failures = 0, disk_evictions = 0, disk_hit_tokens = 0;
  int64_t computed_tokens = 0;
  int64_t steps = 0;
  // Speculative decoding: verification steps (drafts), drafted tokens, accepted drafted tokens, and accepted tokens
  // by draft position (empty when speculation is off).
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
  // Images of submitted requests and their tokens; those the tower ran for (a prefix-cache hit skips it).
  int64_t images = 0, image_tokens = 0, images_encoded = 0, image_tokens_encoded = 0;
  double vision_seconds = 0;
  // Prefill/decode disaggregation (a decode server; 0 otherwise): states that arrived from a prefill server, their
  // bytes and transfer time, prompts prefilled here instead (short, images, no lease, or a failed transfer), and
  // failed transfers.
  int64_t pd_transfers = 0, pd_transfer_bytes = 0, pd_local_prefills = 0, pd_transfer_failures = 0;
  double pd_transfer_seconds = 0;
  // A prefill server's side (TransferServer::overlap): states sent, their bytes, of which written before the prefill
  // ended (layer streaming), and the seconds from each prefill's end to its last byte.
  int64_t pd_states_sent = 0, pd_sent_bytes = 0, pd_sent_before_prefill_end_bytes = 0;
  double pd_send_tail_seconds = 0;
  // Where each transfer's time went (server/transfer_phases.h), (phase, seconds) per phase then the total: the decode
  // server's phases of each state it imported, the prefill server's of each state it sent.
  std::vector<std::pair<std::string, HistogramFigures>> pd_decode_phases, pd_prefill_phases;
  // Transfer handshakes refused because the peer could not prove the shared secret (or one side has none).
  int64_t pd_authentication_failures = 0;
};

// What /health reports (docs/server.md "Health").
struct BackendHealth {
  Status damage;                // Ok, or why the backend can serve nothing for good (damaged weights)
  double seconds_in_step = 0;   // how long the current step has run; 0 while idle (a stall grows it without bound)
  int64_t requests_queued = 0;  // running or waiting
};

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // Validates and queues; an error means nothing was queued. Its code says whose fault: kIo, kDataLoss,
  // kUnavailable and kInternal are the server's (damaged weights, stopping: 503), any other the request's (bad
  // sampling, a prompt too long: 400).
  virtual Result<GenerationId> Submit(GenerationRequest request) = 0;
  // The request's samples finish as kCancelled and free their memory soon; unknown ids are ignored.
  virtual void Cancel(GenerationId id) = 0;
  virtual BackendMetrics Metrics() const = 0;
  // Cheap (no waiting on the backend's thread): /health calls it. Default: healthy, idle.
  virtual BackendHealth Health() const { return {}; }
  // Prompt + generated tokens of one sequence.
  virtual int64_t max_model_len() const = 0;
  // Sequences that can be in memory at once (requests beyond wait in the backend's queue).
  virtual int64_t max_running_sequences() const = 0;
};

}  // namespace glint::server
