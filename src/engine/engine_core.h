// The engine without its thread: requests in, one scheduler step at a time, outputs to each request's sink.
// Engine (engine.h) runs it on its own thread; tests drive it step by step. Not thread-safe except Validate.
//
// A step (docs/engine.md "A step"): Schedule (memory, preemption, admission with prefix-cache lookup) → bind the
// newly admitted sequences to their memory → Model::Forward over the ragged batch → for each chunk that reached
// its last token: the next token (with speculative decoding: the draft verified, rolled back if rejected, and the
// bonus token) → the MTP layer over the new positions and the next drafts → commit the computed positions
// (blocks join the prefix cache, checkpoints are taken) → fork the waiting n > 1 samples → check stops, stream →
// free what finished.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/timer.h"
#include "engine/capacity.h"
#include "engine/request.h"
#include "engine/sampling.h"
#include "engine/scheduler.h"
#include "engine/stop.h"
#include "memory/cache_manager.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "vision/image_encoder.h"

namespace glint {

struct EngineMetrics {
  int64_t requests_running = 0;  // requests with a sample in memory
  int64_t requests_waiting = 0;  // requests with no sample in memory (queued, or preempted)
  int64_t sequences_running = 0, sequences_waiting = 0;
  int64_t requests_submitted = 0, requests_finished = 0;
  int64_t finished_stop = 0, finished_length = 0, finished_cancelled = 0, finished_error = 0;
  int64_t prompt_tokens = 0;  // of submitted requests (× n is not counted: the prompt is computed once)
  int64_t generated_tokens = 0;
  int64_t computed_tokens = 0;         // positions run through the model: prefill, decode and recompute
  int64_t prompt_tokens_computed = 0;  // of which prompt positions (prefix-cache hits and forks skip them)
  int64_t steps = 0;
  int64_t preemptions = 0;
  double step_seconds = 0;     // time spent in steps
  double model_seconds = 0;    // of which in the model (Forward, and MtpForwardBatch with speculation)
  double mtp_seconds = 0;      // of which in the MTP layer
  double deliver_seconds = 0;  // of which in the sinks (OutputQueue: waking the waiting thread)
  CacheStats cache;            // pool usage, prefix hits, evictions, checkpoints (every partition together)
  // [ranks] the same, of the pools each rank holds: under --dp-attention its own partition (docs/distributed.md
  // "Attention data-parallel"), otherwise `cache` (every rank holds a copy of the pools); one entry for one process.
  std::vector<CacheStats> cache_by_rank;
  // Speculative decoding (--speculative mtp): verification steps (1 .. K drafted tokens each), drafted tokens
  // verified, drafted tokens accepted, and accepted tokens by draft position ([K], --speculative-tokens K; empty
  // when speculation is off). A draft counts at position k only when the k − 1 before it were accepted, so the
  // counts never grow with k.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_position;
  std::vector<int64_t> spec_drafted_per_position;  // [K] verifications that had a draft at position k
  // Images (docs/vision.md "In the engine"): of submitted requests, and those the tower ran for (a prefix-cache
  // hit past an image skips it); the tower's time is part of step_seconds, not of model_seconds.
  int64_t images = 0, image_tokens = 0;
  int64_t images_encoded = 0, image_tokens_encoded = 0;
  double vision_seconds = 0;
};

// The most drafts a sequence at `end` positions can verify, with indexer pools of `kpool` positions, without a
// rejection losing rows of a filling pool (engine_draft.cc).
int64_t PoolSafeDrafts(int64_t end, int64_t kpool);

// "A of D drafted tokens accepted (x %; by position: a %, b %, …)", each position's share of the verifications
// that drafted there; "off" without speculation. For run and bench-engine.
std::string DescribeSpeculation(const EngineMetrics& metrics);

// Prefill/decode disaggregation under several ranks (docs/disaggregation.md "Several ranks"): Ok when rank 0's pools
// hold every sequence's whole state (replicated attention, the KDA heads not split), else what is not supported.
Status CheckStateOnRankZero(const ShardPlan& plan);

class EngineCore {
 public:
  // Lays out the caches, plans the capacity and allocates every pool. `tokenizer` (optional, not owned) is needed
  // for text output and stop strings; `images` (optional, not owned) is the vision tower requests with images need.
  static Result<std::unique_ptr<EngineCore>> Create(const Model& model, const EngineOptions& options,
                                                    const Tokenizer* tokenizer = nullptr,
                                                    ImageEncoder* images = nullptr);
  ~EngineCore();  // detaches the pools from the model's mirror

