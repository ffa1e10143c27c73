#include "engine/engine_core.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>

#include "base/file.h"
#include "base/log.h"
#include "base/worker_pool.h"
#include "engine/prefix_disk.h"

namespace glint {
namespace {

constexpr int64_t kMaxSamplesPerRequest = 128;  // OpenAI's limit for n
constexpr int64_t kMaxTopLogprobs = 20;         // OpenAI's limit for top_logprobs

// Seed of sample i: distinct per sample, equal to the request's seed for the first (a Weyl sequence step).
uint64_t SampleSeed(uint64_t seed, int64_t index) {
  return seed + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ULL;
}

}  // namespace

EngineCore::EngineCore(const Model& model, const EngineOptions& options, const Tokenizer* tokenizer,
                       ImageEncoder* images)
    : model_(model), options_(options), tokenizer_(tokenizer), images_(images) {}

Result<std::unique_ptr<EngineCore>> EngineCore::Create(const Model& model, const EngineOptions& options,
                                                       const Tokenizer* tokenizer, ImageEncoder* images) {
  const ShardPlan shard = model.shard_plan();
  if (shard.dp_attention && options.speculative != SpeculativeMethod::kNone) {
    return Unimplemented(
        "--dp-attention does not run the MTP layer yet, so not --speculative mtp either "
        "(docs/status.md)");
  }
  if (shard.dp_attention && model.engine_mirror() == nullptr) {
    return FailedPrecondition("--dp-attention needs the ranks' lockstep leader (several ranks under mpirun)");
  }
  std::unique_ptr<EngineCore> core(new EngineCore(model, options, tokenizer, images));
  const ModelConfig& c = model.config();
  if (options.speculative == SpeculativeMethod::kMtp && !model.has_mtp()) {
    return InvalidArgument(
        "--speculative mtp needs the model's MTP layer, but ",
        c.HasMtp() ? "its weights were not loaded" : "the model has none (num_nextn_predict_layers 0)");
  }
  CacheOptions cache_options;
  cache_options.block_tokens = options.block_tokens;
  cache_options.kda_state = options.kda_state;
  cache_options.kv_dtype = options.kv_cache_dtype;
  cache_options.mtp = options.speculative == SpeculativeMethod::kMtp;
  GLINT_ASSIGN_OR_RETURN(CacheLayout layout, model.CacheLayoutFor(cache_options));
  core->layout_ = std::make_shared<const CacheLayout>(std::move(layout));
  core->transfer_layout_ = core->layout_;
  if (shard.kda_split) {  // this rank's slot holds its KDA heads; a transfer carries the whole model's
    GLINT_ASSIGN_OR_RETURN(CacheLayout whole, MakeCacheLayout(c, cache_options));
    if (whole.block_bytes != core->layout_->block_bytes) {  // the MLA latents and indexer keys are whole on every rank
      return InternalError("a rank's blocks (", core->layout_->block_bytes, " bytes) differ from the whole model's (",
                           whole.block_bytes, ")");
    }
    core->transfer_layout_ = std::make_shared<const CacheLayout>(std::move(whole));
  }
  GLINT_ASSIGN_OR_RETURN(core->capacity_, PlanCapacity(c, *core->layout_, options, model.weight_bytes()));
  if (shard.distributed()) core->capacity_.shard = DescribeShard(shard, c);
  if (shard.dp_attention) core->capacity_.attention_ranks = shard.ranks;
  GLINT_RETURN_IF_ERROR(core->CreatePools());
  SchedulerOptions scheduling;
  scheduling.max_batch_tokens = options.max_batch_tokens;
  scheduling.batch_prefill_beside_online = options.batch_prefill_beside_online;
  scheduling.watermark_blocks = static_cast<int64_t>(options.admission_watermark * core->capacity_.num_blocks);
  std::vector<CacheManager*> partitions;
  for (const auto& memory : core->memories_) partitions.push_back(memory.get());
  core->scheduler_ = std::make_unique<Scheduler>(std::move(partitions), scheduling);
  EngineCore* raw = core.get();
  core->scheduler_->set_image_cost([raw](SequenceId id, int64_t start, int64_t& count, int64_t budget) {
    return raw->ImageBudget(id, start, count, budget);
  });
  GLINT_RETURN_IF_ERROR(core->SetEndIds());
  return core;
}

Status EngineCore::CreatePools() {
  const CapacityReport& r = capacity_;
  CacheManagerOptions memory;
  memory.block_tokens = r.block_tokens;
  memory.block_bytes = r.block_bytes;
  memory.num_blocks = r.num_blocks;
  memory.slot_bytes = r.slot_bytes;
  memory.num_slots = r.num_slots;
  memory.checkpoint_bytes = layout_->checkpoint_bytes;
  memory.num_checkpoints = r.num_checkpoints;
  memory.prefix_caching = options_.prefix_caching;
  memory.checkpoint_interval = options_.checkpoint_interval;
  // The MTP layer's row at a position holds (h_p, x_{p+1}): a block's contents depend on the token after it.
  memory.key_next_token = speculative();
  memory.checkpoint_policy = options_.checkpoint_policy;
  // Split the KDA recurrence at every checkpoint position, cached or not, so that a hit is exact (model.h
  // StateCheckpoint) and the arithmetic never depends on what the cache holds — under several ranks too (the plan
  // carries split-only positions), where --dp-attention's per-rank prefix caches hold different checkpoints.
  mirror_ = model_.engine_mirror();
  memory.split_at_every_checkpoint = true;
  // --dp-attention: one partition per rank, each backed by its rank alone (this process is rank 0); otherwise one,
  // which every rank mirrors.
  const bool dp_attention = model_.shard_plan().dp_attention;
  const int partitions = dp_attention ? model_.shard_plan().ranks : 1;
  for (int rank = 0; rank < partitions; ++rank) {
    memory.backed = rank == 0;
    GLINT_ASSIGN_OR_RETURN(memories_.emplace_back(), CacheManager::Create(memory));
  }
  GLINT_RETURN_IF_ERROR(AttachPrefixDisk(options_, *layout_, mirror_ != nullptr, *memories_[0]));
  if (r.speculative) {
    GLINT_ASSIGN_OR_RETURN(rollback_, ItemArena::Fixed(r.num_slots, r.rollback_bytes));
    counters_.spec_accepted_per_position.assign(r.rollback_copies, 0);
    counters_.spec_drafted_per_position.assign(r.rollback_copies, 0);
  }
  if (mirror_ == nullptr) return Status::Ok();
  for (int rank = 0; rank < partitions; ++rank) {
    CacheManager& pools = *memories_[rank];
    pools.set_mirror(mirror_);
    const ItemArena* arenas[] = {&pools.block_arena(), &pools.slot_arena(), &pools.checkpoint_arena(), &rollback_};
    mirror_pools_.push_back(mirror_->AttachPools(layout_, arenas, dp_attention ? rank : -1));
  }
  return Status::Ok();
}

Status EngineCore::SetEndIds() {
  const ModelConfig& c = model_.config();
  if (options_.end_token_ids) {
    end_ids_ = *options_.end_token_ids;
  } else {
    for (int64_t id : c.eos_token_ids) end_ids_.push_back(static_cast<int32_t>(id));
  }
  for (int32_t id : end_ids_) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgument("end token id ", id, " is outside the vocabulary (0 ≤ id < ", c.vocab_size, ")");
    }
  }
  if (tokenizer_ != nullptr) {
    // Masks cover the model's logits [V]; ids past the tokenizer's vocabulary have no bytes and are never allowed.
    std::vector<std::string> bytes(static_cast<size_t>(c.vocab_size));
    std::vector<bool> special(bytes.size(), false);
    for (int64_t id = 0; id < c.vocab_size && id < tokenizer_->vocab_size(); ++id) {
      bytes[id] = std::string(tokenizer_->TokenText(static_cast<int32_t>(id)));
      special[id] = tokenizer_->IsSpecial(static_cast<int32_t>(id));
    }
    vocabulary_ = std::make_unique<grammar::TokenVocabulary>(std::move(bytes), std::move(special), end_ids_);
  }
  return Status::Ok();
}

