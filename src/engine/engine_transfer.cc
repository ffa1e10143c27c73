// Prefill/decode disaggregation in the engine (docs/disaggregation.md): a prefill engine exports the state of a
// sequence after its prompt, a decode engine leases memory for it, copies it in and samples the first token from
// the transferred logits. The bytes are the cache layout's own, so both engines must share it; the transfer plane
// (server/state_transfer.h) checks that with a fingerprint and checksums before anything reaches Add.
#include <algorithm>
#include <array>
#include <cstring>

#include "base/log.h"
#include "engine/engine_core.h"

namespace glint {

Status CheckStateOnRankZero(const ShardPlan& plan) {
  // Rank 0 exports and imports through its own pools, and the followers get an import's bytes in the next plan
  // (EngineMirror::OnWrite). That takes every sequence's state on rank 0: whole when attention is replicated, its own
  // KDA heads at --tp > 1 (the rest gathered from its tp group layer by layer for an export, and each rank writing
  // its heads of an import: EngineMirror::GatherKdaLayer, OnWriteSlot). Under --dp-attention a sequence lives on one
  // rank only.
  if (plan.dp_attention) {
    return Unimplemented(
        "prefill/decode disaggregation with --dp-attention is not supported (a sequence's state lives only on the "
        "rank its attention runs on, not on rank 0, which sends and receives states): run the prefill or decode "
        "server without --dp-attention");
  }
  return Status::Ok();
}

Status EngineCore::ValidateImport(const Request& request) const {
  if (!request.export_state && request.imported == nullptr && !request.stream_layers) return Status::Ok();
  if (request.export_state && request.imported != nullptr) {
    return InvalidArgument("a request cannot both export its prompt's state and import it");
  }
  GLINT_RETURN_IF_ERROR(CheckStateOnRankZero(model_.shard_plan()));
  const int64_t length = static_cast<int64_t>(request.prompt.size());
  if (request.export_state) {
    if (request.n != 1) return InvalidArgument("an export of the prompt's state has n = 1; got n = ", request.n);
    if (transfer_layout_ != layout_ && !request.stream_layers) {
      return InvalidArgument(
          "an export with the KDA heads split over ranks (--tp > 1) streams its layers (the heads "
          "are gathered layer by layer inside the forward pass)");
    }
    return Status::Ok();
  }
  if (request.stream_layers) return InvalidArgument("stream_layers needs export_state");
  const SequenceSnapshot& s = *request.imported;
  const int64_t vocab = model_.config().vocab_size;
  const int64_t blocks = (length + capacity_.block_tokens - 1) / capacity_.block_tokens;
  if (s.tokens != length) {
    return InvalidArgument("the transferred state covers ", s.tokens, " positions, the prompt has ", length);
  }
  // The whole model's layout (transfer_layout), whatever this engine's ranks hold of it.
  const int64_t slot_bytes = transfer_layout_->slot_bytes, block_bytes = transfer_layout_->block_bytes;
  if (static_cast<int64_t>(s.slot.size()) != slot_bytes ||
      static_cast<int64_t>(s.blocks.size()) != blocks * block_bytes || static_cast<int64_t>(s.logits.size()) != vocab) {
    return InvalidArgument("the transferred state has ", s.slot.size(), " slot bytes, ", s.blocks.size(),
                           " block bytes and ", s.logits.size(), " logits; this engine expects ", slot_bytes, ", ",
                           blocks * block_bytes, " and ", vocab);
  }
  // With the MTP layer (the layout's sizes include its cache, so both engines run it) the last position's hidden
  // row must come too: without it this engine could not draft before its second token.
  const int64_t hidden = speculative() ? model_.config().hidden_size : 0;
  if (static_cast<int64_t>(s.hidden.size()) != hidden || !s.mtp.empty()) {
    return InvalidArgument("the transferred state has a hidden row of ", s.hidden.size(), " values and ", s.mtp.size(),
                           " packed MTP bytes; this engine ",
                           speculative() ? "runs --speculative mtp and expects " : "runs no MTP layer and expects ",
                           hidden, " and 0 (the MTP rows are in its slot and blocks)");
  }
  return Status::Ok();
}

Status EngineCore::Lease(uint64_t lease, int64_t tokens, double seconds) {
  if (leases_.count(lease) != 0) return InvalidArgument("lease ", lease, " is already in use");
  if (tokens < 1 || tokens >= capacity_.max_model_len) {
    return InvalidArgument("a lease for ", tokens, " positions; expected 1 .. ", capacity_.max_model_len - 1);
  }
  if (!(seconds > 0)) return InvalidArgument("a lease of ", seconds, " seconds; expected more than 0");
  const SequenceId sequence = next_sequence_++;
  if (!scheduler_->Lease(sequence, tokens)) {
    return ResourceExhausted("no slot or not enough free blocks now for the state of a ", tokens, "-token prompt");
  }
  leases_[lease] = {sequence, tokens, Now() + seconds};
  return Status::Ok();
}

int64_t EngineCore::CachedPrefix(std::span<const int32_t> prompt) const {
  if (!options_.prefix_caching) return 0;
  int64_t longest = 0;  // --dp-attention: a new sequence may go to any rank's partition
  for (const auto& memory : memories_) longest = std::max(longest, memory->FindPrefix(prompt).tokens);
  return longest;
}

void EngineCore::ReleaseLease(uint64_t lease) {
  const auto found = leases_.find(lease);
  if (found == leases_.end()) return;
  scheduler_->ReleaseLease(found->second.sequence);
  leases_.erase(found);
}

int64_t EngineCore::ExpireLeases() {
  const double now = Now();
  int64_t expired = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    LogWarning("engine: lease ", it->first, " for a ", it->second.tokens,
               "-token prompt expired before its state arrived; its memory is freed");
    scheduler_->ReleaseLease(it->second.sequence);
    it = leases_.erase(it);
    ++expired;
  }
  return expired;
}

