#include "lockstep/lockstep.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>

#include "base/log.h"
#include "dist/launch.h"
#include "model/forward_common.h"

namespace glint {
namespace {

// The operations of a plan message, in the order they are to run.
enum class PlanOp : uint8_t {
  kStop = 1,
  kAttach,
  kDetach,
  kCopy,
  kZero,
  kRelease,  // an owned sequence was freed on rank 0
  kForward,
  kMtpForward,
  kMtpForwardBatch,
  kWrite,      // bytes from outside the pools written into them (an imported sequence state)
  kWriteSlot,  // the same for a whole slot, of which each rank writes its KDA heads (--tp > 1)
};
enum class StateKind : uint8_t { kOwned = 0, kBound = 1 };
// The arena id of a null pointer in a plan: a checkpoint position that only splits the KDA recurrence.
constexpr int64_t kNoArena = -1;
enum class HiddenKind : uint8_t { kInLastForward = 0, kInline = 1 };

uint64_t HashFloats(std::span<const float> values) { return XXH3_64bits(values.data(), values.size_bytes()); }

void PutOptions(WireWriter& w, const ForwardOptions& options) {
  w.Put<uint8_t>(static_cast<uint8_t>(options.kda_algorithm));
  w.Put<uint8_t>(static_cast<uint8_t>(options.dsa.form));
  w.Put<uint8_t>(static_cast<uint8_t>(options.dsa.selection));
  const auto* forced = options.dsa.forced_positions;
  w.Put<uint64_t>(forced == nullptr ? 0 : forced->size() + 1);  // 0: none; else 1 + queries
  if (forced != nullptr) {
    for (const auto& positions : *forced) w.PutVector(positions);
  }
}

void PutForced(WireWriter& w, const ForcedChoices* forced) {
  w.Put<uint8_t>(forced != nullptr);
  if (forced == nullptr) return;
  w.Put<uint64_t>(forced->router.size());
  for (const auto& layer : forced->router) {
    w.Put<uint64_t>(layer.size());
    for (const RouterChoice& choice : layer) {
      w.PutVector(choice.experts);
      w.PutVector(choice.weights);
      w.Put<float>(choice.margin);
    }
  }
  w.Put<uint64_t>(forced->attended.size());
  for (const auto& layer : forced->attended) {
    w.Put<uint64_t>(layer.size());
    for (const auto& positions : layer) w.PutVector(positions);
  }
}

// Whether a follower runs lm_head: only the ranks of rank 0's tp group hold lm_head rows (split by vocabulary at
// --tp > 1; at --tp 1 rank 0 holds it whole), and only rank 0 samples, so every other follower skips it (the
// released model: ≈ 0.6 GB of reads per decode step saved per rank). A follower of rank 0's group computes its
// vocabulary rows for rank 0's gather (lm_head_split.h). With --lm-head-split-rows every follower keeps the rows
// that want logits: it computes its share of the vocabulary for passes of few of them, as rank 0 decides alike.
bool FollowerComputesLogits(const Model& model) {
  return model.shard_plan().computes_logits() || model.shard_plan().head_split();
}

// Whether a failed call failed only some entries — an expert read (--expert-memory), which SumMoeOverRanks makes
// every rank see alike, and which the engine handles per request — rather than leaving the ranks in different
// places. Then no rank aborts.
bool OnlyEntriesFailed(const Status& status, std::span<const EntryOutput> outputs) {
  return !status.ok() && status.message() == FailedEntriesStatus(outputs).message();
}
bool OnlyMtpEntriesFailed(const Status& status, const std::vector<Status>* entry_errors) {
  return !status.ok() && entry_errors != nullptr &&
         std::any_of(entry_errors->begin(), entry_errors->end(), [](const Status& s) { return !s.ok(); });
}

// MTP image rows (docs/vision.md "MTP drafts"): the positions and rows of the tower's embeddings that replace next
// tokens' (image tokens × D × 4 bytes), in the plan like the trunk's, so the followers' MTP layers see the image.
void PutReplaced(WireWriter& plan, const MtpReplacedEmbeddings& replaced) {
  plan.PutSpan(replaced.positions);
  plan.PutSpan(replaced.rows);
}
MtpReplacedEmbeddings GetReplaced(WireReader& r, std::deque<std::vector<int32_t>>& positions,
                                  std::deque<std::vector<float>>& rows) {
  MtpReplacedEmbeddings replaced;
  replaced.positions = positions.emplace_back(r.GetVector<int32_t>());
  replaced.rows = rows.emplace_back(r.GetVector<float>());
  return replaced;
}

// --dp-attention: this rank's view of a sequence whose caches rank `rank` holds: no cache memory, only its
// position count (Forward advances it), and an empty OwnedSequenceMemory whose address names it in the plans.
SequenceState HeldElsewhereSequence(const Model& model, int rank) {
  SequenceState state;
  state.owner = &model;
  state.owned = std::make_unique<OwnedSequenceMemory>();
  state.attention_rank = rank;
  return state;
}

// A count read from a message, bounded by the bytes left (each element takes at least one byte).
uint64_t GetCount(WireReader& r) { return r.Get<uint64_t>(); }

// --tp > 1, an export's KDA layer (GatherKdaLayer): the bytes each rank sends rank 0 — its heads' part if it is in
// rank 0's tp group (the ranks of the other groups hold the same heads as those of the same tp rank), else none.
std::vector<uint64_t> KdaHeadCounts(const ShardPlan& plan, const CacheLayout& layout) {
  std::vector<uint64_t> counts(plan.ranks, 0);
  for (int r = 0; r < plan.tp; ++r) {
    counts[r] = static_cast<uint64_t>(plan.slices_of_rank[r].kda_heads.count() * KdaHeadBytes(layout));
  }
  return counts;
}
// This rank's heads of KDA layer `layer`, from its slot: its runs in order (q, k, v conv channels, then S).
std::vector<std::byte> PackOwnHeads(const std::byte* slot, const CacheLayout& layout, int64_t layer) {
  std::vector<std::byte> bytes;
  for (const SlotRun& run : KdaHeadRuns(layout, layer, 0, layout.kda_heads)) {
    bytes.insert(bytes.end(), slot + run.offset, slot + run.offset + run.bytes);
  }
  return bytes;
}

}  // namespace

// ---- rank 0 ----

LockstepLeader::LockstepLeader(std::unique_ptr<Model> inner, Communicator& comm)
    : inner_(std::move(inner)), comm_(comm) {}

LockstepLeader::~LockstepLeader() {
  const Status status = Stop();
  if (!status.ok()) AbortAllRanks(comm_, StrCat("could not stop the other ranks: ", status.message()), 1);
}

Status LockstepLeader::Stop() {
  if (stopped_) return Status::Ok();
  stopped_ = true;
  WireWriter plan;
  plan.Put(PlanOp::kStop);
  return Send(plan);
}

SequenceState LockstepLeader::NewSequence() const {
  const ShardPlan plan = inner_->shard_plan();
  int rank = -1;  // replicated attention
  if (plan.dp_attention) {
    // --dp-attention: the rank holding the fewest live sequences (each holds one KDA slot and its latents: the
    // rank with the most free cache memory); ties to the lowest rank.
    std::lock_guard<std::mutex> lock(released_->mutex);
    released_->live.resize(plan.ranks, 0);
    rank = static_cast<int>(std::min_element(released_->live.begin(), released_->live.end()) - released_->live.begin());
    ++released_->live[rank];
  }
  SequenceState state = rank <= 0 ? inner_->NewSequence() : HeldElsewhereSequence(*inner_, rank);
  state.attention_rank = rank;
  if (state.owned != nullptr) {
    const uint64_t key = reinterpret_cast<uintptr_t>(state.owned.get());
    state.owned->on_free = [released = released_, key, rank] {
      std::lock_guard<std::mutex> lock(released->mutex);
      released->keys.push_back(key);
      if (rank >= 0) --released->live[rank];
    };
  }
  return state;
}

int64_t LockstepLeader::AttachPools(std::shared_ptr<const CacheLayout> layout, std::span<const ItemArena* const> arenas,
                                    int backing_rank) {
  const int64_t id = next_id_++;
  std::unique_lock<std::mutex> lock(pending_mutex_);
  pending_.Put(PlanOp::kAttach);
  pending_.Put<int64_t>(id);
  pending_.Put<int32_t>(backing_rank);
  pending_.Put<int64_t>(layout->options.block_tokens);
  pending_.Put<uint8_t>(static_cast<uint8_t>(layout->options.kda_state));
  pending_.Put<uint8_t>(layout->options.mtp);
  pending_.Put<uint8_t>(static_cast<uint8_t>(layout->options.kv_dtype));
  pending_.Put<int64_t>(layout->block_bytes);
  pending_.Put<int64_t>(layout->slot_bytes);
  pending_.Put<uint64_t>(arenas.size());
  PoolsRecord record{id, std::move(layout), arenas.empty() ? nullptr : arenas.front(), {}};
  for (const ItemArena* arena : arenas) {
    const int64_t arena_id = next_id_++;
    pending_.Put<int64_t>(arena_id);
    record.arena_ids.push_back(arena_id);
    pending_.Put<int64_t>(arena->count());
    pending_.Put<int64_t>(arena->item_bytes());
    // A fixed arena is one allocation (item_arena.h), so an offset from its first item names any byte in it.
    if (arena->count() > 0) arenas_.push_back({arena_id, arena->Item(0), arena->count() * arena->item_bytes()});
  }
  pools_.push_back(std::move(record));
  lock.unlock();
  // Sent now rather than with the first plan: the followers allocate their copies while rank 0 starts up, and a
  // follower short of memory ends the job at start-up instead of at the first request.
  WireWriter nothing;
  AbortOnFailure(Send(nothing), "to send an engine's pools");
  return id;
}

void LockstepLeader::DetachPools(int64_t id) {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  pending_.Put(PlanOp::kDetach);
  pending_.Put<int64_t>(id);
  auto pools = std::find_if(pools_.begin(), pools_.end(), [&](const PoolsRecord& p) { return p.id == id; });
  if (pools == pools_.end()) return;
  // The arenas' memory is about to be freed and may be reused by new pools: forget their addresses.
  std::erase_if(arenas_, [&](const ArenaRecord& arena) {
    return std::find(pools->arena_ids.begin(), pools->arena_ids.end(), arena.id) != pools->arena_ids.end();
  });
  pools_.erase(pools);
}

void LockstepLeader::OnCopy(std::byte* destination, const std::byte* source, int64_t bytes) {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  pending_.Put(PlanOp::kCopy);
  Status status = PutPointer(pending_, destination);
  if (status.ok()) status = PutPointer(pending_, source);
  pending_.Put<int64_t>(bytes);
  AbortOnFailure(status, "a pool copy");
}

void LockstepLeader::OnZero(std::byte* destination, int64_t bytes) {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  pending_.Put(PlanOp::kZero);
  AbortOnFailure(PutPointer(pending_, destination), "a pool clear");
  pending_.Put<int64_t>(bytes);
}

void LockstepLeader::OnWrite(std::byte* destination, std::span<const std::byte> bytes) {
  QueueWrite(false, destination, bytes);
}

// Each follower knows its own layout and the whole model's (Attach): the whole slot is all it needs.
void LockstepLeader::OnWriteSlot(std::byte* slot, const CacheLayout& /*part*/, std::span<const std::byte> whole_slot,
                                 const CacheLayout& /*whole*/) {
  QueueWrite(true, slot, whole_slot);
}

void LockstepLeader::QueueWrite(bool whole_slot, std::byte* destination, std::span<const std::byte> bytes) {
  bool flush = false;
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    pending_.Put(whole_slot ? PlanOp::kWriteSlot : PlanOp::kWrite);
    AbortOnFailure(PutPointer(pending_, destination), "a pool write");
    pending_.PutSpan(bytes);
    flush = pending_.bytes().size() >= write_flush_bytes_;
  }
  // Without a plan for a while (an idle engine importing many states) the pending bytes would only grow.
  if (flush) {
    WireWriter nothing;
    AbortOnFailure(Send(nothing), "to send an imported state");
  }
}