EngineCore::~EngineCore() {
  if (mirror_ == nullptr) return;
  for (int64_t pools : mirror_pools_) mirror_->DetachPools(pools);
}

Status EngineCore::Validate(const Request& request) const {
  const ModelConfig& c = model_.config();
  const int64_t length = static_cast<int64_t>(request.prompt.size());
  if (length == 0) return InvalidArgument("the prompt is empty; expected at least one token");
  if (MappingFaults() > 0) return MappingDamage();  // the weights are damaged for good: no request can be served
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= c.vocab_size) {
      return InvalidArgument("prompt token ", i, " is ", request.prompt[i], "; expected an id in 0 .. ",
                             c.vocab_size - 1);
    }
  }
  const int64_t limit = capacity_.max_model_len;
  if (length >= limit) {
    return OutOfRange("the prompt has ", length, " tokens but the context limit is ", limit,
                      " tokens (max_model_len, set by the cache memory or --max-model-len): at most ", limit - 1,
                      " prompt tokens fit with one generated token");
  }
  const StopConditions& stop = request.stop;
  if (stop.max_tokens == 0 || stop.max_tokens < -1) {
    return InvalidArgument("max_tokens is ", stop.max_tokens, "; expected at least 1 (or −1 for the context limit)");
  }
  // Compared as max_tokens > limit − length (both sides in range): length + max_tokens overflows for a client's
  // max_tokens near 2^63 and would pass the check.
  if (stop.max_tokens > 0 && stop.max_tokens > limit - length) {
    return OutOfRange("the prompt (", length, " tokens) plus max_tokens (", stop.max_tokens,
                      ") is more than the context limit of ", limit, " tokens (max_model_len)");
  }
  GLINT_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  if (request.n < 1 || request.n > kMaxSamplesPerRequest) {
    return InvalidArgument("n is ", request.n, "; expected 1 .. ", kMaxSamplesPerRequest);
  }
  if (request.logprobs < -1 || request.logprobs > kMaxTopLogprobs) {
    return InvalidArgument("logprobs is ", request.logprobs, "; expected −1 (off) or 0 .. ", kMaxTopLogprobs);
  }
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id >= c.vocab_size) return InvalidArgument("logit_bias token ", id, " is outside the vocabulary");
  }
  for (int32_t id : stop.stop_token_ids) {
    if (id < 0 || id >= c.vocab_size) return InvalidArgument("stop token id ", id, " is outside the vocabulary");
  }
  for (const std::string& text : stop.stop_strings) {
    if (text.empty()) return InvalidArgument("a stop string is empty");
  }
  if (!stop.stop_strings.empty() && tokenizer_ == nullptr) {
    return FailedPrecondition("stop strings need text, but this engine was started without a tokenizer");
  }
  if (request.grammar != nullptr && vocabulary_ == nullptr) {
    return FailedPrecondition(
        "structured output needs the tokenizer's byte strings, but this engine was started "
        "without a tokenizer");
  }
  if (request.sink == nullptr) return InvalidArgument("the request has no output sink");
  GLINT_RETURN_IF_ERROR(ValidateImport(request));
  return ValidateImages(request);
}

