#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "server/structured_output.h"
#include "tokenizer/utf8.h"

namespace glint::server {
namespace {

// Bucket bounds as vLLM's, so dashboards built for it read ours.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kInterTokenBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kLatencyBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                             30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kTokenBuckets = {1,    2,    5,    10,    20,    50,    100,    200,    500,
                                           1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000};

std::string Number(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

// A label value in the text format: valid UTF-8 (ill-formed bytes become U+FFFD), with the format's three
// escapes (backslash, quote, newline); other control characters, which no scraper expects, become U+FFFD too.
std::string EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : SanitizeUtf8(value)) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (byte < 0x20 || byte == 0x7F) {
      out += kReplacementCharacter;
    } else {
      out += c;
    }
  }
  return out;
}

std::string JoinLabels(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "," + b;
}

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void Header(const std::string& name, const char* type, const char* help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void Sample(const std::string& name, const std::string& labels, double value) {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += " " + Number(value) + "\n";
  }
  void Single(const std::string& name, const char* type, const char* help, const std::string& labels, double value) {
    Header(name, type, help);
    Sample(name, labels, value);
  }

 private:
  std::string& out_;
};

// The prefix cache's checkpoint pool and disk tier (docs/engine.md "Checkpoint spacing", "Disk tier").
void WritePrefixCacheTiers(Writer& w, const BackendMetrics& b) {
  const auto gauge = [&](const char* name, const char* help, int64_t value) {
    w.Single(name, "gauge", help, "", static_cast<double>(value));
  };
  const auto counter = [&](const char* name, const char* help, int64_t value) {
    w.Single(name, "counter", help, "", static_cast<double>(value));
  };
  gauge("glint_prefix_cache_checkpoint_bytes_total", "Memory of the KDA state checkpoint pool.",
        b.checkpoint_bytes_total);
  gauge("glint_prefix_cache_checkpoint_bytes_used", "Memory of the checkpoints held.", b.checkpoint_bytes_used);
  gauge("glint_prefix_cache_checkpoints_used", "KDA state checkpoints held.", b.checkpoints_used);
  gauge("glint_prefix_cache_checkpoints_demoted", "Checkpoints held that the spacing policy dropped (evicted first).",
        b.checkpoints_demoted);
  counter("glint_prefix_cache_checkpoint_evictions_total", "Checkpoints evicted from memory.", b.checkpoint_evictions);
  gauge("glint_prefix_cache_disk_bytes_total", "Size budget of the prefix cache's disk tier.", b.disk_bytes_total);
  gauge("glint_prefix_cache_disk_bytes_used", "Bytes of the disk tier's files.", b.disk_bytes_used);
  gauge("glint_prefix_cache_disk_files", "Blocks and checkpoints on the disk tier.", b.disk_files);
  counter("glint_prefix_cache_disk_reads_total", "Blocks and checkpoints read back from the disk tier.", b.disk_reads);
  counter("glint_prefix_cache_disk_writes_total", "Blocks and checkpoints written to the disk tier.", b.disk_writes);
  counter("glint_prefix_cache_disk_read_bytes_total", "Bytes read back from the disk tier.", b.disk_read_bytes);
  counter("glint_prefix_cache_disk_write_bytes_total", "Bytes written to the disk tier.", b.disk_write_bytes);
  counter("glint_prefix_cache_disk_read_failures_total",
          "Disk tier files that failed their checks (damaged, truncated, foreign) or could not be read: misses.",
          b.disk_read_failures);
  counter("glint_prefix_cache_disk_write_failures_total", "Evicted items the disk tier could not write (dropped).",
          b.disk_write_failures);
  counter("glint_prefix_cache_disk_evictions_total", "Files deleted to keep the disk tier within its size.",
          b.disk_evictions);
  counter("glint_prefix_cache_disk_hit_tokens_total", "Prefix tokens made reusable by reads from the disk tier.",
          b.disk_hit_tokens);
}