  // Checks a request against the model and the limits (thread-safe: reads only what Create fixed).
  Status Validate(const Request& request) const;
  // Validates and queues the request under `id` (unique, chosen by the caller).
  Status Add(RequestId id, Request request);
  // Finishes every sample of the request as cancelled and frees its memory; unknown ids are ignored.
  void Cancel(RequestId id);
  // Finishes every request with an error (the engine is stopping or broken).
  void FailAll(const std::string& message, FinishReason reason = FinishReason::kError);

  // Prefill/decode disaggregation (docs/disaggregation.md). Reserves a slot and the blocks of a sequence of
  // `tokens` positions whose state will arrive from another engine (Request::imported with this lease), for at
  // most `seconds` on the engine clock: past that ExpireLeases frees it. `lease` is the caller's unique id.
  // ResourceExhausted when the memory is not free now; InvalidArgument for a prompt that cannot be served.
  Status Lease(uint64_t lease, int64_t tokens, double seconds);
  // Frees a lease (unknown ids are ignored: it expired or was used).
  void ReleaseLease(uint64_t lease);
  // Frees the leases whose time is up (Step calls it too); how many.
  int64_t ExpireLeases();
  int64_t num_leases() const { return static_cast<int64_t>(leases_.size()); }
  // Positions of `prompt` a new sequence would restore from the prefix cache in memory now (no side effects).
  int64_t CachedPrefix(std::span<const int32_t> prompt) const;
  // The prefix-cache keys of a validated request's prompt: its tokens, each image placeholder keyed by its image's
  // hash (ImageKeyTokens). Thread-safe (reads only what Create fixed): the lease's prefix lookup uses them, so a
  // prompt with images is looked up as the scheduler will store it.
  std::vector<int32_t> PrefixKeys(const Request& request) const;
  // Seconds until the next lease expires (nullopt: none), for a thread that waits for work.
  std::optional<double> SecondsToNextExpiry() const;

  bool HasWork() const { return !requests_.empty(); }
  // One step. A model failure finishes the requests of the batch with kError and is not returned; an error here
  // means the engine itself is inconsistent.
  Status Step();

  EngineMetrics Metrics() const;
  const Model& model() const { return model_; }
  const CapacityReport& capacity() const { return capacity_; }
  const EngineOptions& options() const { return options_; }
  const CacheLayout& layout() const { return *layout_; }
  // The layout of the states it exports and imports (docs/disaggregation.md): the whole model's, which is layout()
  // unless tensor parallelism splits the KDA heads (then a rank's slot holds its own heads only).
  const CacheLayout& transfer_layout() const { return *transfer_layout_; }
  // The cache pools: one partition, or one per rank under --dp-attention (rank r's sequences in partition r).
  const CacheManager& memory(int partition = 0) const { return *memories_.at(partition); }
  int num_partitions() const { return static_cast<int>(memories_.size()); }
  const Scheduler& scheduler() const { return *scheduler_; }
  // Checks the scheduler, the memory and the model states after every step (tests).
  void set_check_integrity(bool on) { check_integrity_ = on; }
  Status CheckIntegrity() const;

 private:
  struct Sample {
    RequestId request = 0;
    int64_t index = 0;
    Sampler sampler;
    TokenHistory history;
    std::optional<StreamingDecoder> decoder;
    StopStringMatcher stops;
    int64_t generated = 0;
    SequenceTimings timings;
    std::unique_ptr<SequenceState> state;  // while running
    // Speculative decoding: the tokens drafted for the positions after the next one (empty: none), and the
    // distributions q they were drawn from when sampling (empty when greedy).
    std::vector<int32_t> drafts = {};
    std::vector<TokenDistribution> draft_distributions = {};
    // Structured output: the grammar state after the sample's appended tokens (it depends on the tokens only, so
    // preemption, recompute and prefix-cache hits leave it as it is), and whether the grammar allowed no token.
    std::optional<grammar::Matcher> matcher = {};
    bool grammar_dead_end = false;
    int64_t layers_streamed = 0;  // Request::stream_layers: layers whose state went out (StreamLayer)
  };
  // A token to hand out at the end of the step, with the logits row it was chosen from (for logprobs). An export's
  // (kExportToken) also carries the last prompt position's hidden row when the MTP layer runs (for the snapshot).
  struct Emission {
    SequenceId id = 0;
    int32_t token = 0;
    std::span<const float> logits;
    std::span<const float> hidden = {};
  };
  // An image of a request: its rows [tokens, D] once the tower ran (kept while the request lives, so recompute
  // after preemption and the n samples share them).
  struct ImageRows {
    int64_t start = 0, tokens = 0;
    std::vector<float> rows;
    bool encoded = false;
  };
  struct RequestRecord {
    Request request;  // prompt moved to the scheduler
    int64_t max_tokens = 0;
    std::vector<SequenceId> samples;  // unfinished samples
    std::vector<ImageRows> images;    // [request.images]
  };