Status EngineCore::Add(RequestId id, Request request) {
  GLINT_RETURN_IF_ERROR(Validate(request));
  if (requests_.count(id) != 0) return InvalidArgument("request id ", id, " is already in use");
  const int64_t length = static_cast<int64_t>(request.prompt.size());
  const bool imported = request.imported != nullptr;
  SequenceId leased = -1;
  if (imported) {  // the leased memory takes the snapshot; sample 0 is that sequence
    const auto lease = leases_.find(request.lease);
    if (lease == leases_.end()) {
      return FailedPrecondition("lease ", request.lease, " is unknown or expired: the transferred state came too late");
    }
    if (lease->second.tokens != length) {
      return InvalidArgument("lease ", request.lease, " holds memory for ", lease->second.tokens,
                             " positions, the prompt has ", length);
    }
    leased = lease->second.sequence;
    leases_.erase(lease);
    CopySnapshotIn(leased, *request.imported);
  }
  const double now = Now();
  RequestRecord& record = requests_[id];
  record.max_tokens = request.stop.max_tokens > 0 ? request.stop.max_tokens : capacity_.max_model_len - length;
  const uint64_t seed = request.seeded ? request.sampling.seed : std::random_device{}();
  const int64_t arrival = next_arrival_++;
  for (const RequestImage& image : request.images) {
    const int64_t tokens = VisionTokenCount(images_->config(), *image.input);
    record.images.push_back({image.start, tokens, {}, false});
    ++counters_.images;
    counters_.image_tokens += tokens;
  }
  std::vector<int32_t> keys = ImageKeyTokens(request, record.images);
  for (int64_t index = 0; index < request.n; ++index) {
    const SequenceId sequence = index == 0 && imported ? leased : next_sequence_++;
    SamplingParams params = request.sampling;
    params.seed = SampleSeed(seed, index);
    Sample sample{id,
                  index,
                  Sampler(params),
                  TokenHistory(request.prompt),
                  std::nullopt,
                  StopStringMatcher(request.stop.stop_strings),
                  0,
                  SequenceTimings{},
                  nullptr};
    if (tokenizer_ != nullptr) sample.decoder.emplace(*tokenizer_, request.stop.skip_special_tokens);
    if (request.grammar != nullptr) sample.matcher.emplace(request.grammar, vocabulary_.get());
    sample.timings.arrival = now;
    sample.timings.prompt_tokens = length;
    samples_.emplace(sequence, std::move(sample));
    record.samples.push_back(sequence);
    // Sample 0 computes the prompt; the others start as copies of it once it has (n > 1 computes it once).
    const SequencePriority priority = request.batch ? SequencePriority::kBatch : SequencePriority::kOnline;
    if (index == 0 && imported) {
      scheduler_->Import(sequence, request.prompt, arrival, keys, priority);
    } else if (index == 0) {
      scheduler_->Add(sequence, request.prompt, arrival, keys, priority);
    } else {
      scheduler_->AddChild(sequence, record.samples.front(), arrival);
    }
  }
  ++counters_.requests_submitted;
  counters_.prompt_tokens += length;
  request.prompt.clear();
  record.request = std::move(request);
  if (imported) return StartImported(leased);
  return Status::Ok();
}

void EngineCore::Bind(SequenceId id, int64_t mtp_tokens) {
  Sample& sample = samples_.at(id);
  const CacheManager& pools = MemoryOf(id);
  // --dp-attention: partition r is rank r's; this process (rank 0) only names the memory of the others.
  const int partition = scheduler_->Get(id).partition;
  const SequenceMemory memory{&pools.block_arena(), &pools.BlockTable(id), pools.Slot(id), !pools.options().backed};
  sample.state =
      std::make_unique<SequenceState>(model_.BindSequence(layout_, memory, scheduler_->Get(id).computed, mtp_tokens));
  if (model_.shard_plan().dp_attention) sample.state->attention_rank = partition;
}

std::byte* EngineCore::RollbackData(SequenceId id, int64_t k) const {
  return rollback_.Item(MemoryOf(id).SlotOf(id)) + k * capacity_.rollback_copy_bytes;
}

void EngineCore::Deliver(std::vector<RequestOutput>& outputs) {
  Stopwatch clock;
  for (RequestOutput& output : outputs) {
    // A finished request keeps its record (and sink) until here.
    const std::shared_ptr<RequestSink>& sink = requests_.at(output.request).request.sink;
    sink->OnOutput(std::move(output));
  }
  // Requests whose last sample finished are forgotten only after their outputs went out.
  for (auto it = requests_.begin(); it != requests_.end();) {
    it = it->second.samples.empty() ? requests_.erase(it) : std::next(it);
  }
  outputs.clear();
  counters_.deliver_seconds += clock.Seconds();
}