std::optional<double> EngineCore::SecondsToNextExpiry() const {
  if (leases_.empty()) return std::nullopt;
  double next = leases_.begin()->second.deadline;
  for (const auto& [id, lease] : leases_) next = std::min(next, lease.deadline);
  return std::max(0.0, next - Now());
}

std::shared_ptr<const SequenceSnapshot> EngineCore::TakeSnapshot(SequenceId id, std::span<const float> logits,
                                                                 std::span<const float> hidden, bool whole) const {
  auto snapshot = std::make_shared<SequenceSnapshot>();
  snapshot->tokens = scheduler_->Get(id).prompt_length;
  snapshot->logits.assign(logits.begin(), logits.end());
  if (speculative()) {
    GLINT_CHECK(static_cast<int64_t>(hidden.size()) == model_.config().hidden_size)
        << "an export with the MTP layer got " << hidden.size() << " hidden values";
    snapshot->hidden.assign(hidden.begin(), hidden.end());
    // The MTP layer's cache is whole on rank 0 at any --tp, as a DSA layer's; written by this step's MTP pass.
    if (!whole) snapshot->mtp = PackRegions(id, MtpRegions(*layout_));
  }
  if (!whole) return snapshot;
  // Disaggregation is refused with --dp-attention (CheckStateOnRankZero): one partition holds every sequence.
  const std::byte* slot = memories_[0]->Slot(id);
  snapshot->slot.assign(slot, slot + capacity_.slot_bytes);
  const int64_t blocks = (snapshot->tokens + capacity_.block_tokens - 1) / capacity_.block_tokens;
  const std::vector<int32_t>& table = memories_[0]->BlockTable(id);
  snapshot->blocks.resize(static_cast<size_t>(blocks * capacity_.block_bytes));
  for (int64_t i = 0; i < blocks; ++i) {
    std::memcpy(snapshot->blocks.data() + i * capacity_.block_bytes, memories_[0]->block_arena().Item(table[i]),
                capacity_.block_bytes);
  }
  return snapshot;
}

void EngineCore::OnLayerDone(void* stream, int64_t layer) {
  const auto* s = static_cast<const LayerStream*>(stream);
  s->core->StreamLayer(s->id, layer);
}

void EngineCore::StreamLayer(SequenceId id, int64_t layer) {
  Sample& sample = samples_.at(id);
  GLINT_CHECK(layer == sample.layers_streamed) << "layer " << layer << " done before layer " << sample.layers_streamed;
  RequestOutput output;
  output.request = sample.request;
  output.index = sample.index;
  output.time = Now();
  output.layer = std::make_shared<const LayerState>(LayerState{layer, PackLayer(id, layer)});
  ++sample.layers_streamed;
  requests_.at(sample.request).request.sink->OnOutput(std::move(output));
}

std::vector<std::byte> EngineCore::PackLayer(SequenceId id, int64_t layer) const {
  const std::byte* slot = memories_[0]->Slot(id);
  if (transfer_layout_ != layout_ && layout_->layers[layer].kind == AttentionKind::kKda) {
    // --tp > 1: this rank holds some of the heads; the other ranks send theirs now (the plan told them). A DSA
    // layer's state is whole here, at the same sizes as in the whole layout.
    return mirror_->GatherKdaLayer(slot, *layout_, *transfer_layout_, layer);
  }
  return PackRegions(id, LayerRegions(*layout_, layer));
}

