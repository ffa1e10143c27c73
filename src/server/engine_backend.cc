#include "server/engine_backend.h"

#include <chrono>

#include "base/log.h"

namespace glint::server {
namespace {

GenerationFinish ToFinish(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return GenerationFinish::kNone;
    case FinishReason::kStop:
      return GenerationFinish::kStop;
    case FinishReason::kLength:
      return GenerationFinish::kLength;
    case FinishReason::kCancelled:
      return GenerationFinish::kCancelled;
    case FinishReason::kError:
      return GenerationFinish::kError;
  }
  return GenerationFinish::kError;
}

std::vector<TokenLogprob> ToLogprobs(const std::vector<glint::TokenLogprob>& from) {
  std::vector<TokenLogprob> to;
  to.reserve(from.size());
  for (const auto& entry : from) to.push_back({entry.token, entry.logprob});
  return to;
}

// An imported state's phases, completed when its first token goes out.
struct ImportTiming {
  PhaseLaps laps;
  std::shared_ptr<PhaseHistograms> histograms;
  std::string what;  // "a 2048-token prompt's state (972288 bytes) from host:port", for the log line
};

// Runs on the engine thread: converts and forwards (the session's sink only queues).
class SinkAdapter final : public RequestSink {
 public:
  explicit SinkAdapter(std::shared_ptr<GenerationSink> sink) : sink_(std::move(sink)) {}
  // Set before the request is submitted (the engine thread sees it after).
  void set_timing(std::unique_ptr<ImportTiming> timing) { timing_ = std::move(timing); }

  void OnOutput(RequestOutput output) override {
    if (timing_ != nullptr && !output.tokens.empty()) FirstToken();
    GenerationOutput converted;
    converted.index = output.index;
    converted.tokens = std::move(output.tokens);
    converted.text = std::move(output.text);
    converted.logprobs = ToLogprobs(output.logprobs);
    converted.top_logprobs.reserve(output.top_logprobs.size());
    for (const auto& top : output.top_logprobs) converted.top_logprobs.push_back(ToLogprobs(top));
    converted.finish = ToFinish(output.finish_reason);
    converted.error = std::move(output.error);
    converted.stop_string = std::move(output.stop_string);
    if (output.timings) {
      converted.generated_tokens = output.timings->generated_tokens;
      converted.cached_prompt_tokens = output.timings->cached_prompt_tokens;
    }
    converted.request_finished = output.request_finished;
    sink_->OnOutput(std::move(converted));
  }

 private:
  void FirstToken() {
    timing_->laps.Lap(DecodePhase::kImport);
    timing_->histograms->Observe(timing_->laps);
    LogDebug("pd: ", timing_->what, ": ", timing_->laps.Describe(kDecodePhaseNames));
    timing_.reset();
  }

  std::shared_ptr<GenerationSink> sink_;
  std::unique_ptr<ImportTiming> timing_;
};

}  // namespace