// A histogram's HELP and TYPE lines, then its buckets, sum and count.
void WriteHistogram(Writer& w, const Histogram& histogram, const std::string& name, const char* help,
                    const std::string& labels, std::string& out) {
  w.Header(name, "histogram", help);
  histogram.Render(name, labels, out);
}

double KvUsage(const BackendMetrics& backend) {
  return backend.kv_blocks_total > 0
             ? static_cast<double>(backend.kv_blocks_used) / static_cast<double>(backend.kv_blocks_total)
             : 0.0;
}

// The engine's memory and work: blocks, slots, prefix cache, preemptions, steps.
void RenderEngine(Writer& w, const BackendMetrics& backend) {
  w.Single("glint_kv_blocks_total", "gauge", "KV cache blocks.", "", static_cast<double>(backend.kv_blocks_total));
  w.Single("glint_kv_blocks_used", "gauge", "KV cache blocks held by running sequences.", "",
           static_cast<double>(backend.kv_blocks_used));
  w.Single("glint_kv_blocks_cached", "gauge", "KV cache blocks kept for prefix reuse.", "",
           static_cast<double>(backend.kv_blocks_cached));
  w.Single("glint_kv_cache_usage_ratio", "gauge", "kv_blocks_used / kv_blocks_total.", "", KvUsage(backend));
  w.Single("glint_state_slots_total", "gauge", "Recurrent-state slots (KDA).", "",
           static_cast<double>(backend.state_slots_total));
  w.Single("glint_state_slots_used", "gauge", "Recurrent-state slots held by running sequences.", "",
           static_cast<double>(backend.state_slots_used));
  const auto by_rank = [&](const char* name, const char* help, const std::vector<int64_t>& values) {
    if (values.empty()) return;  // a backend that does not say (a test's)
    w.Header(name, "gauge", help);
    for (size_t r = 0; r < values.size(); ++r) {
      w.Sample(name, "rank=\"" + std::to_string(r) + "\"", static_cast<double>(values[r]));
    }
  };
  by_rank("glint_cache_bytes",
          "Cache memory each rank holds for live sequences (their state slots and blocks); under --dp-attention "
          "each rank holds only its own sequences'.",
          backend.cache_bytes_by_rank);
  by_rank("glint_cache_capacity_bytes", "Cache pools each rank allocated (blocks, slots, checkpoints).",
          backend.cache_capacity_bytes_by_rank);
  w.Single("glint_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", "",
           static_cast<double>(backend.prefix_cache_query_tokens));
  w.Single("glint_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", "",
           static_cast<double>(backend.prefix_cache_hit_tokens));
  WritePrefixCacheTiers(w, backend);
  w.Single("glint_preemptions_total", "counter", "Sequences preempted (to be recomputed).", "",
           static_cast<double>(backend.preemptions));
  w.Single("glint_engine_steps_total", "counter", "Engine steps.", "", static_cast<double>(backend.steps));
  w.Single("glint_computed_tokens_total", "counter", "Positions run through the model.", "",
           static_cast<double>(backend.computed_tokens));
}

// Image input: images and their tokens submitted, and what the vision tower computed (prefix-cache hits skip it).
void RenderImages(Writer& w, const BackendMetrics& backend) {
  w.Single("glint_images_total", "counter", "Images of submitted requests.", "", static_cast<double>(backend.images));
  w.Single("glint_image_tokens_total", "counter", "Image tokens (placeholders) of submitted requests.", "",
           static_cast<double>(backend.image_tokens));
  w.Single("glint_images_encoded_total", "counter", "Images the vision tower ran for (prefix-cache hits skip it).", "",
           static_cast<double>(backend.images_encoded));
  w.Single("glint_image_tokens_encoded_total", "counter", "Image tokens the vision tower computed.", "",
           static_cast<double>(backend.image_tokens_encoded));
  w.Single("glint_vision_seconds_total", "counter", "Time in the vision tower.", "", backend.vision_seconds);
}

