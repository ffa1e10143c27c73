// The scheduler: which sequences compute which tokens in the next step (docs/engine.md "Scheduling").
//
// Every sequence has `tokens` (prompt, then generated tokens) and `computed`, the positions whose caches are in
// memory; a step computes a chunk tokens[computed, computed + n) of some sequences. Prefill, chunked prefill,
// decode, recompute after preemption and resumption after a prefix-cache hit are all this one arithmetic (the
// vLLM v1 formulation). Each step, under a token budget, steps 1-3 for online sequences, then again for batch
// sequences (SequencePriority):
//   1. running sequences that decode (one token left), oldest first;
//   2. running sequences still in prefill, oldest first, each one chunk (at most what the budget leaves);
//   3. waiting sequences, oldest first, admitted while a slot and blocks for their first chunk are free (after a
//      prefix-cache lookup); the first one that does not fit stops admission, so a large old request is not
//      starved by small new ones. No admission in a step that had to preempt.
// A chunk that passes checkpoint positions carries the checkpoints to write there (the model snapshots the
// recurrent state as it passes them), and a prefill chunk shrinks to the blocks that are free. When a running sequence
// cannot get even one token's block, the newest running batch sequence (if none, the newest running one) is preempted:
// its memory is freed and it waits again (first in line of its priority, by arrival) to recompute prompt + generated
// tokens later.
//
// With several cache partitions (--dp-attention: one per rank, docs/distributed.md "Attention data-parallel") each
// sequence lives in one partition from admission to preemption or its end, and every memory question is asked of
// that partition: admission picks the partition (a prefix hit's partition if it has room, else the one with the
// most free memory, ties to the lowest), a chunk fits only if its partition has the blocks, and preemption frees
// the newest running sequence of the partition that is short. n > 1 samples fork in their parent's partition.
//
// No model here: tests drive it with a CacheManager alone and check exact plans and block ids.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "base/status.h"
#include "memory/cache_manager.h"

namespace glint {

struct SchedulerOptions {
  int64_t max_batch_tokens = 512;  // tokens computed per step, all sequences together
  int64_t watermark_blocks = 0;    // blocks an admission leaves free for running sequences to grow into
  // Batch prefill tokens (chunks and admissions) in a step while an online sequence runs or waits: what the step an
  // online request waits for, and each online decode step, may carry beyond the online work (docs/batch.md
  // "Priority"). 0: no batch prefill while online traffic is present.
  int64_t batch_prefill_beside_online = 64;
};

// Online requests (HTTP clients waiting) go before batch requests (docs/batch.md "Priority"): a batch sequence
// gets only the budget and memory online ones leave, is preempted first, and gives up its slot to an online
// request that cannot be admitted otherwise.
enum class SequencePriority { kOnline = 0, kBatch = 1 };

enum class SequenceStatus {
  kWaiting,           // not in memory; will be admitted (again)
  kRunning,           // live in memory
  kWaitingForParent,  // one of n > 1 samples: starts as a copy of its parent once the parent's prompt is computed
};

struct ScheduledChunk {
  SequenceId id = 0;
  int64_t start = 0;     // first position computed
  int64_t count = 0;     // tokens computed
  bool samples = false;  // the chunk ends at the sequence's last token: its logits give the next token
  std::vector<CheckpointTarget> checkpoints;  // state checkpoints to write at positions in (start, start + count]
  // Speculative decoding: a decode that also verifies the first `draft` of the sequence's drafted tokens
  // (computed at start + count onwards, not in `tokens`). The engine sets `accepted` (≤ draft) before Complete.
  int64_t draft = 0;
  int64_t accepted = 0;
  int64_t image_tokens = 0;  // budget the vision tower takes for the images this chunk reaches first (ImageCost)
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;  // decodes first, then prefill chunks; each sequence at most once
  std::vector<SequenceId> admitted;    // became live this step, with `computed` positions restored
  std::vector<SequenceId> preempted;   // lost their memory this step and wait again
  int64_t tokens = 0;                  // Σ chunk counts + drafts (+ Σ image_tokens ≤ max_batch_tokens)
};

// The vision tower's share of the token budget (docs/engine.md "Images"): for a chunk of `count` positions from
// `start` of the sequence, the image tokens of the images it reaches whose rows are not computed yet (they are
// computed in this step), after shrinking `count` so that count + those tokens ≤ `budget` (the chunk then ends
// before the first image that does not fit; 0 when it starts at one).
using ImageCost = std::function<int64_t(SequenceId id, int64_t start, int64_t& count, int64_t budget)>;

struct SequenceInfo {
  SequenceId id = 0;
  int64_t arrival = 0;          // order of arrival: lower is older
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  std::vector<int32_t> keys;    // empty, or the prefix-cache key of every token (images: Scheduler::Add)
  int64_t prompt_length = 0;
  int64_t computed = 0;  // positions whose caches are in memory (0 unless running)
  SequenceStatus status = SequenceStatus::kWaiting;
  SequenceId parent = -1;  // kWaitingForParent only
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;  // positions restored from the prefix cache at the first admission
  bool admitted_before = false;
  int64_t drafts = 0;  // drafted tokens waiting to be verified with the next decode
  SequencePriority priority = SequencePriority::kOnline;
  int partition = 0;  // the cache partition holding its memory while running (the only one without several)
};

class Scheduler {
 public:
  Scheduler(CacheManager& memory, const SchedulerOptions& options);
  // Several partitions (not owned, each outliving this; same block size, checkpoint interval and prefix caching):
  // a sequence's memory is in one of them.
  Scheduler(std::vector<CacheManager*> partitions, const SchedulerOptions& options);