std::vector<std::byte> LockstepLeader::GatherKdaLayer(const std::byte* slot, const CacheLayout& part,
                                                      const CacheLayout& whole, int64_t layer) {
  const ShardPlan plan = inner_->shard_plan();
  const std::vector<uint64_t> counts = KdaHeadCounts(plan, part);
  uint64_t total = 0;
  for (uint64_t count : counts) total += count;
  std::vector<std::byte> received(total);
  const std::vector<std::byte> own = PackOwnHeads(slot, part, layer);
  AbortOnFailure(comm_.Gather(own, counts, received, 0), "to gather a layer's KDA heads for an export");
  // Into the whole layer's slot regions, packed as LayerRegions(whole, layer) packs them: conv window, then S.
  const CacheLayout::Layer& regions = whole.layers[layer];
  std::vector<std::byte> bytes(static_cast<size_t>(whole.kda_conv_bytes + whole.kda_recurrent_bytes));
  const auto packed_at = [&](int64_t offset) {
    return offset >= regions.recurrent ? whole.kda_conv_bytes + (offset - regions.recurrent) : offset - regions.conv;
  };
  size_t at = 0;
  for (int r = 0; r < plan.tp; ++r) {  // group 0's ranks, in rank order: heads in order
    const IndexRange heads = plan.slices_of_rank[r].kda_heads;
    for (const SlotRun& run : KdaHeadRuns(whole, layer, heads.begin, heads.count())) {
      std::memcpy(bytes.data() + packed_at(run.offset), received.data() + at, run.bytes);
      at += run.bytes;
    }
  }
  GLINT_CHECK(at == received.size()) << "gathered " << received.size() << " bytes of KDA heads, placed " << at;
  return bytes;
}