void EngineCore::FinishSample(SequenceId id, FinishReason reason, RequestOutput output,
                              std::vector<RequestOutput>& outputs, const std::string& error) {
  Sample& sample = samples_.at(id);
  const bool generation_ended = reason == FinishReason::kStop || reason == FinishReason::kLength;
  if (generation_ended && !sample.stops.stopped()) {
    // Ended without a stop string (length, an end id or a stop token): the text held back in case it started a
    // stop string goes out, and an incomplete character becomes U+FFFD. Cancelled and failed samples get no text.
    if (sample.decoder) output.text += sample.stops.Push(sample.decoder->Flush());
    output.text += sample.stops.Flush();
  }
  output.finish_reason = reason;
  output.error = error;
  sample.timings.finished = Now();
  sample.timings.generated_tokens = sample.generated;
  if (scheduler_->Contains(id)) sample.timings.preemptions = scheduler_->Get(id).preemptions;
  output.timings = sample.timings;
  RequestRecord& record = requests_.at(sample.request);
  record.samples.erase(std::find(record.samples.begin(), record.samples.end(), id));
  output.request_finished = record.samples.empty();
  if (output.request_finished) ++counters_.requests_finished;
  switch (reason) {
    case FinishReason::kStop:
      ++counters_.finished_stop;
      break;
    case FinishReason::kLength:
      ++counters_.finished_length;
      break;
    case FinishReason::kCancelled:
      ++counters_.finished_cancelled;
      break;
    case FinishReason::kError:
      ++counters_.finished_error;
      break;
    case FinishReason::kNone:
      break;
  }
  if (scheduler_->Contains(id)) scheduler_->Finish(id);
  samples_.erase(id);
  outputs.push_back(std::move(output));
}

Status EngineCore::TakeEndCheckpoints(SequenceId id, int64_t start, int64_t drafts) {
  const SequenceState& state = *samples_.at(id).state;
  CacheManager& memory = MemoryOf(id);
  for (const CheckpointTarget& target : memory.TakeCheckpoints(id, scheduler_->Keys(id), state.tokens)) {
    if (target.data == nullptr) continue;  // a split only; the step has ended there anyway
    const std::byte* source = nullptr;
    if (target.position == state.tokens) {
      source = memory.Slot(id);  // the KDA state at the sequence's length is the slot's
    } else if (target.position > start && target.position <= start + drafts) {
      // A verified draft went past it: the snapshot after that row holds the state there.
      source = RollbackData(id, target.position - start - 1);
    } else {
      return InternalError("engine: checkpoint at ", target.position, " of sequence ", id, " (at ", state.tokens,
                           ") has no state to copy");
    }
    std::memcpy(target.data, source, layout_->checkpoint_bytes);
    if (mirror_ != nullptr) mirror_->OnCopy(target.data, source, layout_->checkpoint_bytes);
  }
  return Status::Ok();
}

void EngineCore::EmitToken(const Emission& emission, std::vector<RequestOutput>& outputs) {
  const SequenceId id = emission.id;
  const int32_t token = emission.token;
  Sample& sample = samples_.at(id);
  const RequestRecord& record = requests_.at(sample.request);
  const Request& request = record.request;
  if (token == kExportToken) {
    RequestOutput output;
    output.request = sample.request;
    output.index = sample.index;
    output.time = Now();
    const int64_t layers = model_.config().num_hidden_layers;
    if (request.stream_layers && sample.layers_streamed != layers) {  // a model that does not call LayerDone
      FinishSample(id, FinishReason::kError, std::move(output), outputs,
                   StrCat("this model path streamed ", sample.layers_streamed, " of ", layers,
                          " layers' state (it does not report layer completions): the state was not exported"));
      return;
    }
    output.snapshot = TakeSnapshot(id, emission.logits, emission.hidden, /*whole=*/!request.stream_layers);
    FinishSample(id, FinishReason::kStop, std::move(output), outputs);
    return;
  }
  ++sample.generated;
  ++counters_.generated_tokens;
  const double now = Now();
  if (sample.generated == 1) sample.timings.first_token = now;

  RequestOutput output;
  output.request = sample.request;
  output.index = sample.index;
  output.time = now;
  output.tokens = {token};
  if (request.logprobs >= 0) {
    const Logprobs lp = ComputeLogprobs(emission.logits, token, request.logprobs);
    output.logprobs.push_back({token, lp.chosen});
    std::vector<TokenLogprob> top;
    for (const auto& [id_k, value] : lp.top) top.push_back({id_k, value});
    output.top_logprobs.push_back(std::move(top));
  }
  if (sample.grammar_dead_end) {
    FinishSample(id, FinishReason::kError, std::move(output), outputs,
                 "structured output: the grammar allows no token of the vocabulary here: no token's bytes continue "
                 "it, or following it would take more than 256 parses at once (the matcher's ambiguity limit; "
                 "simplify the pattern or schema)");
    return;
  }
  const StopConditions& stop = request.stop;
  // A grammar that is complete ends the sample at its end id even with ignore_eos (nothing else may follow).
  const bool grammar_done = sample.matcher && sample.matcher->ended();
  const bool end_id =
      grammar_done || (!stop.ignore_eos && std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end());
  const bool stop_id =
      std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), token) != stop.stop_token_ids.end();
  if (end_id || stop_id) {  // the stop token's own text is not returned
    FinishSample(id, FinishReason::kStop, std::move(output), outputs);
    return;
  }
  if (sample.decoder) output.text = sample.stops.Push(sample.decoder->Push(token));
  if (sample.stops.stopped()) {
    output.stop_string = sample.stops.matched();
    FinishSample(id, FinishReason::kStop, std::move(output), outputs);
  } else if (sample.generated >= record.max_tokens) {
    FinishSample(id, FinishReason::kLength, std::move(output), outputs);
  } else {
    outputs.push_back(std::move(output));
  }
}