  // A new sequence that waits to run its prompt. `keys` (empty: the tokens themselves) are what the prefix cache
  // keys its positions by: the prompt with each image's placeholders replaced by values from the image's hash, so
  // blocks holding different images never match (EngineCore::ImageKeyTokens).
  void Add(SequenceId id, std::vector<int32_t> prompt, int64_t arrival, std::vector<int32_t> keys = {},
           SequencePriority priority = SequencePriority::kOnline);
  // Sets the vision tower's share of the budget (none by default).
  void set_image_cost(ImageCost cost) { image_cost_ = std::move(cost); }
  // The prefix-cache keys of the sequence's positions (its tokens unless it has images).
  std::span<const int32_t> Keys(SequenceId id) const;
  // A sequence that waits until `parent` (added before it, same prompt) has computed its prompt; then Fork. It
  // has its parent's priority.
  void AddChild(SequenceId id, SequenceId parent, int64_t arrival);

  StepPlan Schedule();
  // After the model computed `plan`: positions advance (count + accepted drafts) and are committed to memory
  // (blocks join the prefix cache, checkpoints are taken). Tokens appended before it are part of the commit.
  void Complete(const StepPlan& plan);
  void AppendToken(SequenceId id, int32_t token);
  // Speculative decoding: the running sequence has `drafts` drafted tokens (0: none) for its next decode, which
  // then computes 1 + as many of them as the budget and blocks allow (the rest are dropped, never a reason to
  // preempt). Preemption drops them.
  void SetDrafts(SequenceId id, int64_t drafts);
  // Starts the waiting child as a copy of its parent's computed positions (sharing its blocks). When memory is
  // short the child becomes an ordinary waiting sequence that computes its prompt itself; returns false then.
  bool Fork(SequenceId child);
  // Frees the sequence's memory and forgets it.
  void Finish(SequenceId id);

  // Disaggregated serving (docs/disaggregation.md): memory for a sequence whose state arrives from another engine.
  // A slot and the blocks covering `tokens` positions, held outside every queue (nothing is scheduled for it)
  // until Import or ReleaseLease. False, changing nothing, when the pools cannot provide them now.
  bool Lease(SequenceId id, int64_t tokens);
  // The leased sequence, whose memory now holds the state after `prompt`, becomes a running sequence with every
  // prompt position computed. The caller appends its first token and then commits the positions in its memory
  // (its full blocks join the prefix cache; with key_next_token a block's key needs the token after it) before the
  // next step, fork or integrity check.
  void Import(SequenceId id, std::vector<int32_t> prompt, int64_t arrival, std::vector<int32_t> keys,
              SequencePriority priority);
  // Frees a lease that will not be imported.
  void ReleaseLease(SequenceId id);
  int64_t num_leased() const { return static_cast<int64_t>(leased_.size()); }