Status LockstepLeader::PutPointer(WireWriter& w, const std::byte* pointer) const {
  for (auto it = arenas_.rbegin(); it != arenas_.rend(); ++it) {
    if (pointer >= it->base && pointer < it->base + it->bytes) {
      w.Put<int64_t>(it->id);
      w.Put<int64_t>(pointer - it->base);
      return Status::Ok();
    }
  }
  return InternalError(
      "lockstep: a pointer outside every pool the engine attached (a copy the followers cannot "
      "make)");
}

Status LockstepLeader::PutState(WireWriter& w, const SequenceState& state) const {
  if (state.owned != nullptr) {
    w.Put(StateKind::kOwned);
    w.Put<uint64_t>(reinterpret_cast<uintptr_t>(state.owned.get()));
    w.Put<int32_t>(state.attention_rank);
  } else {
    auto pools = std::find_if(pools_.begin(), pools_.end(), [&](const PoolsRecord& p) {
      return p.blocks == state.memory.blocks && p.layout == state.layout;
    });
    if (pools == pools_.end() || state.memory.block_table == nullptr) {
      return InternalError("lockstep: a sequence whose memory is neither its own nor in pools the engine attached");
    }
    w.Put(StateKind::kBound);
    w.Put<int64_t>(pools->id);
    w.PutVector(*state.memory.block_table);
    GLINT_RETURN_IF_ERROR(PutPointer(w, state.memory.slot));
    w.Put<int32_t>(state.attention_rank);
  }
  w.Put<int64_t>(state.tokens);
  w.Put<int64_t>(state.mtp_tokens);
  return Status::Ok();
}

void LockstepLeader::PutHidden(WireWriter& w, std::span<const float> hidden) const {
  for (size_t entry = 0; entry < last_hidden_.size(); ++entry) {
    const std::span<const float> rows = last_hidden_[entry];
    if (!hidden.empty() && hidden.data() >= rows.data() && hidden.data() + hidden.size() <= rows.data() + rows.size()) {
      w.Put(HiddenKind::kInLastForward);
      w.Put<uint64_t>(entry);
      w.Put<uint64_t>(hidden.data() - rows.data());
      w.Put<uint64_t>(hidden.size());
      w.Put<uint64_t>(HashFloats(hidden));
      return;
    }
  }
  w.Put(HiddenKind::kInline);  // not from the last Forward: the values themselves
  w.PutSpan(hidden);
}

Status LockstepLeader::Send(WireWriter& plan) const {
  std::vector<std::byte> message;
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    message.swap(pending_.bytes());
  }
  {
    WireWriter releases;
    std::lock_guard<std::mutex> lock(released_->mutex);
    for (uint64_t key : released_->keys) {
      releases.Put(PlanOp::kRelease);
      releases.Put<uint64_t>(key);
    }
    released_->keys.clear();
    message.insert(message.end(), releases.bytes().begin(), releases.bytes().end());
  }
  message.insert(message.end(), plan.bytes().begin(), plan.bytes().end());
  plan_bytes_ += message.size();
  ++plans_;
  return comm_.Broadcast(message, 0);
}

void LockstepLeader::AbortOnFailure(const Status& status, const char* what) const {
  if (status.ok()) return;
  AbortAllRanks(comm_, StrCat("rank 0 failed ", what, " after sending it to the other ranks: ", status.message()), 1);
}