void EngineCore::FailRequests(std::vector<RequestId> requests, const std::string& message,
                              std::vector<RequestOutput>& outputs) {
  std::sort(requests.begin(), requests.end());
  requests.erase(std::unique(requests.begin(), requests.end()), requests.end());
  for (RequestId request : requests) {
    for (SequenceId id : std::vector<SequenceId>(requests_.at(request).samples)) {
      RequestOutput output;
      output.request = request;
      output.index = samples_.at(id).index;
      output.time = Now();
      FinishSample(id, FinishReason::kError, std::move(output), outputs, message);
    }
  }
}

void EngineCore::FailMtpSequences(const std::vector<std::pair<SequenceId, Status>>& failed, size_t batch,
                                  std::vector<RequestOutput>& outputs) {
  for (const auto& [id, error] : failed) {
    LogError("engine: the MTP layer failed sequence ", id, " of a step of ", batch, ": ", error.message());
    if (samples_.count(id) != 0) FailRequests({samples_.at(id).request}, error.message(), outputs);
  }
}

Status EngineCore::Step() {
  Status status = RunStep();
  // The step's outputs (StepWork::results) are freed with it: under several ranks rank 0 must not match a later MTP
  // call's hidden input against their addresses (EngineMirror::ForgetForwardOutputs), which new buffers may reuse.
  if (mirror_ != nullptr) mirror_->ForgetForwardOutputs();
  return status;
}

Status EngineCore::RunStep() {
  Stopwatch step_clock;
  ExpireLeases();
  StepWork step;
  step.plan = scheduler_->Schedule();
  BindScheduled(step.plan);
  if (step.plan.chunks.empty()) return CheckProgress(step.plan);
  bool left = EncodeImages(step);
  if (left) {
    BuildBatch(step);
    left = RunForward(step);
  }
  if (left) {
    CountComputed(step.plan);
    ChooseNextTokens(step);
    GLINT_ASSIGN_OR_RETURN(left, DraftNextTokens(step));
  }
  if (left) {
    // Commit: positions advance (accepted drafts included); full blocks and checkpoints join the prefix cache.
    scheduler_->Complete(step.plan);
    GLINT_RETURN_IF_ERROR(ForkWaitingSamples(step));
    EmitTokens(step);
  }
  Deliver(step.outputs);
  counters_.step_seconds += step_clock.Seconds();
  if (left && check_integrity_) GLINT_RETURN_IF_ERROR(CheckIntegrity());
  return Status::Ok();
}

void EngineCore::BindScheduled(const StepPlan& plan) {
  const double now = Now();
  for (SequenceId id : plan.preempted) {
    samples_.at(id).state.reset();
    ClearDraft(id);  // it will recompute, and draft again once it decodes
  }
  for (SequenceId id : plan.admitted) {
    Bind(id);
    Sample& sample = samples_.at(id);
    if (sample.timings.first_scheduled == 0) {
      sample.timings.first_scheduled = now;
      sample.timings.cached_prompt_tokens = scheduler_->Get(id).prefix_hit_tokens;
    }
  }
}

Status EngineCore::CheckProgress(const StepPlan& plan) const {
  if (scheduler_->num_waiting() > 0 && scheduler_->num_running() == 0 && plan.preempted.empty()) {
    return InternalError("the scheduler planned nothing with ", scheduler_->num_waiting(),
                         " sequences waiting and none running");
  }
  return Status::Ok();
}

void EngineCore::BuildBatch(StepWork& step) {
  const std::vector<ScheduledChunk>& chunks = step.plan.chunks;
  step.checkpoints.resize(chunks.size());
  step.verified.resize(chunks.size());
  step.rollbacks.resize(chunks.size());
  step.emissions.resize(chunks.size());
  step.batch.reserve(chunks.size());
  step.layer_streams.reserve(chunks.size());  // the hooks point into it: no reallocation
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ScheduledChunk& chunk = chunks[i];
    // Spans into the scheduler's token lists (unchanged until sampling).
    const std::vector<int32_t>& tokens = scheduler_->Get(chunk.id).tokens;
    for (const CheckpointTarget& target : chunk.checkpoints) {
      step.checkpoints[i].push_back({target.position, target.data});
    }
    BatchEntry entry{std::span<const int32_t>(tokens.data() + chunk.start, chunk.count),
                     samples_.at(chunk.id).state.get(), chunk.samples ? LogitsWanted::kLast : LogitsWanted::kNone,
                     /*want_hidden=*/speculative(), step.checkpoints[i]};
    if (chunk.draft > 0) {
      // Verification: the last token and the first `draft` drafts after it, logits for every row, and the KDA
      // state after each row but the last kept in case the draft after that row is rejected.
      const std::vector<int32_t>& drafts = samples_.at(chunk.id).drafts;
      step.verified[i] = {tokens[chunk.start]};
      step.verified[i].insert(step.verified[i].end(), drafts.begin(), drafts.begin() + chunk.draft);
      for (int64_t k = 0; k < chunk.draft; ++k) {
        step.rollbacks[i].push_back({chunk.start + 1 + k, RollbackData(chunk.id, k)});
      }
      entry.tokens = step.verified[i];
      entry.logits = LogitsWanted::kAll;
      entry.rollback = step.rollbacks[i];
    }
    AttachImageRows(step, i, entry);
    const Sample& sample = samples_.at(chunk.id);
    if (chunk.samples && Exports(sample) && requests_.at(sample.request).request.stream_layers) {
      step.layer_streams.push_back({this, chunk.id});  // the prompt's last chunk: its layers go out as they finish
      entry.layer_done = {&EngineCore::OnLayerDone, &step.layer_streams.back()};
    }
    step.batch.push_back(entry);
  }
}