  EngineCore(const Model& model, const EngineOptions& options, const Tokenizer* tokenizer, ImageEncoder* images);
  // Create's parts: the cache partitions (attached to the mirror of a multi-rank leader), and the end ids and the
  // structured-output vocabulary.
  Status CreatePools();
  Status SetEndIds();
  // The partition holding the live sequence's memory.
  CacheManager& MemoryOf(SequenceId id) const { return *memories_[scheduler_->Get(id).partition]; }
  double Now() const { return clock_.Seconds(); }
  bool speculative() const { return options_.speculative != SpeculativeMethod::kNone; }
  // Binds the sequence to its memory; the MTP layer holds `mtp_tokens` pairs (−1: as many as computed positions).
  void Bind(SequenceId id, int64_t mtp_tokens = -1);
  // Penalties, then the structured-output mask: `logits` [V] as the sampler sees them.
  std::vector<float> SamplerLogits(Sample& sample, std::span<const float> logits);
  // The next token of the sample from `logits` [V] (penalties, mask, then the sampler); changes only the sampler.
  int32_t ChooseToken(Sample& sample, std::span<const float> logits);
  // Verifies the sample's draft k against `logits` [V] of its position: (the token there, the draft was kept).
  std::pair<int32_t, bool> VerifyDraft(Sample& sample, size_t k, std::span<const float> logits);
  // The token joins the sample's history and the scheduler's tokens.
  void Append(SequenceId id, int32_t token);
  void ClearDraft(SequenceId id);
  // The MTP layer, in one batch, over the pairs (h_p, x_{p+1}) of the positions each sequence computed since its
  // last run (`hidden` [rows, D]: its rows of the step, from `first_position`), then the draft for the next decode
  // of those that decode next. An error is the model's (the caller fails the requests).
  struct MtpWork {
    SequenceId id = 0;
    std::span<const float> hidden;
    int64_t first_position = 0;
  };
  // An export that streams (Request::stream_layers) in its last prompt chunk: the context of its entry's LayerDone.
  struct LayerStream {
    EngineCore* core = nullptr;
    SequenceId id = 0;
  };
  // Step's work, its StepWork freed on return.
  Status RunStep();
  // What one step builds and computes, passed from phase to phase of Step. The batch's entries point into
  // `checkpoints`, `verified` and `rollbacks`; `results` and `emissions` are indexed like `plan.chunks`.
  struct StepWork {
    StepPlan plan;
    std::vector<BatchEntry> batch;                          // [chunks]
    std::vector<std::vector<StateCheckpoint>> checkpoints;  // [chunks][targets]
    std::vector<std::vector<int32_t>> verified;             // [chunks] (last token, drafts…) of a verification
    std::vector<std::vector<StateCheckpoint>> rollbacks;  // [chunks][drafts] the KDA state after each row but the last
    std::vector<EntryOutput> results;                     // [chunks] the model's
    std::vector<std::vector<Emission>> emissions;         // [chunks] tokens to hand out, in order
    std::vector<MtpWork> children_work;                   // forked samples' MTP pairs
    std::vector<RequestOutput> outputs;                   // delivered at the end of the step
    std::vector<std::vector<int32_t>> image_indices;      // [chunks][rows] token indices taking image rows
    std::vector<std::vector<float>> image_rows;           // [chunks][rows, D]
    std::vector<LayerStream> layer_streams;               // the contexts of the batch's LayerDone hooks
  };
  // Disaggregation: the state after the prompt as a snapshot (export_state), and the imported request's start:
  // its snapshot copied into the leased memory, its first token drawn (and its n − 1 siblings forked) and handed
  // out at once.
  // With `whole` false (a streamed export): the token count, the logits and the MTP layer's part only. `hidden`: the
  // last prompt position's row (speculation; empty without).
  std::shared_ptr<const SequenceSnapshot> TakeSnapshot(SequenceId id, std::span<const float> logits,
                                                       std::span<const float> hidden, bool whole) const;
  // Streaming: the LayerDone hook of an export's last chunk, and what it does — layer l of the sequence packed
  // (LayerState) and handed to the request's sink at once, from inside the forward pass.
  static void OnLayerDone(void* stream, int64_t layer);
  void StreamLayer(SequenceId id, int64_t layer);
  std::vector<std::byte> PackLayer(SequenceId id, int64_t layer) const;
  // `regions` of the sequence's slot and of each block covering its prompt, packed in order (LayerState's order).
  std::vector<std::byte> PackRegions(SequenceId id, std::span<const CacheRegion> regions) const;
  Status ValidateImport(const Request& request) const;
  // With speculation, the imported sequence's first token then runs the MTP pair of the last prompt position (whose
  // hidden row came with the state), as the last prefill chunk's MTP batch does on one engine: it drafts at once.
  // An error is the engine's own inconsistency.
  Status StartImported(SequenceId id);
  // The waiting samples of `parent` start as copies of it and draw their first token from `logits`; their MTP
  // pairs (with `hidden` rows from `start`) go to `children_work`.
  std::vector<Emission> ForkChildren(SequenceId parent, std::span<const float> logits, std::span<const float> hidden,
                                     int64_t start, std::vector<MtpWork>& children_work);
  // With speculation, the forked children's own MTP pairs (a child whose pass fails ends its request), then the
  // checkpoints whose key their first token made known. An error is the engine's.
  Status RunChildrenMtp(const std::vector<MtpWork>& children_work, std::vector<RequestOutput>& outputs);
  // Commits the forked children's positions (their full blocks may join the prefix cache).
  void CommitChildren(const std::vector<MtpWork>& children_work);
  // The leased sequence's slot and blocks take the snapshot's bytes (sizes checked by ValidateImport).
  void CopySnapshotIn(SequenceId id, const SequenceSnapshot& snapshot);
  bool Exports(const Sample& sample) const { return requests_.at(sample.request).request.export_state; }
  // Emission::token of an export: the state goes out instead of a token.
  static constexpr int32_t kExportToken = -1;
  // Images (engine_images.cc). The checks of a request's images against the prompt and the tower.
  Status ValidateImages(const Request& request) const;
  // The prefix-cache keys of a prompt with images (Scheduler::Add): each placeholder position gets a value from its
  // image's hash with the top bit set, so it never equals a text token and different images never share a block.
  static std::vector<int32_t> ImageKeyTokens(const Request& request, const std::vector<ImageRows>& images);
  // ImageCost of the scheduler: the tokens of the images a chunk reaches that are not encoded yet.
  int64_t ImageBudget(SequenceId id, int64_t start, int64_t& count, int64_t budget) const;
  // Runs the tower for every image a scheduled chunk reaches that has no rows yet; a failure fails its request.
  // False when no chunk is left.
  bool EncodeImages(StepWork& step);
  // The image rows of chunk i (its positions' indices and rows gathered into `step`), set on `entry`.
  void AttachImageRows(StepWork& step, size_t i, BatchEntry& entry);
  // Runs the tower for image k of `record` and keeps its rows (counted in the metrics); errors name the image.
  Status EncodeImage(RequestRecord& record, size_t k);
  // The image rows of positions first .. first + count − 1 of sequence `id` (the MTP pairs' next tokens): indices
  // relative to `first` and rows appended. Encodes an image not encoded yet (a chunk that ended just before it).
  Status MtpImageRows(SequenceId id, int64_t first, int64_t count, std::vector<int32_t>& indices,
                      std::vector<float>& rows);
  // The phases of Step, in order (docs/engine.md "A step"). A phase that returns false (or a Result of false) has
  // failed every request left in the step: the step ends there, delivering what it has. An error is the engine's.
  void BindScheduled(const StepPlan& plan);
  Status CheckProgress(const StepPlan& plan) const;  // a step with no chunk: fine unless nothing can ever run
  void BuildBatch(StepWork& step);
  bool RunForward(StepWork& step);
  void CountComputed(const StepPlan& plan);
  void ChooseNextTokens(StepWork& step);
  // `chosen`: the token ChooseNextTokens already drew for a plain sample (no draft, no grammar), else −1.
  void ChooseChunkTokens(ScheduledChunk& chunk, std::span<const float> logits, std::vector<Emission>& emissions,
                         int32_t chosen);
  Result<bool> DraftNextTokens(StepWork& step);
  Status ForkWaitingSamples(StepWork& step);
  void EmitTokens(StepWork& step);
  // The failure path of every phase: the chunks whose samples finished (their requests failed) leave the step;
  // whether any chunk is left.
  bool KeepUnfinished(StepWork& step) const;
  // Fails the requests of the entries a failed Forward names (or of every entry when it names none).
  void FailForwardEntries(StepWork& step, const Status& forward);
  // Sequences whose MTP pass failed alone (an expert read) go to `failed` with the error (they draft nothing; the
  // caller fails their requests); the error return is the engine's own inconsistency.
  Status RunMtp(std::span<const MtpWork> work, std::vector<std::pair<SequenceId, Status>>& failed);
  // Draft k of the sample from the MTP layer's `logits` [V] (penalties and mask as the verification will apply
  // them: the history then holds the drafts before k).
  void DrawDraft(Sample& sample, std::span<const float> logits);
  // --speculative-tokens K > 1: drafts 2 .. K of the sequences in `ids`, the MTP layer applied to its own output
  // (`hidden` [D] per sequence: its normed output at the last pair) and the draft before, one batch per depth.
  // The chain's pairs are written past each MTP cache's length, which goes back afterwards: the verified pairs
  // overwrite them (docs/engine.md "Speculative decoding").
  Status ChainDrafts(std::vector<SequenceId> ids, std::vector<std::vector<float>> hidden,
                     std::vector<std::pair<SequenceId, Status>>& failed);
  // Fails the requests of the sequences whose MTP pass failed (logged with the step's size).
  void FailMtpSequences(const std::vector<std::pair<SequenceId, Status>>& failed, size_t batch,
                        std::vector<RequestOutput>& outputs);
  // How many tokens the sequence drafts after this step (0 .. K): none unless its next position holds a generated
  // token (the prompt's last position is computed alone: n > 1 samples fork right after it); at most as many as
  // let its next decode hand out every token within max_tokens.
  int64_t DraftsWanted(SequenceId id) const;
  // Speculative decoding with prefix caching: the checkpoints whose key became known this step (positions up to the
  // sequence's new length), copied from the slot or from the rollback snapshots of a verification of `drafts`
  // tokens from `start` (snapshot k at start + 1 + k).
  Status TakeEndCheckpoints(SequenceId id, int64_t start, int64_t drafts);
  // Rollback snapshot k (0 .. K − 1) of the sequence's slot.
  std::byte* RollbackData(SequenceId id, int64_t k) const;
  // Hands out a chosen token: counts, logprobs, stop checks, text; adds to `outputs`.
  void EmitToken(const Emission& emission, std::vector<RequestOutput>& outputs);
  // Finishes every sample of these requests with kError and `message`.
  void FailRequests(std::vector<RequestId> requests, const std::string& message, std::vector<RequestOutput>& outputs);
  // Ends a sample: final output (flushing held text unless stopped by a stop string), memory freed.
  void FinishSample(SequenceId id, FinishReason reason, RequestOutput output, std::vector<RequestOutput>& outputs,
                    const std::string& error = {});
  void Deliver(std::vector<RequestOutput>& outputs);