Status LockstepLeader::Forward(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                               const ForwardOptions& options, Trace* trace, const ForcedChoices* forced) const {
  // Refused here, nothing sent: the followers go on waiting.
  GLINT_RETURN_IF_ERROR(inner_->CheckOptions(options));
  GLINT_RETURN_IF_ERROR(CheckBatch(*inner_, batch));
  WireWriter plan;
  plan.Put(PlanOp::kForward);
  PutOptions(plan, options);
  PutForced(plan, forced);
  plan.Put<uint64_t>(batch.size());
  const bool dp_attention = inner_->shard_plan().dp_attention;
  for (const BatchEntry& entry : batch) {
    // --dp-attention: a sequence in pools a tool attached (score's), which every rank mirrors, runs on rank 0.
    if (dp_attention && entry.state->owned == nullptr && entry.state->attention_rank < 0)
      entry.state->attention_rank = 0;
    GLINT_RETURN_IF_ERROR(PutState(plan, *entry.state));
    plan.PutSpan(entry.tokens);
    plan.Put(entry.logits);
    plan.Put<uint8_t>(entry.want_hidden);
    // An export that streams its layers: at --tp > 1 the followers send their KDA heads of each layer then.
    plan.Put<uint8_t>(entry.layer_done.call != nullptr);
    // Image rows (rank 0 ran the vision tower): image tokens × D × 4 bytes, only in the plans of the chunks they
    // replace embeddings in.
    plan.PutSpan(entry.embedding_positions);
    plan.PutSpan(entry.embedding_rows);
    plan.Put<uint64_t>(entry.checkpoints.size());
    for (const StateCheckpoint& checkpoint : entry.checkpoints) {
      plan.Put<int64_t>(checkpoint.position);
      if (checkpoint.data == nullptr) {  // a split only (CacheManagerOptions::split_at_every_checkpoint)
        plan.Put<int64_t>(kNoArena);
        plan.Put<int64_t>(0);
        continue;
      }
      GLINT_RETURN_IF_ERROR(PutPointer(plan, checkpoint.data));
    }
    // One byte counts the rollback snapshots (one per drafted token: --speculative-tokens ≤ 4).
    if (entry.rollback.size() > 255) return InvalidArgument("a batch entry has more than 255 rollback snapshots");
    plan.Put<uint8_t>(static_cast<uint8_t>(entry.rollback.size()));
    for (const StateCheckpoint& rollback : entry.rollback) {
      plan.Put<int64_t>(rollback.position);
      GLINT_RETURN_IF_ERROR(PutPointer(plan, rollback.data));
    }
  }
  AbortOnFailure(Send(plan), "to broadcast a batch plan");
  Status status = inner_->Forward(batch, outputs, options, trace, forced);
  if (!OnlyEntriesFailed(status, outputs)) AbortOnFailure(status, "a forward pass");
  last_hidden_.clear();
  for (const EntryOutput& output : outputs) last_hidden_.push_back(output.hidden);
  return status;
}

Status LockstepLeader::MtpForward(SequenceState& state, std::span<const float> hidden,
                                  std::span<const int32_t> next_tokens, std::vector<float>& logits,
                                  const ForwardOptions& options, Trace* trace,
                                  const MtpReplacedEmbeddings& replaced) const {
  GLINT_RETURN_IF_ERROR(inner_->CheckOptions(options));  // refused here, nothing sent
  GLINT_RETURN_IF_ERROR(CheckMtpInput(*inner_, state, hidden, next_tokens));
  WireWriter plan;
  plan.Put(PlanOp::kMtpForward);
  PutOptions(plan, options);
  GLINT_RETURN_IF_ERROR(PutState(plan, state));
  PutHidden(plan, hidden);
  plan.PutSpan(next_tokens);
  PutReplaced(plan, replaced);
  AbortOnFailure(Send(plan), "to broadcast an MTP plan");
  Status status = inner_->MtpForward(state, hidden, next_tokens, logits, options, trace, replaced);
  AbortOnFailure(status, "the MTP layer");
  return status;
}

Status LockstepLeader::MtpForwardBatch(std::span<const MtpEntry> batch, std::vector<std::vector<float>>& logits,
                                       const ForwardOptions& options, std::vector<Status>* entry_errors,
                                       std::vector<std::vector<float>>* last_hidden) const {
  GLINT_RETURN_IF_ERROR(inner_->CheckOptions(options));  // refused here, nothing sent
  for (const MtpEntry& entry : batch) {
    if (entry.state == nullptr || entry.state->owner != inner_.get()) {
      return InvalidArgument("an MTP batch entry's state was not created by this model");
    }
  }
  WireWriter plan;
  plan.Put(PlanOp::kMtpForwardBatch);
  PutOptions(plan, options);
  plan.Put<uint8_t>(entry_errors != nullptr ? 1 : 0);  // the followers run the same mode (same collectives)
  plan.Put<uint64_t>(batch.size());
  for (const MtpEntry& entry : batch) {
    GLINT_RETURN_IF_ERROR(PutState(plan, *entry.state));
    PutHidden(plan, entry.hidden);
    plan.PutSpan(entry.next_tokens);
    plan.Put(entry.logits);
    PutReplaced(plan, entry.replaced);
  }
  AbortOnFailure(Send(plan), "to broadcast an MTP plan");
  // Entries that failed (an expert read) failed alike on every rank (SumMoeOverRanks); any other failure ends
  // every rank.
  // A chained draft's hidden input is the last call's last_hidden, not a Forward output: PutHidden sends it inline
  // (D floats per entry). Every rank computes the same rows, so followers need no last_hidden of their own.
  Status status = inner_->MtpForwardBatch(batch, logits, options, entry_errors, last_hidden);
  if (!OnlyMtpEntriesFailed(status, entry_errors)) AbortOnFailure(status, "the MTP layer");
  return status;
}

// ---- the other ranks ----

namespace {

class Follower {
 public:
  Follower(const Model& model, Communicator& comm) : model_(model), comm_(comm) {}

  // Runs one message; sets `stop` when it ends with kStop.
  Status Run(std::span<const std::byte> message, bool& stop) {
    WireReader r(message);
    while (!r.done() && r.ok()) {
      const auto op = r.Get<PlanOp>();
      switch (op) {
        case PlanOp::kStop:
          stop = true;
          return r.done() ? Status::Ok() : InvalidArgument("bytes after a stop");
        case PlanOp::kAttach:
          GLINT_RETURN_IF_ERROR(Attach(r));
          break;
        case PlanOp::kDetach:
          Detach(r.Get<int64_t>());
          break;
        case PlanOp::kCopy:
          GLINT_RETURN_IF_ERROR(Copy(r));
          break;
        case PlanOp::kZero:
          GLINT_RETURN_IF_ERROR(Zero(r));
          break;
        case PlanOp::kWrite:
          GLINT_RETURN_IF_ERROR(Write(r));
          break;
        case PlanOp::kWriteSlot:
          GLINT_RETURN_IF_ERROR(WriteSlot(r));
          break;
        case PlanOp::kRelease:
          owned_.erase(r.Get<uint64_t>());
          break;
        case PlanOp::kForward:
          GLINT_RETURN_IF_ERROR(Forward(r));
          break;
        case PlanOp::kMtpForward:
          GLINT_RETURN_IF_ERROR(MtpForward(r));
          break;
        case PlanOp::kMtpForwardBatch:
          GLINT_RETURN_IF_ERROR(MtpForwardBatch(r));
          break;
        default:
          return InvalidArgument("unknown plan operation ", static_cast<int>(op));
      }
    }
    return r.status();
  }