bool EngineCore::RunForward(StepWork& step) {
  Stopwatch model_clock;
  Status forward = model_.Forward(step.batch, step.results, options_.forward);
  // A mapped weights file that shrank under the process reads as zeros past its end (base/file.h): the step computed
  // with weights that are not the model's, so none of its results may go out — every entry fails, whatever the
  // model said of each (without results, FailForwardEntries fails them all).
  if (MappingFaults() > 0) {
    forward = MappingDamage();
    step.results.clear();
  }
  counters_.model_seconds += model_clock.Seconds();
  ++counters_.steps;
  if (forward.ok()) return true;
  LogError("engine: the model failed a step of ", step.plan.chunks.size(), " sequences: ", forward.message());
  FailForwardEntries(step, forward);
  return KeepUnfinished(step);
}

void EngineCore::FailForwardEntries(StepWork& step, const Status& forward) {
  // The model refused or failed: the requests of the entries it names (results[i].error: an expert read failed
  // for their rows), or of every entry when it names none, end with the error; the others go on with the step.
  const std::vector<EntryOutput>& results = step.results;
  const bool scoped = results.size() == step.batch.size() &&
                      std::any_of(results.begin(), results.end(), [](const EntryOutput& r) { return !r.error.ok(); });
  std::vector<std::pair<RequestId, std::string>> failed;
  for (size_t i = 0; i < step.plan.chunks.size(); ++i) {
    if (scoped && results[i].error.ok()) continue;
    failed.push_back(
        {samples_.at(step.plan.chunks[i].id).request, scoped ? results[i].error.message() : forward.message()});
  }
  for (const auto& [request, message] : failed) {
    if (requests_.count(request) != 0) FailRequests({request}, message, step.outputs);
  }
}

bool EngineCore::KeepUnfinished(StepWork& step) const {
  // A failed request's other samples may be in the batch too: every chunk whose sample is gone leaves the step.
  StepPlan& plan = step.plan;
  size_t kept = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    if (samples_.count(plan.chunks[i].id) == 0) {
      plan.tokens -= plan.chunks[i].count + plan.chunks[i].draft;
      continue;
    }
    plan.chunks[kept] = std::move(plan.chunks[i]);
    step.results[kept] = std::move(step.results[i]);
    step.emissions[kept] = std::move(step.emissions[i]);
    ++kept;
  }
  plan.chunks.resize(kept);
  step.results.resize(kept);
  step.emissions.resize(kept);
  return !plan.chunks.empty();
}

void EngineCore::CountComputed(const StepPlan& plan) {
  counters_.computed_tokens += plan.tokens;
  for (const ScheduledChunk& chunk : plan.chunks) {
    const int64_t prompt_end = std::min(chunk.start + chunk.count, scheduler_->Get(chunk.id).prompt_length);
    counters_.prompt_tokens_computed += std::max<int64_t>(prompt_end - chunk.start, 0);
  }
}

void EngineCore::ChooseNextTokens(StepWork& step) {
  // The next token of every chunk that reached its sequence's last token. Drawing one costs ≈ 2 ms at a 154,880-
  // token vocabulary (sort, softmax), so the plain samples — no draft to verify, no grammar (whose mask is one
  // scratch) — draw theirs on the model's workers first, idle between passes: each draws from its own generator
  // and reads only its own state, so the tokens are the same in any order. The rest stays serial, in chunk order.
  const std::vector<ScheduledChunk>& chunks = step.plan.chunks;
  std::vector<size_t> plain;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Sample& sample = samples_.at(chunks[i].id);
    if (chunks[i].samples && chunks[i].draft == 0 && !sample.matcher && !Exports(sample)) plain.push_back(i);
  }
  std::vector<int32_t> chosen(chunks.size(), -1);
  WorkerPool* pool = model_.worker_pool();
  if (pool != nullptr && pool->size() > 1 && plain.size() > 1) {
    pool->Run(static_cast<int64_t>(plain.size()), [&](int64_t k, int) {
      const size_t i = plain[k];
      chosen[i] = ChooseToken(samples_.at(chunks[i].id), step.results[i].logits);
    });
  }
  const int64_t d = model_.config().hidden_size;
  for (size_t i = 0; i < chunks.size(); ++i) {
    ScheduledChunk& chunk = step.plan.chunks[i];
    if (!chunk.samples) continue;
    const EntryOutput& result = step.results[i];
    if (Exports(samples_.at(chunk.id))) {
      // A prefill for another engine: no token here, the state goes out (EmitToken) — with speculation, with the
      // last position's hidden row, the h of the MTP pair that engine runs once it has drawn the token.
      const std::span<const float> hidden(result.hidden);
      step.emissions[i].push_back(
          {chunk.id, kExportToken, result.logits, hidden.empty() ? hidden : hidden.last(static_cast<size_t>(d))});
      continue;
    }
    ChooseChunkTokens(chunk, result.logits, step.emissions[i], chosen[i]);
  }
}