// Prefill/decode disaggregation (docs/disaggregation.md): a decode server's counters, then a prefill server's; 0
// where the role has none. Named as the router's contract has them (glint:pd_*).
void RenderDisaggregation(Writer& w, const BackendMetrics& b, std::string& out) {
  w.Single("glint:pd_transfers_total", "counter", "Prompt states that arrived from a prefill server.", "",
           static_cast<double>(b.pd_transfers));
  w.Single("glint:pd_transfer_bytes_total", "counter", "Bytes of those states (slot, blocks, logits).", "",
           static_cast<double>(b.pd_transfer_bytes));
  w.Single("glint:pd_transfer_seconds_total", "counter",
           "Time from asking a prefill server to holding the state (its prefill included).", "", b.pd_transfer_seconds);
  w.Single("glint:pd_local_prefills_total", "counter",
           "Requests naming a prefill server that were prefilled here (short prompt, cached prefix, no memory to "
           "lease, or a "
           "failed transfer).",
           "", static_cast<double>(b.pd_local_prefills));
  w.Single("glint:pd_transfer_failures_total", "counter",
           "Transfers that failed (the server died, stalled or refused).", "",
           static_cast<double>(b.pd_transfer_failures));
  w.Single(
      "glint:pd_authentication_failures_total", "counter",
      "Transfer handshakes refused: the peer did not prove the shared secret (--transfer-secret-file), or only one "
      "side has one.",
      "", static_cast<double>(b.pd_authentication_failures));
  // The prefill server's side: what lets the overlap of sending with computing be seen.
  w.Single("glint:pd_states_sent_total", "counter", "Prompt states this prefill server sent whole.", "",
           static_cast<double>(b.pd_states_sent));
  w.Single("glint:pd_sent_bytes_total", "counter", "Bytes of those states as framed on the wire.", "",
           static_cast<double>(b.pd_sent_bytes));
  w.Single("glint:pd_sent_before_prefill_end_bytes_total", "counter",
           "Of those bytes, the ones written before their prefill ended (layers streamed while later ones computed).",
           "", static_cast<double>(b.pd_sent_before_prefill_end_bytes));
  w.Single("glint:pd_send_tail_seconds_total", "counter",
           "Time from each prefill's end to the last byte of its state sent.", "", b.pd_send_tail_seconds);
  // Where the time goes (server/transfer_phases.h): the phases of one transfer sum to its total.
  const auto phases = [&](const std::string& name, const char* help,
                          const std::vector<std::pair<std::string, HistogramFigures>>& figures) {
    if (figures.empty()) return;  // not this server's role
    w.Header(name, "histogram", help);
    for (const auto& [phase, histogram] : figures) RenderHistogram(histogram, name, "phase=\"" + phase + "\"", out);
  };
  phases("glint:pd_transfer_phase_seconds",
         "A decode server's transfers by phase (lease, connect, handshake, send, prefill, stream, import) and total.",
         b.pd_decode_phases);
  phases("glint:pd_prefill_phase_seconds",
         "A prefill server's states sent, by phase (handshake, queue, compute, tail) and total.", b.pd_prefill_phases);
}

// Speculative decoding (--speculative mtp; vLLM's series and meaning): drafts = verification steps, draft tokens
// = tokens proposed, accepted = drafted tokens the model kept, per draft position. All 0 when speculation is off
// (position 0 is still written, so that tools that read it find it).
void RenderSpecDecode(Writer& w, const BackendMetrics& backend, const std::string& prefix, const std::string& labels) {
  const std::vector<int64_t> per_position =
      backend.spec_accepted_per_position.empty() ? std::vector<int64_t>{0} : backend.spec_accepted_per_position;
  w.Single(prefix + "spec_decode_num_drafts_total", "counter", "Speculative decoding drafts (verification steps).",
           labels, static_cast<double>(backend.spec_drafts));
  w.Single(prefix + "spec_decode_num_draft_tokens_total", "counter", "Drafted tokens.", labels,
           static_cast<double>(backend.spec_draft_tokens));
  w.Single(prefix + "spec_decode_num_accepted_tokens_total", "counter", "Accepted drafted tokens.", labels,
           static_cast<double>(backend.spec_accepted_tokens));
  const std::string name = prefix + "spec_decode_num_accepted_tokens_per_pos_total";
  w.Header(name, "counter", "Accepted drafted tokens by draft position.");
  for (size_t position = 0; position < per_position.size(); ++position) {
    w.Sample(name, JoinLabels(labels, "position=\"" + std::to_string(position) + "\""),
             static_cast<double>(per_position[position]));
  }
}