 private:
  struct Pools {
    std::shared_ptr<const CacheLayout> layout;
    std::vector<int64_t> arenas;  // blocks, slots, checkpoints, rollback snapshots
    int backing_rank = -1;        // −1: every rank's copy; r: only rank r holds the memory (--dp-attention)
    // --tp > 1 with the KDA heads split: the whole model's layout, that of the slots rank 0 writes (OnWriteSlot).
    std::shared_ptr<const CacheLayout> whole_layout;
  };
  // An entry of a Forward that streams its layers (an export): at --tp > 1 this rank sends rank 0 its KDA heads of
  // each layer as the pass finishes it (LockstepLeader::GatherKdaLayer).
  struct Streaming {
    Follower* follower = nullptr;
    const SequenceState* state = nullptr;
  };
  static void SendKdaLayer(void* context, int64_t layer);

  Status Attach(WireReader& r);
  void Detach(int64_t id) {
    auto found = pools_.find(id);
    if (found == pools_.end()) return;
    for (int64_t arena : found->second.arenas) arenas_.erase(arena);
    pools_.erase(found);
  }
  // A pointer into an attached arena; `arena_out` (optional) gets the arena, whose memory this rank may not hold.
  // `may_be_null`: a checkpoint target, whose null (kNoArena) means a split only.
  Result<std::byte*> GetPointer(WireReader& r, int64_t bytes, const ItemArena** arena_out = nullptr,
                                bool may_be_null = false);
  Status Copy(WireReader& r);
  Status Zero(WireReader& r);
  Status Write(WireReader& r);
  Status WriteSlot(WireReader& r);
  // The sequence a plan names: an owned one (kept here between plans) or a view into the pools (made in `bound`).
  Result<SequenceState*> GetState(WireReader& r, std::deque<SequenceState>& bound);
  // The MTP layer's hidden input: rows of the last Forward's outputs (hash checked), or values in the message.
  Result<std::span<const float>> GetHidden(WireReader& r, std::vector<float>& inline_values);
  Status GetOptions(WireReader& r, ForwardOptions& options);
  Status GetForced(WireReader& r, ForcedChoices& forced, bool& has);
  Status Forward(WireReader& r);
  Status MtpForward(WireReader& r);
  Status MtpForwardBatch(WireReader& r);