  bool Contains(SequenceId id) const { return sequences_.count(id) != 0; }
  const SequenceInfo& Get(SequenceId id) const;
  std::vector<SequenceId> Children(SequenceId parent) const;  // waiting for `parent`, in arrival order
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size() + children_.size()); }
  int64_t num_preemptions() const { return preemptions_; }
  int num_partitions() const { return static_cast<int>(partitions_.size()); }
  // The partition a new sequence would be admitted to now, for a prompt keyed `keys` (no side effects): the
  // partition with the longest prefix-cache hit if it has a free slot and blocks for at least the first token after
  // the hit, else the partition with the most free cache bytes (free slots and blocks) that has room for the first
  // chunk, ties to the lowest; `match` gets the prefix it would reuse there. −1: none has room.
  int ChoosePartition(std::span<const int32_t> keys, int64_t budget, PrefixMatch& match) const;
  const SchedulerOptions& options() const { return options_; }

  // Every sequence is in exactly one state; running ones are live with `computed` committed; waiting ones hold no
  // memory; the memory's own integrity check passes. Tests call it after every step.
  Status CheckIntegrity() const;

 private:
  // (priority, arrival, id): online before batch, then oldest first; the last running one is preempted first.
  using OrderKey = std::tuple<SequencePriority, int64_t, SequenceId>;
  using Order = std::set<OrderKey>;
  static OrderKey KeyOf(const SequenceInfo& sequence) { return {sequence.priority, sequence.arrival, sequence.id}; }
  SequenceInfo& Mutable(SequenceId id);
  // A sequence's record (not in any queue yet).
  SequenceInfo& NewSequence(SequenceId id, std::vector<int32_t> prompt, int64_t arrival, std::vector<int32_t> keys,
                            SequencePriority priority);
  // Tokens a running sequence can cover from `computed` with its blocks plus the free ones.
  int64_t Coverable(const SequenceInfo& sequence) const;
  void Preempt(SequenceId id, StepPlan& plan, int64_t& budget);
  // The running sequences of one priority that decode (or are in prefill).
  void ScheduleRunning(SequencePriority priority, bool decodes, StepPlan& plan, int64_t& budget);
  // Waiting sequences of one priority, from the head of the line.
  void Admit(SequencePriority priority, StepPlan& plan, int64_t& budget);
  // An online sequence heads the waiting line but no slot is free: the newest running batch sequence is preempted
  // so that it can be admitted in this step.
  void YieldSlotToOnline(StepPlan& plan, int64_t& budget);
  bool OnlinePresent() const;  // an online sequence runs or waits
  // A running sequence of at least `waiting`'s priority is computing a prompt that starts with at least one
  // checkpoint interval of `keys` beyond the `cached` positions the prefix cache holds.
  bool PrefixInFlight(const SequenceInfo& waiting, std::span<const int32_t> keys, int64_t cached) const;

  CacheManager& MemoryOf(const SequenceInfo& sequence) const { return *partitions_[sequence.partition]; }
  // Tokens of a new sequence that `partition` can take now after reusing `match` (its blocks, less the watermark).
  int64_t AdmissionFit(int partition, const PrefixMatch& match) const;
  bool AnyFreeSlot() const;
  // The newest running sequence of the partition (batch ones first: the order of running_); −1 when none.
  SequenceId NewestRunningIn(int partition) const;

  std::vector<CacheManager*> partitions_;  // [partitions]
  CacheManager& memory_;                   // partitions_[0]: leases, and the options shared by all
  SchedulerOptions options_;
  std::map<SequenceId, SequenceInfo> sequences_;
  // The chunk's tower budget (ImageCost), `count` shrunk to fit; 0 without images.
  int64_t ImageTokens(SequenceId id, int64_t start, int64_t& count, int64_t budget) const;

  ImageCost image_cost_;
  Order running_, waiting_, children_;
  std::set<SequenceId> leased_;  // live in memory, not scheduled: their state is being transferred
  int64_t preemptions_ = 0;
};

}  // namespace glint
