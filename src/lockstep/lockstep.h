// Several ranks running one model in lockstep (docs/distributed.md "The batch plan"). Rank 0 runs the command —
// tokenizer, HTTP, scheduler, sampling, output — against a LockstepLeader wrapping its shard of the model; every
// other rank runs RunLockstepFollower over its own shard and prints nothing.
//
// Before each Forward, MtpForward and MtpForwardBatch the leader broadcasts the batch plan: every entry's new
// tokens, its sequence (block table, slot, positions computed, MTP pairs), checkpoint and rollback destinations,
// the forward options and forced choices — preceded by every copy and clear the engine made in its pools since the
// last plan (MemoryMirror) and by pools attached or detached. Each follower rebuilds the same batch over its own
// copy of the pools and makes the same call, so the collectives inside the model pair up, and every rank's caches
// hold the same bytes: attention is replicated at --tp 1 and the MoE all-reduce gives every rank the same sum.
// Under --dp-attention the engine attaches one set of pools per rank instead (AttachPools' backing_rank): only that
// rank allocates it and makes the copies and clears in it, the others reserve address space that only names its
// bytes, and a sequence in it is run by that rank alone (docs/distributed.md "Attention data-parallel").
// The MTP layer's hidden input is named by where it lies in the last Forward's outputs, with a hash of its bytes
// that the follower checks against its own: ranks that diverged stop with a message instead of drifting.
//
// Failures never hang: the leader checks a call (the inner model's CheckOptions, CheckBatch, CheckMtpInput) before
// broadcasting it, so a bad call is an error on rank 0 alone; a failure after the broadcast, or a follower that cannot
// run a plan, ends every rank (AbortAllRanks) with a message naming the rank, because its peers may be waiting in a
// collective it will never join.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "dist/communicator.h"
#include "lockstep/lockstep_wire.h"
#include "model/model.h"

namespace glint {

class LockstepLeader final : public Model, public EngineMirror {
 public:
  // Rank 0 of comm (size > 1); `comm` must outlive this.
  LockstepLeader(std::unique_ptr<Model> inner, Communicator& comm);
  ~LockstepLeader() override;  // Stop()
  // Tells the followers to return from RunLockstepFollower; later calls do nothing. Call from the thread that ran
  // the model (or once it has stopped).
  Status Stop();
  const Model& inner() const { return *inner_; }

  const ModelConfig& config() const override { return inner_->config(); }
  const ModelConfig& local_config() const override { return inner_->local_config(); }
  int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  bool has_mtp() const override { return inner_->has_mtp(); }
  ShardPlan shard_plan() const override { return inner_->shard_plan(); }
  Result<CacheLayout> CacheLayoutFor(const CacheOptions& options) const override {
    return inner_->CacheLayoutFor(options);
  }
  SequenceState NewSequence() const override;
  SequenceState BindSequence(std::shared_ptr<const CacheLayout> layout, SequenceMemory memory, int64_t tokens,
                             int64_t mtp_tokens = -1) const override {
    return inner_->BindSequence(std::move(layout), memory, tokens, mtp_tokens);
  }
  EngineMirror* engine_mirror() const override { return const_cast<LockstepLeader*>(this); }
  Status CheckOptions(const ForwardOptions& options) const override { return inner_->CheckOptions(options); }
  Status Forward(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                 const ForwardOptions& options = {}, Trace* trace = nullptr,
                 const ForcedChoices* forced = nullptr) const override;
  Status MtpForward(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                    std::vector<float>& logits, const ForwardOptions& options = {}, Trace* trace = nullptr,
                    const MtpReplacedEmbeddings& replaced = {}) const override;
  Status MtpForwardBatch(std::span<const MtpEntry> batch, std::vector<std::vector<float>>& logits,
                         const ForwardOptions& options = {}, std::vector<Status>* entry_errors = nullptr,
                         std::vector<std::vector<float>>* last_hidden = nullptr) const override;