Result<GenerationId> EngineBackend::Submit(GenerationRequest request) {
  Request converted;
  converted.prompt = std::move(request.prompt);
  for (GenerationImage& image : request.images)
    converted.images.push_back({image.start, std::move(image.input), image.key});
  const GenerationSampling& s = request.sampling;
  converted.sampling.temperature = s.temperature;
  converted.sampling.top_p = s.top_p;
  converted.sampling.top_k = s.top_k;
  converted.sampling.min_p = s.min_p;
  converted.sampling.presence_penalty = s.presence_penalty;
  converted.sampling.frequency_penalty = s.frequency_penalty;
  converted.sampling.repetition_penalty = s.repetition_penalty;
  converted.sampling.logit_bias = s.logit_bias;
  converted.seeded = s.seed.has_value();
  converted.sampling.seed = s.seed.value_or(0);
  converted.stop.max_tokens = request.max_tokens;
  converted.stop.stop_token_ids = std::move(request.stop_token_ids);
  converted.stop.ignore_eos = request.ignore_eos;
  converted.stop.stop_strings = std::move(request.stop_strings);
  converted.stop.skip_special_tokens = request.skip_special_tokens;
  converted.n = request.n;
  converted.logprobs = request.logprobs;
  converted.grammar = std::move(request.grammar);
  converted.batch = request.batch;
  auto adapter = std::make_shared<SinkAdapter>(std::move(request.sink));
  converted.sink = adapter;
  if (decode_ && !request.prefill_from.empty()) {
    std::optional<PhaseLaps> laps;
    GLINT_RETURN_IF_ERROR(ImportState(request, converted, laps));
    if (laps) {
      const SequenceSnapshot& state = *converted.imported;
      const int64_t bytes = state.Bytes();
      adapter->set_timing(std::make_unique<ImportTiming>(ImportTiming{
          *laps, decode_phases_,
          StrCat("a ", state.tokens, "-token prompt's state (", bytes, " bytes) from ", request.prefill_from)}));
    }
  }
  const uint64_t lease = converted.lease;
  Result<GenerationId> id = engine_.Submit(std::move(converted));
  if (!id.ok() && lease != 0) engine_.ReleaseLease(lease);
  return id;
}

Status EngineBackend::ImportState(const GenerationRequest& request, Request& converted,
                                  std::optional<PhaseLaps>& laps) {
  TransferTrace trace;
  const int64_t length = static_cast<int64_t>(converted.prompt.size());
  const int64_t below = request.local_prefill_below >= 0 ? request.local_prefill_below : decode_->local_prefill_below;
  const auto local = [&](const std::string& why) {
    ++pd_local_;
    LogInfo("pd: prefilling a ", length, "-token prompt here: ", why);
    return Status::Ok();
  };
  if (length < below) return local(StrCat("shorter than ", below, " tokens"));
  // A request the engine would refuse is refused before a prefill server works for it.
  GLINT_RETURN_IF_ERROR(engine_.Validate(converted));
  const TransferTimeouts& t = decode_->timeouts;
  // The lease outlives every deadline of the transfer, so that it is the transfer that fails first. It looks the
  // prompt up by its prefix-cache keys, images keyed by their hash: a next turn about the same image is found here.
  // Each frame's read or write is bounded by io_seconds: HELLO both ways, PROMPT, IMAGE + PATCHES per image, END,
  // then (after STATE, bounded by prefill_seconds) a LAYER per layer, LOGITS and END.
  const double frames =
      7 + 2 * static_cast<double>(converted.images.size()) + static_cast<double>(decode_->layout.layers.size());
  Result<uint64_t> lease = engine_.Lease(engine_.PrefixKeys(converted),
                                         t.connect_seconds + t.prefill_seconds + frames * t.io_seconds, below);
  if (!lease.ok()) return local(lease.status().message());
  trace.laps.Lap(DecodePhase::kLease);
  const auto started = std::chrono::steady_clock::now();
  Result<SequenceSnapshot> state = FetchState(request.prefill_from, converted.prompt, converted.images, decode_->layout,
                                              t, decode_->secret.get(), &trace);
  if (!state.ok()) {
    engine_.ReleaseLease(*lease);
    ++pd_failures_;
    if (trace.authentication_failed) ++pd_authentication_failures_;
    if (decode_->fail_without_prefill) {
      return Unavailable(state.status().message(), " (--pd-fallback fail: not prefilled here)");
    }
    LogWarning("pd: ", state.status().message(), "; prefilling locally");
    return local("the transfer failed");
  }
  pd_nanoseconds_ +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count();
  ++pd_transfers_;
  pd_bytes_ += state->Bytes();
  converted.imported = std::make_shared<const SequenceSnapshot>(std::move(state).value());
  converted.lease = *lease;
  laps = trace.laps;
  return Status::Ok();
}

BackendHealth EngineBackend::Health() const {
  const EngineMetrics metrics = engine_.Metrics();
  return {engine_.Damage(), engine_.SecondsInStep(), metrics.requests_running + metrics.requests_waiting};
}