  const Model& model_;
  Communicator& comm_;
  std::map<int64_t, Pools> pools_;
  std::map<int64_t, ItemArena> arenas_;
  std::map<uint64_t, SequenceState> owned_;        // by rank 0's key
  std::deque<std::vector<int32_t>> block_tables_;  // of the bound states of the current plan
  std::vector<std::vector<int64_t>> forced_positions_;
  std::vector<EntryOutput> last_outputs_;  // of the last Forward: the MTP layer's hidden input
};

Status Follower::Attach(WireReader& r) {
  const int64_t id = r.Get<int64_t>();
  const int32_t backing_rank = r.Get<int32_t>();
  const int ranks = model_.shard_plan().ranks;
  if (backing_rank < -1 || backing_rank >= ranks) {
    return InvalidArgument("pools held by rank ", backing_rank, " of ", ranks);
  }
  // --dp-attention: the pools of another rank's sequences are only names here (no memory behind them).
  const bool backed = backing_rank < 0 || backing_rank == model_.shard_plan().rank;
  CacheOptions options;
  options.block_tokens = r.Get<int64_t>();
  options.kda_state = static_cast<KdaStateStorage>(r.Get<uint8_t>());
  options.mtp = r.Get<uint8_t>() != 0;
  options.kv_dtype = static_cast<KvCacheDtype>(r.Get<uint8_t>());
  const int64_t block_bytes = r.Get<int64_t>(), slot_bytes = r.Get<int64_t>();
  GLINT_RETURN_IF_ERROR(r.status());
  GLINT_ASSIGN_OR_RETURN(CacheLayout layout, model_.CacheLayoutFor(options));
  if (layout.block_bytes != block_bytes || layout.slot_bytes != slot_bytes) {
    return FailedPrecondition("the cache layout differs from rank 0's: blocks of ", layout.block_bytes,
                              " bytes (rank 0: ", block_bytes, "), slots of ", layout.slot_bytes,
                              " (rank 0: ", slot_bytes, ")");
  }
  Pools& pools = pools_[id];
  pools.layout = std::make_shared<const CacheLayout>(std::move(layout));
  pools.backing_rank = backing_rank;
  if (model_.shard_plan().kda_split) {
    GLINT_ASSIGN_OR_RETURN(CacheLayout whole, MakeCacheLayout(model_.config(), options));
    pools.whole_layout = std::make_shared<const CacheLayout>(std::move(whole));
  }
  const uint64_t count = GetCount(r);
  for (uint64_t i = 0; i < count && r.ok(); ++i) {
    const int64_t arena = r.Get<int64_t>(), items = r.Get<int64_t>(), item_bytes = r.Get<int64_t>();
    GLINT_RETURN_IF_ERROR(r.status());
    pools.arenas.push_back(arena);
    if (items == 0) {
      arenas_[arena] = ItemArena();
      continue;
    }
    GLINT_ASSIGN_OR_RETURN(arenas_[arena],
                           backed ? ItemArena::Fixed(items, item_bytes) : ItemArena::Reserved(items, item_bytes));
  }
  if (pools.arenas.empty()) return InvalidArgument("pools without a block arena");
  return r.status();
}

Result<std::byte*> Follower::GetPointer(WireReader& r, int64_t bytes, const ItemArena** arena_out, bool may_be_null) {
  const int64_t arena = r.Get<int64_t>(), offset = r.Get<int64_t>();
  GLINT_RETURN_IF_ERROR(r.status());
  if (may_be_null && arena == kNoArena && offset == 0) return nullptr;
  auto found = arenas_.find(arena);
  if (found == arenas_.end() || found->second.count() == 0) return InvalidArgument("unknown pool arena ", arena);
  const int64_t size = found->second.count() * found->second.item_bytes();
  if (offset < 0 || bytes < 0 || offset > size - bytes) {
    return InvalidArgument(bytes, " bytes at ", offset, " are outside a pool arena of ", size, " bytes");
  }
  if (arena_out != nullptr) *arena_out = &found->second;
  return found->second.Item(0) + offset;
}

Status Follower::Copy(WireReader& r) {
  WireReader peek = r;  // the size comes after both pointers
  peek.Get<int64_t>(), peek.Get<int64_t>(), peek.Get<int64_t>(), peek.Get<int64_t>();
  const int64_t bytes = peek.Get<int64_t>();
  const ItemArena *to = nullptr, *from = nullptr;
  GLINT_ASSIGN_OR_RETURN(std::byte * destination, GetPointer(r, bytes, &to));
  GLINT_ASSIGN_OR_RETURN(std::byte * source, GetPointer(r, bytes, &from));
  r.Get<int64_t>();
  GLINT_RETURN_IF_ERROR(r.status());
  // --dp-attention: a copy in another rank's pools is that rank's to make (the engine copies within one rank's).
  if (to->backed() != from->backed()) return InvalidArgument("a pool copy between one rank's memory and another's");
  if (to->backed()) std::memmove(destination, source, bytes);
  return Status::Ok();
}

Status Follower::Zero(WireReader& r) {
  WireReader peek = r;
  peek.Get<int64_t>(), peek.Get<int64_t>();
  const int64_t bytes = peek.Get<int64_t>();
  const ItemArena* arena = nullptr;
  GLINT_ASSIGN_OR_RETURN(std::byte * destination, GetPointer(r, bytes, &arena));
  r.Get<int64_t>();
  GLINT_RETURN_IF_ERROR(r.status());
  if (arena->backed()) std::memset(destination, 0, bytes);  // else another rank's pools: its clear
  return Status::Ok();
}

Status Follower::Write(WireReader& r) {
  WireReader peek = r;  // the length comes after the pointer
  peek.Get<int64_t>(), peek.Get<int64_t>();
  const auto bytes = static_cast<int64_t>(peek.Get<uint64_t>());
  const ItemArena* arena = nullptr;
  GLINT_ASSIGN_OR_RETURN(std::byte * destination, GetPointer(r, bytes, &arena));
  const std::span<const std::byte> source = r.GetBytes();
  GLINT_RETURN_IF_ERROR(r.status());
  // --dp-attention is refused with disaggregation (engine_transfer.cc): every write is into pools every rank holds.
  if (!arena->backed()) return InvalidArgument("an imported state written into another rank's pools");
  if (!source.empty()) std::memcpy(destination, source.data(), source.size());
  return Status::Ok();
}

Status Follower::WriteSlot(WireReader& r) {
  const ItemArena* arena = nullptr;
  GLINT_ASSIGN_OR_RETURN(std::byte * slot, GetPointer(r, 0, &arena));
  const std::span<const std::byte> whole_slot = r.GetBytes();
  GLINT_RETURN_IF_ERROR(r.status());
  const auto pools = std::find_if(pools_.begin(), pools_.end(), [&](const auto& entry) {
    return entry.second.arenas.size() > 1 && &arenas_.at(entry.second.arenas[1]) == arena;
  });
  if (pools == pools_.end() || pools->second.whole_layout == nullptr) {
    return InvalidArgument("a whole slot written outside the slots of pools whose KDA heads are split");
  }
  const Pools& p = pools->second;
  const int64_t offset = slot - arena->Item(0);
  if (offset % arena->item_bytes() != 0 || static_cast<int64_t>(whole_slot.size()) != p.whole_layout->slot_bytes) {
    return InvalidArgument("a whole slot of ", whole_slot.size(), " bytes at byte ", offset, " of the slots; expected ",
                           p.whole_layout->slot_bytes, " bytes at a slot's start");
  }
  CopyWholeSlotToPart(*p.whole_layout, whole_slot, *p.layout, model_.shard_plan().slices().kda_heads.begin, slot);
  return Status::Ok();
}

void Follower::SendKdaLayer(void* context, int64_t layer) {
  const auto& streaming = *static_cast<const Streaming*>(context);
  const SequenceState& state = *streaming.state;
  if (state.layout->layers[layer].kind != AttentionKind::kKda) return;  // whole on rank 0: nothing to gather
  Communicator& comm = streaming.follower->comm_;
  const ShardPlan plan = streaming.follower->model_.shard_plan();
  const bool in_rank0_group = plan.rank < plan.tp;  // the other groups hold the same heads again
  const std::vector<std::byte> own =
      in_rank0_group ? PackOwnHeads(state.memory.slot, *state.layout, layer) : std::vector<std::byte>{};
  const Status status = comm.Gather(own, KdaHeadCounts(plan, *state.layout), {}, 0);
  if (!status.ok()) {
    AbortAllRanks(comm,
                  StrCat("rank ", comm.rank(), " could not send its KDA heads of layer ", layer,
                         " for an export: ", status.message()),
                  1);
  }
}

Result<SequenceState*> Follower::GetState(WireReader& r, std::deque<SequenceState>& bound) {
  const auto kind = r.Get<StateKind>();
  SequenceState* state = nullptr;
  if (kind == StateKind::kOwned) {
    const uint64_t key = r.Get<uint64_t>();
    const int32_t attention_rank = r.Get<int32_t>();
    const int64_t tokens = r.Get<int64_t>(), mtp_tokens = r.Get<int64_t>();
    GLINT_RETURN_IF_ERROR(r.status());
    auto found = owned_.find(key);
    if (tokens == 0 && mtp_tokens == 0) {  // a new sequence (rank 0's key may be an old one's, reused)
      const bool here = attention_rank < 0 || attention_rank == model_.shard_plan().rank;
      SequenceState state = here ? model_.NewSequence() : HeldElsewhereSequence(model_, attention_rank);
      state.attention_rank = attention_rank;
      found = owned_.insert_or_assign(key, std::move(state)).first;
    }
    if (found == owned_.end() || found->second.tokens != tokens || found->second.mtp_tokens != mtp_tokens) {
      return FailedPrecondition("a sequence of rank 0 at ", tokens, " positions (", mtp_tokens,
                                " MTP pairs) is not here in that state: the ranks diverged");
    }
    return &found->second;
  }
  if (kind != StateKind::kBound) return InvalidArgument("unknown sequence kind ", static_cast<int>(kind));
  const int64_t pools_id = r.Get<int64_t>();
  block_tables_.push_back(r.GetVector<int32_t>());
  auto pools = pools_.find(pools_id);
  if (pools == pools_.end()) return InvalidArgument("unknown pools ", pools_id);
  const Pools& p = pools->second;
  const ItemArena& blocks = arenas_.at(p.arenas[0]);
  for (int32_t block : block_tables_.back()) {
    if (block < 0 || block >= blocks.count()) return InvalidArgument("block ", block, " of ", blocks.count());
  }
  GLINT_ASSIGN_OR_RETURN(std::byte * slot, GetPointer(r, p.layout->slot_bytes));
  const int32_t attention_rank = r.Get<int32_t>();
  const int64_t tokens = r.Get<int64_t>(), mtp_tokens = r.Get<int64_t>();
  GLINT_RETURN_IF_ERROR(r.status());
  if (p.backing_rank >= 0 && attention_rank != p.backing_rank) {
    return FailedPrecondition("a sequence in rank ", p.backing_rank, "'s pools has attention rank ", attention_rank);
  }
  // A sequence in another rank's pools (--dp-attention) is only named here: the model advances its positions.
  const bool elsewhere = !blocks.backed();
  bound.push_back(model_.BindSequence(p.layout, {&blocks, &block_tables_.back(), slot, elsewhere}, tokens, mtp_tokens));
  state = &bound.back();
  state->attention_rank = attention_rank;
  return state;
}

Result<std::span<const float>> Follower::GetHidden(WireReader& r, std::vector<float>& inline_values) {
  const auto kind = r.Get<HiddenKind>();
  if (kind == HiddenKind::kInline) {
    inline_values = r.GetVector<float>();
    GLINT_RETURN_IF_ERROR(r.status());
    return std::span<const float>(inline_values);
  }
  const uint64_t entry = r.Get<uint64_t>(), offset = r.Get<uint64_t>(), count = r.Get<uint64_t>();
  const uint64_t hash = r.Get<uint64_t>();
  GLINT_RETURN_IF_ERROR(r.status());
  if (kind != HiddenKind::kInLastForward || entry >= last_outputs_.size() ||
      offset > last_outputs_[entry].hidden.size() || count > last_outputs_[entry].hidden.size() - offset) {
    return InvalidArgument("the MTP layer's hidden input is not in this rank's last forward outputs");
  }
  const std::span<const float> hidden(last_outputs_[entry].hidden.data() + offset, count);
  if (HashFloats(hidden) != hash) {
    return FailedPrecondition(
        "this rank's final hidden state differs from rank 0's (the ranks diverged: different "
        "weights, kernels or thread counts?)");
  }
  return hidden;
}

Status Follower::GetOptions(WireReader& r, ForwardOptions& options) {
  options.kda_algorithm = static_cast<KdaAlgorithm>(r.Get<uint8_t>());
  options.dsa.form = static_cast<MlaForm>(r.Get<uint8_t>());
  options.dsa.selection = static_cast<KeySelection>(r.Get<uint8_t>());
  const uint64_t forced = GetCount(r);
  forced_positions_.clear();
  for (uint64_t i = 1; i < forced && r.ok(); ++i) forced_positions_.push_back(r.GetVector<int64_t>());
  options.dsa.forced_positions = forced > 0 ? &forced_positions_ : nullptr;
  return r.status();
}

Status Follower::GetForced(WireReader& r, ForcedChoices& forced, bool& has) {
  has = r.Get<uint8_t>() != 0;
  if (!has) return r.status();
  const uint64_t layers = GetCount(r);
  for (uint64_t l = 0; l < layers && r.ok(); ++l) {
    auto& layer = forced.router.emplace_back();
    const uint64_t tokens = GetCount(r);
    for (uint64_t t = 0; t < tokens && r.ok(); ++t) {
      RouterChoice& choice = layer.emplace_back();
      choice.experts = r.GetVector<int32_t>();
      choice.weights = r.GetVector<float>();
      choice.margin = r.Get<float>();
    }
  }
  const uint64_t attended_layers = GetCount(r);
  for (uint64_t l = 0; l < attended_layers && r.ok(); ++l) {
    auto& layer = forced.attended.emplace_back();
    const uint64_t tokens = GetCount(r);
    for (uint64_t t = 0; t < tokens && r.ok(); ++t) layer.push_back(r.GetVector<int64_t>());
  }
  return r.status();
}

Status Follower::Forward(WireReader& r) {
  ForwardOptions options;
  GLINT_RETURN_IF_ERROR(GetOptions(r, options));
  ForcedChoices forced;
  bool has_forced = false;
  GLINT_RETURN_IF_ERROR(GetForced(r, forced, has_forced));
  const uint64_t entries = GetCount(r);
  std::deque<SequenceState> bound;
  std::deque<std::vector<int32_t>> tokens;
  std::deque<std::vector<StateCheckpoint>> checkpoints;
  std::deque<std::vector<int32_t>> image_positions;
  std::deque<std::vector<float>> image_rows;
  std::deque<Streaming> streaming;
  std::vector<BatchEntry> batch;
  block_tables_.clear();
  for (uint64_t i = 0; i < entries && r.ok(); ++i) {
    BatchEntry entry;
    GLINT_ASSIGN_OR_RETURN(entry.state, GetState(r, bound));
    const int64_t checkpoint_bytes = entry.state->layout != nullptr ? entry.state->layout->checkpoint_bytes : 0;
    entry.tokens = tokens.emplace_back(r.GetVector<int32_t>());
    entry.logits = r.Get<LogitsWanted>();
    // Rank 0 samples, not this rank; under --dp-attention this rank sends rank 0 its rows that want logits.
    if (!FollowerComputesLogits(model_) && !model_.shard_plan().dp_attention) entry.logits = LogitsWanted::kNone;
    entry.want_hidden = r.Get<uint8_t>() != 0;
    if (r.Get<uint8_t>() != 0 && model_.shard_plan().kda_split) {
      entry.layer_done = {&Follower::SendKdaLayer, &streaming.emplace_back(Streaming{this, entry.state})};
    }
    entry.embedding_positions = image_positions.emplace_back(r.GetVector<int32_t>());
    entry.embedding_rows = image_rows.emplace_back(r.GetVector<float>());
    const uint64_t targets = GetCount(r);
    auto& list = checkpoints.emplace_back();
    for (uint64_t c = 0; c < targets && r.ok(); ++c) {
      StateCheckpoint& target = list.emplace_back();
      target.position = r.Get<int64_t>();
      GLINT_ASSIGN_OR_RETURN(target.data, GetPointer(r, checkpoint_bytes, nullptr, /*may_be_null=*/true));
    }
    entry.checkpoints = list;
    const uint8_t rollbacks = r.Get<uint8_t>();
    auto& snapshots = checkpoints.emplace_back();
    for (uint8_t k = 0; k < rollbacks && r.ok(); ++k) {
      StateCheckpoint& snapshot = snapshots.emplace_back();
      snapshot.position = r.Get<int64_t>();
      GLINT_ASSIGN_OR_RETURN(snapshot.data, GetPointer(r, checkpoint_bytes));
    }
    entry.rollback = snapshots;
    if (entry.state->HeldElsewhere()) {  // its checkpoints are in another rank's pools, which that rank writes
      list.clear();
      snapshots.clear();
      entry.checkpoints = {};
      entry.rollback = {};
    }
    batch.push_back(entry);
  }
  GLINT_RETURN_IF_ERROR(r.status());
  const Status status = model_.Forward(batch, last_outputs_, options, nullptr, has_forced ? &forced : nullptr);
  return OnlyEntriesFailed(status, last_outputs_) ? Status::Ok() : status;  // rank 0 failed the same entries
}

Status Follower::MtpForward(WireReader& r) {
  ForwardOptions options;
  GLINT_RETURN_IF_ERROR(GetOptions(r, options));
  std::deque<SequenceState> bound;
  block_tables_.clear();
  GLINT_ASSIGN_OR_RETURN(SequenceState * state, GetState(r, bound));
  std::vector<float> inline_hidden, logits;
  GLINT_ASSIGN_OR_RETURN(const std::span<const float> hidden, GetHidden(r, inline_hidden));
  const std::vector<int32_t> next_tokens = r.GetVector<int32_t>();
  std::deque<std::vector<int32_t>> image_positions;
  std::deque<std::vector<float>> image_rows;
  const MtpReplacedEmbeddings replaced = GetReplaced(r, image_positions, image_rows);
  GLINT_RETURN_IF_ERROR(r.status());
  options.mtp_logits = FollowerComputesLogits(model_);
  return model_.MtpForward(*state, hidden, next_tokens, logits, options, nullptr, replaced);
}

Status Follower::MtpForwardBatch(WireReader& r) {
  ForwardOptions options;
  GLINT_RETURN_IF_ERROR(GetOptions(r, options));
  const bool per_entry_errors = r.Get<uint8_t>() != 0;
  const uint64_t entries = GetCount(r);
  std::deque<SequenceState> bound;
  std::deque<std::vector<float>> inline_hidden;
  std::deque<std::vector<int32_t>> next_tokens;
  std::deque<std::vector<int32_t>> image_positions;
  std::deque<std::vector<float>> image_rows;
  std::vector<MtpEntry> batch;
  block_tables_.clear();
  for (uint64_t i = 0; i < entries && r.ok(); ++i) {
    MtpEntry entry;
    GLINT_ASSIGN_OR_RETURN(entry.state, GetState(r, bound));
    GLINT_ASSIGN_OR_RETURN(entry.hidden, GetHidden(r, inline_hidden.emplace_back()));
    entry.next_tokens = next_tokens.emplace_back(r.GetVector<int32_t>());
    entry.logits = r.Get<LogitsWanted>();
    entry.replaced = GetReplaced(r, image_positions, image_rows);
    batch.push_back(entry);
  }
  GLINT_RETURN_IF_ERROR(r.status());
  options.mtp_logits = FollowerComputesLogits(model_);
  std::vector<std::vector<float>> logits;
  std::vector<Status> entry_errors;
  std::vector<Status>* errors = per_entry_errors ? &entry_errors : nullptr;
  const Status status = model_.MtpForwardBatch(batch, logits, options, errors);
  return OnlyMtpEntriesFailed(status, errors) ? Status::Ok() : status;  // rank 0 failed the same entries
}

}  // namespace

Status RunLockstepFollower(const Model& model, Communicator& comm) {
  Follower follower(model, comm);
  for (;;) {
    std::vector<std::byte> message;
    Status status = comm.Broadcast(message, 0);
    bool stop = false;
    if (status.ok()) status = follower.Run(message, stop);
    if (!status.ok()) {
      AbortAllRanks(comm, StrCat("rank ", comm.rank(), " could not run rank 0's batch plan: ", status.message()), 1);
    }
    if (stop) return Status::Ok();
  }
}

}  // namespace glint