void EngineCore::ChooseChunkTokens(ScheduledChunk& chunk, std::span<const float> logits,
                                   std::vector<Emission>& emissions, int32_t chosen) {
  Sample& sample = samples_.at(chunk.id);
  if (chunk.draft == 0) {
    ClearDraft(chunk.id);  // a draft the scheduler had no room to verify is dropped
    const int32_t token = chosen >= 0 ? chosen : ChooseToken(sample, logits);
    Append(chunk.id, token);
    emissions.push_back({chunk.id, token, logits});
    return;
  }
  // A verification keeps or replaces each draft in turn (draft k against row k), up to the first it replaces;
  // when every draft is kept, the last row gives one more token; when not, the KDA state goes back to the
  // snapshot after the last accepted token.
  const int64_t vocab = model_.config().vocab_size;
  const auto row = [&](int64_t k) { return logits.subspan(k * vocab, vocab); };
  ++counters_.spec_drafts;
  counters_.spec_draft_tokens += chunk.draft;
  for (int64_t k = 0; k < chunk.draft; ++k) ++counters_.spec_drafted_per_position[k];
  int64_t accepted = 0;
  for (; accepted < chunk.draft; ++accepted) {
    const auto [token, kept] = VerifyDraft(sample, accepted, row(accepted));
    Append(chunk.id, token);
    emissions.push_back({chunk.id, token, row(accepted)});
    if (!kept) break;
    ++counters_.spec_accepted_tokens;
    ++counters_.spec_accepted_per_position[accepted];
  }
  ClearDraft(chunk.id);
  chunk.accepted = accepted;
  if (accepted == chunk.draft) {
    // The bonus token. Always chosen, so that every position has its next token (the MTP pairs and the
    // prefix-cache keys need it); a sample that stops before it never hands it out.
    const int32_t bonus = ChooseToken(sample, row(chunk.draft));
    Append(chunk.id, bonus);
    emissions.push_back({chunk.id, bonus, row(chunk.draft)});
    return;
  }
  RollBack(*sample.state, RollbackData(chunk.id, accepted), chunk.start + accepted + 1);
  if (mirror_ != nullptr) {
    mirror_->OnCopy(sample.state->memory.slot, RollbackData(chunk.id, accepted), layout_->checkpoint_bytes);
  }
}

Result<bool> EngineCore::DraftNextTokens(StepWork& step) {
  // The MTP layer over every chunk's new positions (pairs need the tokens chosen above), which drafts the next
  // token of the sequences that decode next; then the checkpoints whose key became known.
  if (!speculative()) return true;
  std::vector<MtpWork> work;
  for (size_t i = 0; i < step.plan.chunks.size(); ++i) {
    work.push_back({step.plan.chunks[i].id, step.results[i].hidden, step.plan.chunks[i].start});
  }
  std::vector<std::pair<SequenceId, Status>> failed;
  GLINT_RETURN_IF_ERROR(RunMtp(work, failed));
  if (!failed.empty()) {
    // As a failed Forward: the requests whose MTP pass failed end with the error (their memory is freed), the
    // others go on with the step.
    FailMtpSequences(failed, step.plan.chunks.size(), step.outputs);
    if (!KeepUnfinished(step)) return false;
  }
  for (const ScheduledChunk& chunk : step.plan.chunks) {
    GLINT_RETURN_IF_ERROR(TakeEndCheckpoints(chunk.id, chunk.start, chunk.draft));
  }
  return true;
}

Status EngineCore::ForkWaitingSamples(StepWork& step) {
  // The first time a parent has computed its prompt, its waiting siblings start as copies of it and draw their
  // first token from the same logits (with speculation, each then runs its own MTP pair for that token).
  const bool mtp = speculative();
  for (size_t i = 0; i < step.plan.chunks.size(); ++i) {
    const ScheduledChunk& chunk = step.plan.chunks[i];
    if (!chunk.samples) continue;
    const SequenceInfo& info = scheduler_->Get(chunk.id);
    if (info.computed != info.prompt_length) continue;
    const EntryOutput& result = step.results[i];
    const std::vector<Emission> forked =
        ForkChildren(chunk.id, result.logits, result.hidden, chunk.start, step.children_work);
    step.emissions[i].insert(step.emissions[i].begin(), forked.begin(), forked.end());
  }
  if (mtp) GLINT_RETURN_IF_ERROR(RunChildrenMtp(step.children_work, step.outputs));
  CommitChildren(step.children_work);
  return Status::Ok();
}

Status EngineCore::RunChildrenMtp(const std::vector<MtpWork>& children_work, std::vector<RequestOutput>& outputs) {
  // The parents' identical pairs just succeeded, but an expert read may still fail (the request then ends).
  std::vector<std::pair<SequenceId, Status>> failed;
  GLINT_RETURN_IF_ERROR(RunMtp(children_work, failed));
  FailMtpSequences(failed, children_work.size(), outputs);
  for (const MtpWork& w : children_work) {
    if (samples_.count(w.id) != 0) GLINT_RETURN_IF_ERROR(TakeEndCheckpoints(w.id, 0, 0));
  }
  return Status::Ok();
}