BackendMetrics EngineBackend::Metrics() const {
  const EngineMetrics m = engine_.Metrics();
  BackendMetrics out;
  out.requests_running = m.requests_running;
  out.requests_waiting = m.requests_waiting;
  out.preemptions = m.preemptions;
  out.kv_blocks_total = m.cache.blocks_total;
  out.kv_blocks_used = m.cache.blocks_used;
  out.kv_blocks_cached = m.cache.blocks_cached;
  out.state_slots_total = m.cache.slots_total;
  out.state_slots_used = m.cache.slots_used;
  for (const CacheStats& rank : m.cache_by_rank) {
    out.cache_bytes_by_rank.push_back(LiveCacheBytes(rank));
    out.cache_capacity_bytes_by_rank.push_back(rank.slots_total * rank.slot_bytes +
                                               rank.blocks_total * rank.block_bytes +
                                               rank.checkpoints_total * rank.checkpoint_bytes);
  }
  out.prefix_cache_queries = m.cache.prefix_queries;
  out.prefix_cache_hits = m.cache.prefix_hits;
  out.prefix_cache_query_tokens = m.cache.prefix_query_tokens;
  out.prefix_cache_hit_tokens = m.cache.prefix_hit_tokens;
  out.checkpoint_bytes_total = m.cache.checkpoints_total * m.cache.checkpoint_bytes;
  out.checkpoint_bytes_used = m.cache.checkpoints_used * m.cache.checkpoint_bytes;
  out.checkpoints_used = m.cache.checkpoints_used;
  out.checkpoints_demoted = m.cache.checkpoints_demoted;
  out.checkpoint_evictions = m.cache.checkpoint_evictions;
  const DiskTierStats& disk = m.cache.disk;
  out.disk_bytes_total = disk.capacity_bytes;
  out.disk_bytes_used = disk.bytes;
  out.disk_files = disk.files;
  out.disk_reads = disk.block_reads + disk.checkpoint_reads;
  out.disk_writes = disk.block_writes + disk.checkpoint_writes;
  out.disk_read_bytes = disk.read_bytes;
  out.disk_write_bytes = disk.write_bytes;
  out.disk_read_failures = disk.read_failures;
  out.disk_write_failures = disk.write_failures;
  out.disk_evictions = disk.evictions;
  out.disk_hit_tokens = m.cache.disk_hit_tokens;
  out.computed_tokens = m.computed_tokens;
  out.steps = m.steps;
  out.spec_drafts = m.spec_drafts;
  out.spec_draft_tokens = m.spec_draft_tokens;
  out.spec_accepted_tokens = m.spec_accepted_tokens;
  out.spec_accepted_per_position = m.spec_accepted_per_position;
  out.images = m.images;
  out.image_tokens = m.image_tokens;
  out.images_encoded = m.images_encoded;
  out.image_tokens_encoded = m.image_tokens_encoded;
  out.vision_seconds = m.vision_seconds;
  out.pd_transfers = pd_transfers_.load();
  out.pd_transfer_bytes = pd_bytes_.load();
  out.pd_local_prefills = pd_local_.load();
  out.pd_transfer_failures = pd_failures_.load();
  out.pd_transfer_seconds = static_cast<double>(pd_nanoseconds_.load()) * 1e-9;
  out.pd_authentication_failures = pd_authentication_failures_.load();
  if (decode_) out.pd_decode_phases = decode_phases_->Figures();
  if (transfer_ != nullptr) {
    out.pd_prefill_phases = transfer_->phases();
    out.pd_authentication_failures += transfer_->authentication_failures();
    const TransferOverlap sent = transfer_->overlap();
    out.pd_states_sent = transfer_->transfers();
    out.pd_sent_bytes = sent.bytes;
    out.pd_sent_before_prefill_end_bytes = sent.bytes_before_end;
    out.pd_send_tail_seconds = sent.tail_seconds;
  }
  return out;
}

}  // namespace glint::server