  const Model& model_;
  EngineOptions options_;
  const Tokenizer* tokenizer_;
  ImageEncoder* images_;  // null: requests with images are refused
  std::vector<int32_t> end_ids_;
  std::unique_ptr<grammar::TokenVocabulary> vocabulary_;  // structured output: the tokenizer's byte strings [V]
  grammar::TokenMask mask_;                               // scratch: the allowed tokens of one sample
  std::shared_ptr<const CacheLayout> layout_;
  std::shared_ptr<const CacheLayout> transfer_layout_;  // layout_, or the whole model's at --tp > 1 (KDA heads split)
  CapacityReport capacity_;
  // [partitions]: one (mirrored by every rank), or one per rank under --dp-attention, of which this process (rank
  // 0) holds only the first's memory and books the others' (CacheManagerOptions::backed).
  std::vector<std::unique_ptr<CacheManager>> memories_;
  ItemArena rollback_;  // speculative decoding: one KDA-state snapshot per slot (capacity_.rollback_bytes each)
  std::unique_ptr<Scheduler> scheduler_;
  std::map<RequestId, RequestRecord> requests_;
  std::map<SequenceId, Sample> samples_;
  SequenceId next_sequence_ = 0;
  int64_t next_arrival_ = 0;
  Stopwatch clock_;
  bool check_integrity_ = false;
  EngineMirror* mirror_ = nullptr;     // the model's (multi-rank leader), told of the pools and of every copy
  std::vector<int64_t> mirror_pools_;  // [partitions] their ids at the mirror
  EngineMetrics counters_;             // the cumulative fields
  struct LeaseRecord {
    SequenceId sequence = 0;
    int64_t tokens = 0;
    double deadline = 0;  // engine clock
  };
  std::map<uint64_t, LeaseRecord> leases_;
};

}  // namespace glint