std::vector<EngineCore::Emission> EngineCore::ForkChildren(SequenceId parent, std::span<const float> logits,
                                                           std::span<const float> hidden, int64_t start,
                                                           std::vector<MtpWork>& children_work) {
  const SequenceInfo& info = scheduler_->Get(parent);
  std::vector<Emission> forked;
  for (SequenceId child : scheduler_->Children(parent)) {
    if (!scheduler_->Fork(child)) continue;               // no memory now: it computes its prompt itself later
    Bind(child, speculative() ? info.computed - 1 : -1);  // the MTP pair of the last prompt position is its own
    Sample& sample = samples_.at(child);
    sample.timings.first_scheduled = Now();
    sample.timings.cached_prompt_tokens = info.prompt_length;
    const int32_t token = ChooseToken(sample, logits);
    Append(child, token);
    forked.push_back({child, token, logits});
    children_work.push_back({child, hidden, start});
  }
  return forked;
}

void EngineCore::CommitChildren(const std::vector<MtpWork>& children_work) {
  for (const MtpWork& w : children_work) {
    if (samples_.count(w.id) == 0) continue;
    const SequenceInfo& child = scheduler_->Get(w.id);
    MemoryOf(w.id).Commit(w.id, scheduler_->Keys(w.id),
                          child.computed);  // with the MTP rows written, its blocks may be cached
  }
}

void EngineCore::EmitTokens(StepWork& step) {
  // Stop checks, text, outputs. A sample that finishes at a token hands out no more.
  for (const std::vector<Emission>& chunk_emissions : step.emissions) {
    for (const Emission& emission : chunk_emissions) {
      if (samples_.count(emission.id) != 0) EmitToken(emission, step.outputs);
    }
  }
}

void EngineCore::Cancel(RequestId id) {
  auto found = requests_.find(id);
  if (found == requests_.end()) return;
  std::vector<RequestOutput> outputs;
  for (SequenceId sequence : std::vector<SequenceId>(found->second.samples)) {
    RequestOutput output;
    output.request = id;
    output.index = samples_.at(sequence).index;
    output.time = Now();
    FinishSample(sequence, FinishReason::kCancelled, std::move(output), outputs);
  }
  Deliver(outputs);
}

void EngineCore::FailAll(const std::string& message, FinishReason reason) {
  std::vector<RequestOutput> outputs;
  for (auto& [id, record] : requests_) {
    for (SequenceId sequence : std::vector<SequenceId>(record.samples)) {
      RequestOutput output;
      output.request = id;
      output.index = samples_.at(sequence).index;
      output.time = Now();
      FinishSample(sequence, reason, std::move(output), outputs, message);
    }
  }
  Deliver(outputs);
}

EngineMetrics EngineCore::Metrics() const {
  EngineMetrics m = counters_;
  m.sequences_running = scheduler_->num_running();
  m.sequences_waiting = scheduler_->num_waiting();
  for (const auto& [id, record] : requests_) {
    const bool running = std::any_of(record.samples.begin(), record.samples.end(), [&](SequenceId sequence) {
      return scheduler_->Get(sequence).status == SequenceStatus::kRunning;
    });
    ++(running ? m.requests_running : m.requests_waiting);
  }
  m.preemptions = scheduler_->num_preemptions();
  m.cache = memories_[0]->Stats();
  for (size_t p = 1; p < memories_.size(); ++p) AddCacheStats(m.cache, memories_[p]->Stats());
  if (model_.shard_plan().dp_attention) {
    for (const auto& memory : memories_) m.cache_by_rank.push_back(memory->Stats());
  } else {
    m.cache_by_rank.assign(static_cast<size_t>(std::max(1, model_.shard_plan().ranks)), m.cache);
  }
  return m;
}

Status EngineCore::CheckIntegrity() const {
  GLINT_RETURN_IF_ERROR(scheduler_->CheckIntegrity());
  for (const auto& [id, sample] : samples_) {
    if (!scheduler_->Contains(id)) return InternalError("engine: sample ", id, " is unknown to the scheduler");
    const SequenceInfo& info = scheduler_->Get(id);
    const bool running = info.status == SequenceStatus::kRunning;
    if (running != (sample.state != nullptr)) {
      return InternalError("engine: sample ", id, " running=", running, " but has_state=", sample.state != nullptr);
    }
    if (running && sample.state->tokens != info.computed) {
      return InternalError("engine: sample ", id, " model state has ", sample.state->tokens, " positions, ",
                           info.computed, " computed");
    }
    if (running && model_.shard_plan().dp_attention && sample.state->attention_rank != info.partition) {
      return InternalError("engine: sample ", id, " runs attention on rank ", sample.state->attention_rank,
                           " but its memory is in rank ", info.partition, "'s partition");
    }
    if (running && speculative() && sample.state->mtp_tokens != info.computed) {
      return InternalError("engine: sample ", id, " MTP layer has ", sample.state->mtp_tokens, " pairs, ",
                           info.computed, " positions computed");
    }
    if (info.drafts != static_cast<int64_t>(sample.drafts.size())) {
      return InternalError("engine: sample ", id, " has ", sample.drafts.size(), " drafts, the scheduler ",
                           info.drafts);
    }
  }
  int64_t listed = 0;
  for (const auto& [id, record] : requests_) listed += static_cast<int64_t>(record.samples.size());
  if (listed != static_cast<int64_t>(samples_.size())) {
    return InternalError("engine: requests list ", listed, " samples, ", samples_.size(), " exist");
  }
  return Status::Ok();
}

}  // namespace glint