// Structured output: the process-wide cache of compiled grammars (structured_output.h).
void RenderGrammarCache(Writer& w) {
  const GrammarCacheStats grammars = GrammarCacheSnapshot();
  w.Single("glint_structured_output_grammars_compiled_total", "counter",
           "Constraints compiled to grammars (cache misses).", "", static_cast<double>(grammars.misses));
  w.Single("glint_structured_output_grammar_cache_hits_total", "counter",
           "Constraints found compiled in the grammar cache.", "", static_cast<double>(grammars.hits));
  w.Single("glint_structured_output_compile_seconds_total", "counter", "Time spent compiling constraints.", "",
           grammars.compile_seconds);
  w.Single("glint_structured_output_grammar_cache_entries", "gauge", "Compiled grammars in the cache.", "",
           static_cast<double>(grammars.entries));
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

HistogramFigures Histogram::Figures() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {upper_bounds_, counts_, sum_, count_};
}

void Histogram::Render(const std::string& name, const std::string& labels, std::string& out) const {
  RenderHistogram(Figures(), name, labels, out);
}

void RenderHistogram(const HistogramFigures& figures, const std::string& name, const std::string& labels,
                     std::string& out) {
  Writer writer(out);
  int64_t cumulative = 0;
  for (size_t i = 0; i < figures.counts.size(); ++i) {
    cumulative += figures.counts[i];
    const double bound = i < figures.upper_bounds.size() ? figures.upper_bounds[i] : INFINITY;
    writer.Sample(name + "_bucket", JoinLabels(labels, "le=\"" + Number(bound) + "\""),
                  static_cast<double>(cumulative));
  }
  writer.Sample(name + "_sum", labels, figures.sum);
  writer.Sample(name + "_count", labels, static_cast<double>(figures.count));
}

ServerMetrics::ServerMetrics()
    : time_to_first_token_(kTtftBuckets),
      inter_token_latency_(kInterTokenBuckets),
      e2e_latency_(kLatencyBuckets),
      queue_time_(kLatencyBuckets),
      prompt_tokens_(kTokenBuckets),
      generation_tokens_(kTokenBuckets) {}

void ServerMetrics::CountHttpRequest(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++http_requests_[{endpoint, status}];
}

void ServerMetrics::RequestFinished(const RequestFigures& figures) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++finished_by_reason_[figures.finish_reason];
    if (!figures.api.empty()) {
      ApiTotals& api = by_api_[figures.api];
      ++api.requests;
      api.prompt += figures.prompt_tokens;
      api.cached += figures.cached_prompt_tokens;
    }
    prompt_tokens_total_ += figures.prompt_tokens;
    generation_tokens_total_ += figures.generation_tokens;
    cached_prompt_tokens_total_ += figures.cached_prompt_tokens;
  }
  if (figures.first_token_seconds >= 0) time_to_first_token_.Observe(figures.first_token_seconds);
  e2e_latency_.Observe(figures.e2e_seconds);
  queue_time_.Observe(figures.queue_seconds);
  prompt_tokens_.Observe(static_cast<double>(figures.prompt_tokens));
  generation_tokens_.Observe(static_cast<double>(figures.generation_tokens));
}

void ServerMetrics::ObserveInterTokenLatency(double seconds) { inter_token_latency_.Observe(seconds); }