  // Broadcasts the pools at once (the followers allocate theirs): call it, as the engine does when it is created,
  // from the thread that runs the model or while none does.
  int64_t AttachPools(std::shared_ptr<const CacheLayout> layout, std::span<const ItemArena* const> arenas,
                      int backing_rank = -1) override;
  void DetachPools(int64_t id) override;
  void OnCopy(std::byte* destination, const std::byte* source, int64_t bytes) override;
  void OnZero(std::byte* destination, int64_t bytes) override;
  // The bytes go into the pending operations (a copy of them: the caller's buffer may go), so the followers write
  // them before the next plan; past kWriteFlushBytes pending they are broadcast at once, which bounds a message
  // (MPI's broadcast takes at most 2 GiB) and the memory held. Call from the thread that runs the model.
  void OnWrite(std::byte* destination, std::span<const std::byte> bytes) override;
  // The same with the whole slot (--tp > 1): each follower writes the KDA heads it holds.
  void OnWriteSlot(std::byte* slot, const CacheLayout& part, std::span<const std::byte> whole_slot,
                   const CacheLayout& whole) override;
  // Rank 0's heads and those its tp group's ranks send (Gather: the plan of this Forward marked the entry), in head
  // order. A failure ends every rank: they are inside a forward pass.
  std::vector<std::byte> GatherKdaLayer(const std::byte* slot, const CacheLayout& part, const CacheLayout& whole,
                                        int64_t layer) override;
  // Until the next Forward, an MTP call's hidden input travels inline (PutHidden would otherwise compare it with
  // freed rows).
  void ForgetForwardOutputs() override { last_hidden_.clear(); }
  static constexpr size_t kWriteFlushBytes = size_t{64} << 20;
  // Another threshold (tests: 1 broadcasts every write at once).
  void set_write_flush_bytes(size_t bytes) { write_flush_bytes_ = bytes; }

  // Bytes of plans broadcast so far, and how many (benchmarks: the control traffic of a step).
  uint64_t plan_bytes() const { return plan_bytes_; }
  int64_t plans() const { return plans_; }

 private:
  struct ArenaRecord {
    int64_t id = 0;
    const std::byte* base = nullptr;
    int64_t bytes = 0;
  };
  struct PoolsRecord {
    int64_t id = 0;
    std::shared_ptr<const CacheLayout> layout;
    const ItemArena* blocks = nullptr;
    std::vector<int64_t> arena_ids;
  };
  // Owned sequences freed on rank 0, whose copies the followers free with the next plan (any thread adds).
  struct Released {
    std::mutex mutex;
    std::vector<uint64_t> keys;
    std::vector<int64_t> live;  // --dp-attention: [ranks] sequences alive whose caches each rank holds
  };

  // Writes where `pointer` lies in the attached pools (arena id, byte offset); an error when nowhere.
  Status PutPointer(WireWriter& writer, const std::byte* pointer) const;
  Status PutState(WireWriter& writer, const SequenceState& state) const;
  void PutHidden(WireWriter& writer, std::span<const float> hidden) const;
  // A write op into the pending operations (`whole_slot`: OnWriteSlot's, else OnWrite's); past write_flush_bytes_
  // they are sent at once.
  void QueueWrite(bool whole_slot, std::byte* destination, std::span<const std::byte> bytes);
  // The pending pool operations, then `plan`, to every rank.
  Status Send(WireWriter& plan) const;
  // After the broadcast: a failure here leaves the followers in a different place than rank 0.
  void AbortOnFailure(const Status& status, const char* what) const;

  std::unique_ptr<Model> inner_;
  Communicator& comm_;
  bool stopped_ = false;
  std::vector<ArenaRecord> arenas_;  // attached, newest last
  std::vector<PoolsRecord> pools_;
  int64_t next_id_ = 0;
  mutable std::mutex pending_mutex_;  // OnCopy etc. run on the engine thread, Stop on the main thread
  mutable WireWriter pending_;        // pool operations not yet sent
  size_t write_flush_bytes_ = kWriteFlushBytes;
  std::shared_ptr<Released> released_ = std::make_shared<Released>();
  mutable std::vector<std::span<const float>> last_hidden_;  // [entries] of the last Forward
  mutable uint64_t plan_bytes_ = 0;
  mutable int64_t plans_ = 0;
};

// Ranks other than 0: receives and runs rank 0's plans over `model` (this rank's shard) until the leader stops.
// Returns Ok then; a plan it cannot run ends every rank (AbortAllRanks) with the reason.
Status RunLockstepFollower(const Model& model, Communicator& comm);

}  // namespace glint