std::vector<std::byte> EngineCore::PackRegions(SequenceId id, std::span<const CacheRegion> regions) const {
  const std::byte* slot = memories_[0]->Slot(id);
  const int64_t blocks = (scheduler_->Get(id).prompt_length + capacity_.block_tokens - 1) / capacity_.block_tokens;
  std::vector<std::byte> bytes;
  bytes.reserve(static_cast<size_t>(RegionStateBytes(regions, blocks)));
  for (const CacheRegion& r : regions) {
    if (r.in_slot) bytes.insert(bytes.end(), slot + r.offset, slot + r.offset + r.bytes);
  }
  const std::vector<int32_t>& table = memories_[0]->BlockTable(id);
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* block = memories_[0]->block_arena().Item(table[b]);
    for (const CacheRegion& r : regions) {
      if (!r.in_slot) bytes.insert(bytes.end(), block + r.offset, block + r.offset + r.bytes);
    }
  }
  return bytes;
}

void EngineCore::CopySnapshotIn(SequenceId id, const SequenceSnapshot& snapshot) {
  // Under several ranks the followers write the same bytes before the sequence's next step (EngineMirror).
  const auto write = [&](std::byte* destination, std::span<const std::byte> bytes) {
    std::memcpy(destination, bytes.data(), bytes.size());
    if (mirror_ != nullptr) mirror_->OnWrite(destination, bytes);
  };
  std::byte* slot = memories_[0]->Slot(id);
  if (transfer_layout_ == layout_) {
    write(slot, snapshot.slot);
  } else {  // --tp > 1: every rank writes the KDA heads it holds
    CopyWholeSlotToPart(*transfer_layout_, snapshot.slot, *layout_, model_.shard_plan().slices().kda_heads.begin, slot);
    mirror_->OnWriteSlot(slot, *layout_, snapshot.slot, *transfer_layout_);
  }
  const std::vector<int32_t>& table = memories_[0]->BlockTable(id);
  const int64_t blocks = static_cast<int64_t>(snapshot.blocks.size()) / capacity_.block_bytes;
  const std::span<const std::byte> all(snapshot.blocks);
  for (int64_t i = 0; i < blocks; ++i) {
    write(memories_[0]->block_arena().Item(table[i]),
          all.subspan(static_cast<size_t>(i * capacity_.block_bytes), static_cast<size_t>(capacity_.block_bytes)));
  }
}

Status EngineCore::StartImported(SequenceId id) {
  // As a step whose chunk just ended the prompt: the first token from the prompt's last logits, with speculation
  // the MTP pair of the last prompt position (the snapshot's hidden row and that token), the positions committed,
  // the siblings forked from the same logits (each with its own MTP pair), then the tokens handed out. The next
  // step feeds that token: the last prompt position is never computed twice.
  const int64_t length = scheduler_->Get(id).prompt_length;
  Bind(id, speculative() ? length - 1 : -1);  // the transferred MTP cache holds the pairs before the last one
  Sample& sample = samples_.at(id);
  sample.timings.first_scheduled = Now();
  const SequenceSnapshot& snapshot = *requests_.at(sample.request).request.imported;
  const std::span<const float> logits(snapshot.logits), hidden(snapshot.hidden);
  const int32_t token = ChooseToken(sample, logits);
  Append(id, token);
  std::vector<RequestOutput> outputs;
  if (speculative()) {  // drafts the next token, as the last chunk's MTP batch does on one engine
    std::vector<std::pair<SequenceId, Status>> failed;
    const std::array<MtpWork, 1> work{MtpWork{id, hidden, length - 1}};
    GLINT_RETURN_IF_ERROR(RunMtp(work, failed));
    FailMtpSequences(failed, 1, outputs);
    if (!failed.empty()) {  // its request ended with the error
      Deliver(outputs);
      return Status::Ok();
    }
  }
  // With speculation a block's key holds the token after it, so its rows are final only now.
  MemoryOf(id).Commit(id, scheduler_->Keys(id), length);
  std::vector<MtpWork> children_work;
  std::vector<Emission> emissions = ForkChildren(id, logits, hidden, length - 1, children_work);
  if (speculative()) GLINT_RETURN_IF_ERROR(RunChildrenMtp(children_work, outputs));
  CommitChildren(children_work);
  emissions.push_back({id, token, logits});
  for (const Emission& emission : emissions) {
    if (samples_.count(emission.id) != 0) EmitToken(emission, outputs);
  }
  Deliver(outputs);
  return Status::Ok();
}

}  // namespace glint