ServerMetrics::Totals ServerMetrics::Snapshot() const {
  Totals totals;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    totals.http_requests = http_requests_;
    totals.finished = finished_by_reason_;
    totals.by_api = by_api_;
    totals.prompt = prompt_tokens_total_;
    totals.generation = generation_tokens_total_;
    totals.cached = cached_prompt_tokens_total_;
  }
  for (const char* reason : {"stop", "length", "tool_calls", "abort", "error"}) totals.finished.try_emplace(reason, 0);
  for (const char* api : {"chat", "completions", "messages", "responses"}) totals.by_api.try_emplace(api);
  return totals;
}

std::string ServerMetrics::Render(const BackendMetrics& backend, const std::string& model_name) const {
  std::string out;
  Writer w(out);
  const Totals totals = Snapshot();
  // ---- glint: ----
  w.Single("glint_requests_running", "gauge", "Requests with a sequence in engine memory.", "",
           static_cast<double>(backend.requests_running));
  w.Single("glint_requests_waiting", "gauge", "Requests queued in the engine (not in memory).", "",
           static_cast<double>(backend.requests_waiting));
  RenderServer(totals, out);
  RenderEngine(w, backend);
  RenderImages(w, backend);
  RenderDisaggregation(w, backend, out);
  RenderSpecDecode(w, backend, "glint_", "");
  RenderGrammarCache(w);
  // ---- vllm: (the same series, for dashboards and `vllm bench serve`) ----
  RenderVllm(backend, totals, "model_name=\"" + EscapeLabel(model_name) + "\"", out);
  return out;
}

void ServerMetrics::RenderServer(const Totals& totals, std::string& out) const {
  Writer w(out);
  w.Single("glint_server_requests_in_flight", "gauge", "Generation requests accepted by the server and not finished.",
           "", static_cast<double>(in_flight_requests_.load()));
  w.Single("glint_server_sequences_in_flight", "gauge", "Sequences (requests times n) accepted and not finished.", "",
           static_cast<double>(in_flight_sequences_.load()));
  w.Single("glint_http_connections_active", "gauge", "Open HTTP connections.", "",
           static_cast<double>(transport_.connections.load()));
  w.Single("glint_http_requests_active", "gauge", "HTTP requests being read, handled or answered.", "",
           static_cast<double>(transport_.requests.load()));
  w.Single("glint_http_connections_rejected_total", "counter", "Connections answered 503 at --max-connections.", "",
           static_cast<double>(transport_.rejected_connections.load()));
  w.Header("glint_http_requests_total", "counter", "HTTP requests by endpoint and status.");
  for (const auto& [key, count] : totals.http_requests) {
    w.Sample("glint_http_requests_total",
             "endpoint=\"" + EscapeLabel(key.first) + "\",status=\"" + std::to_string(key.second) + "\"",
             static_cast<double>(count));
  }
  w.Single("glint_requests_rejected_total", "counter", "Requests refused because the queue was full (429).", "",
           static_cast<double>(rejected_total_.load()));
  w.Header("glint_request_success_total", "counter", "Finished generation requests by finish reason.");
  for (const auto& [reason, count] : totals.finished) {
    w.Sample("glint_request_success_total", "finish_reason=\"" + reason + "\"", static_cast<double>(count));
  }
  for (const auto& [name, help, field] :
       {std::tuple{"glint_api_requests_total", "Finished generation requests by API.", &ApiTotals::requests},
        std::tuple{"glint_api_prompt_tokens_total", "Prompt tokens of finished requests by API.", &ApiTotals::prompt},
        std::tuple{"glint_api_prompt_tokens_cached_total", "Prompt tokens restored from the prefix cache by API.",
                   &ApiTotals::cached}}) {
    w.Header(name, "counter", help);
    for (const auto& [api, figures] : totals.by_api) {
      w.Sample(name, "api=\"" + EscapeLabel(api) + "\"", static_cast<double>(figures.*field));
    }
  }
  w.Single("glint_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", "",
           static_cast<double>(totals.prompt));
  w.Single("glint_prompt_tokens_cached_total", "counter", "Prompt tokens restored from the prefix cache.", "",
           static_cast<double>(totals.cached));
  w.Single("glint_generation_tokens_total", "counter", "Generated tokens of finished requests.", "",
           static_cast<double>(totals.generation));
  WriteHistogram(w, time_to_first_token_, "glint_time_to_first_token_seconds", "Arrival to first generated token.", "",
                 out);
  WriteHistogram(w, inter_token_latency_, "glint_inter_token_latency_seconds",
                 "Time between consecutive tokens of a sample.", "", out);
  WriteHistogram(w, e2e_latency_, "glint_e2e_request_latency_seconds", "Arrival to last output.", "", out);
  WriteHistogram(w, queue_time_, "glint_request_queue_time_seconds", "Arrival to first output (queueing and prefill).",
                 "", out);
  WriteHistogram(w, prompt_tokens_, "glint_request_prompt_tokens", "Prompt tokens per request.", "", out);
  WriteHistogram(w, generation_tokens_, "glint_request_generation_tokens", "Generated tokens per request.", "", out);
}

void ServerMetrics::RenderVllm(const BackendMetrics& backend, const Totals& totals, const std::string& model,
                               std::string& out) const {
  Writer w(out);
  const double kv_usage = KvUsage(backend);
  w.Single("vllm:num_requests_running", "gauge", "Requests running.", model,
           static_cast<double>(backend.requests_running));
  w.Single("vllm:num_requests_waiting", "gauge", "Requests waiting.", model,
           static_cast<double>(backend.requests_waiting));
  w.Single("vllm:kv_cache_usage_perc", "gauge", "KV cache usage (1 = 100%).", model, kv_usage);
  w.Single("vllm:gpu_cache_usage_perc", "gauge", "KV cache usage (1 = 100%); older name.", model, kv_usage);
  w.Single("vllm:prompt_tokens_total", "counter", "Prompt tokens.", model, static_cast<double>(totals.prompt));
  w.Single("vllm:generation_tokens_total", "counter", "Generated tokens.", model,
           static_cast<double>(totals.generation));
  w.Header("vllm:request_success_total", "counter", "Finished requests by reason.");
  for (const auto& [reason, count] : totals.finished) {
    std::string labels = model;
    labels += ",finished_reason=\"" + reason + "\"";
    w.Sample("vllm:request_success_total", labels, static_cast<double>(count));
  }
  WriteHistogram(w, time_to_first_token_, "vllm:time_to_first_token_seconds", "Time to first token.", model, out);
  WriteHistogram(w, inter_token_latency_, "vllm:time_per_output_token_seconds", "Time per output token.", model, out);
  WriteHistogram(w, inter_token_latency_, "vllm:inter_token_latency_seconds", "Inter-token latency.", model, out);
  WriteHistogram(w, e2e_latency_, "vllm:e2e_request_latency_seconds", "End-to-end request latency.", model, out);
  WriteHistogram(w, queue_time_, "vllm:request_queue_time_seconds", "Queue time (includes prefill here).", model, out);
  WriteHistogram(w, prompt_tokens_, "vllm:request_prompt_tokens", "Prompt tokens per request.", model, out);
  WriteHistogram(w, generation_tokens_, "vllm:request_generation_tokens", "Generated tokens per request.", model, out);
  w.Single("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries (tokens).", model,
           static_cast<double>(backend.prefix_cache_query_tokens));
  w.Single("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits (tokens).", model,
           static_cast<double>(backend.prefix_cache_hit_tokens));
  w.Single("vllm:num_preemptions_total", "counter", "Preemptions.", model, static_cast<double>(backend.preemptions));
  RenderSpecDecode(w, backend, "vllm:", model);
}

}  // namespace glint::server
