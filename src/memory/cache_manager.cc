#include "memory/cache_manager.h"

#include <algorithm>
#include <cstring>

namespace glint {

CacheManager::CacheManager(const CacheManagerOptions& options)
    : options_(options),
      blocks_(options.num_blocks, options.block_tokens, options.block_tokens + (options.key_next_token ? 1 : 0)),
      slots_(options.num_slots),
      checkpoints_(options.num_checkpoints) {
  // A checkpoint is only usable while the block that ends at it is cached (in memory or on disk): without a disk
  // tier it is dropped with the block.
  blocks_.set_eviction_listener([this](int32_t id, BlockHash hash, BlockHash parent, std::span<const int32_t> key) {
    OnBlockEvicted(id, hash, parent, key);
  });
  checkpoints_.set_eviction_listener(
      [this](int32_t id, BlockHash hash, bool demoted) { OnCheckpointEvicted(id, hash, demoted); });
}

Result<std::unique_ptr<CacheManager>> CacheManager::Create(const CacheManagerOptions& o) {
  if (o.block_tokens <= 0) return InvalidArgument("block_tokens is ", o.block_tokens, "; expected a positive count");
  if (o.num_blocks < 0 || o.num_slots < 0 || o.num_checkpoints < 0) {
    return InvalidArgument("pool sizes must be ≥ 0 (blocks ", o.num_blocks, ", slots ", o.num_slots, ", checkpoints ",
                           o.num_checkpoints, ")");
  }
  // Checked before the pools are built: their ids are int32_t, and a larger count would overflow them.
  if (o.num_blocks > kMaxItemsPerPool || o.num_slots > kMaxItemsPerPool || o.num_checkpoints > kMaxItemsPerPool) {
    return InvalidArgument("pool sizes must be at most 2^31 − 1 items, the range of a block id (blocks ", o.num_blocks,
                           ", slots ", o.num_slots, ", checkpoints ", o.num_checkpoints, ")");
  }
  for (auto [bytes, name] : {std::pair{o.block_bytes, "block"}, {o.slot_bytes, "slot"}}) {
    if (bytes <= 0 || bytes % kItemAlignment != 0) {
      return InvalidArgument(name, " size ", bytes, " bytes is not a positive multiple of ", kItemAlignment);
    }
  }
  if (o.checkpoint_bytes < 0 || o.checkpoint_bytes > o.slot_bytes || o.checkpoint_bytes % kItemAlignment != 0) {
    return InvalidArgument("checkpoint size ", o.checkpoint_bytes, " bytes must be a multiple of ", kItemAlignment,
                           " within the slot's ", o.slot_bytes);
  }
  if (o.checkpoint_bytes == 0 && o.num_checkpoints > 0) {
    return InvalidArgument("checkpoints were asked for but the slot has no recurrent state to keep");
  }
  if (o.dense_checkpoints < 1) {
    return InvalidArgument("the tail policy's dense checkpoints must be ≥ 1, got ", o.dense_checkpoints);
  }
  if (o.prefix_caching) {
    if (o.checkpoint_interval <= 0 || o.checkpoint_interval % o.block_tokens != 0) {
      return InvalidArgument("checkpoint interval ", o.checkpoint_interval,
                             " tokens must be a positive multiple of the block size (", o.block_tokens, " tokens)");
    }
    if (o.checkpoint_bytes > 0 && o.num_checkpoints == 0) {
      return InvalidArgument(
          "prefix caching a model with recurrent state needs at least one state checkpoint; "
          "give the checkpoint pool some memory or turn prefix caching off");
    }
  }
  std::unique_ptr<CacheManager> manager(new CacheManager(o));
  const auto arena = o.backed ? &ItemArena::Fixed : &ItemArena::Reserved;
  GLINT_ASSIGN_OR_RETURN(manager->block_arena_, arena(o.num_blocks, o.block_bytes));
  GLINT_ASSIGN_OR_RETURN(manager->slot_arena_, arena(o.num_slots, o.slot_bytes));
  if (o.num_checkpoints > 0) {
    GLINT_ASSIGN_OR_RETURN(manager->checkpoint_arena_, arena(o.num_checkpoints, o.checkpoint_bytes));
  }
  return manager;
}

CacheManager::Sequence& CacheManager::Get(SequenceId id) {
  auto found = sequences_.find(id);
  GLINT_CHECK(found != sequences_.end()) << "sequence " << id << " is not live";
  return *found->second;
}

const CacheManager::Sequence& CacheManager::Get(SequenceId id) const {
  auto found = sequences_.find(id);
  GLINT_CHECK(found != sequences_.end()) << "sequence " << id << " is not live";
  return *found->second;
}

const std::vector<int32_t>& CacheManager::BlockTable(SequenceId id) const { return Get(id).blocks; }
int64_t CacheManager::Committed(SequenceId id) const { return Get(id).committed; }
int32_t CacheManager::SlotOf(SequenceId id) const { return Get(id).slot; }
std::byte* CacheManager::Slot(SequenceId id) const { return slot_arena_.Item(Get(id).slot); }

std::span<const int32_t> CacheManager::BlockKey(std::span<const int32_t> tokens, int64_t i) const {
  const int64_t b = options_.block_tokens;
  GLINT_CHECK((i + 1) * b + KeyExtra() <= static_cast<int64_t>(tokens.size())) << "block " << i << " has no key yet";
  return tokens.subspan(i * b, b + KeyExtra());
}

PrefixMatch CacheManager::FindPrefix(std::span<const int32_t> tokens) const {
  PrefixMatch match;
  if (!options_.prefix_caching) return match;
  const int64_t b = options_.block_tokens;
  const int64_t length = static_cast<int64_t>(tokens.size());
  BlockHash parent = kRootBlockHash;
  std::vector<int32_t> blocks;
  std::vector<BlockHash> hashes;
  // A block is reusable only if at least one token follows it (the sequence needs logits for its last token).
  // (With key_next_token that token is also the last of the block's key.)
  for (int64_t i = 0; (i + 1) * b <= length - 1; ++i) {
    const std::span<const int32_t> key = BlockKey(tokens, i);
    const BlockHash hash = HashBlock(parent, key);
    const std::optional<int32_t> block = blocks_.Lookup(hash, parent, key);
    if (!block) break;
    blocks.push_back(*block);
    hashes.push_back(hash);
    parent = hash;
    const int64_t end = (i + 1) * b;
    std::optional<int32_t> checkpoint;
    if (NeedsCheckpoints()) {  // the recurrent state exists only at checkpoint positions
      if (end % options_.checkpoint_interval != 0) continue;
      checkpoint = checkpoints_.Peek(hash);
      if (!checkpoint) continue;
    }
    match.tokens = end;
    match.checkpoint = checkpoint.value_or(-1);
    match.blocks.assign(blocks.begin(), blocks.end());
    match.hashes.assign(hashes.begin(), hashes.end());
  }
  return match;
}

bool CacheManager::CanAdmit(const PrefixMatch& match, int64_t end) const {
  if (slots_.num_free() == 0) return false;
  int64_t reclaimed = 0;  // matched blocks that sit in the free queue stop being free once acquired
  for (int32_t block : match.blocks) reclaimed += blocks_.ref_count(block) == 0 ? 1 : 0;
  const int64_t needed = std::max<int64_t>(BlocksFor(end) - static_cast<int64_t>(match.blocks.size()), 0);
  return needed <= blocks_.num_free() - reclaimed;
}

bool CacheManager::Admit(SequenceId id, std::span<const int32_t> tokens, const PrefixMatch& match, int64_t end) {
  GLINT_CHECK(!IsLive(id)) << "sequence " << id << " is already live";
  GLINT_CHECK(match.tokens == static_cast<int64_t>(match.blocks.size()) * options_.block_tokens &&
              match.hashes.size() == match.blocks.size() && end > match.tokens)
      << "inconsistent prefix match";
  if (!CanAdmit(match, end)) return false;
  auto sequence = std::make_unique<Sequence>();
  sequence->slot = *slots_.Allocate();
  for (int32_t block : match.blocks) blocks_.Acquire(block);
  sequence->blocks = match.blocks;
  sequence->hashes = match.hashes;
  sequence->committed = match.tokens;
  sequence->checkpoints_through = match.tokens;
  const int64_t needed = BlocksFor(end) - static_cast<int64_t>(match.blocks.size());
  std::optional<std::vector<int32_t>> fresh = blocks_.Allocate(needed);
  GLINT_CHECK(fresh.has_value()) << "CanAdmit said yes";
  sequence->blocks.insert(sequence->blocks.end(), fresh->begin(), fresh->end());

  std::byte* slot = slot_arena_.Item(sequence->slot);
  ZeroBytes(slot, options_.slot_bytes);
  if (match.tokens > 0 && NeedsCheckpoints()) {
    const std::optional<int32_t> checkpoint = checkpoints_.Find(match.hashes.back());
    GLINT_CHECK(checkpoint.has_value() && *checkpoint == match.checkpoint) << "the match's checkpoint is gone";
    CopyBytes(slot, checkpoint_arena_.Item(*checkpoint), options_.checkpoint_bytes);
  }
  if (options_.prefix_caching) {
    ++prefix_queries_;
    prefix_query_tokens_ += static_cast<int64_t>(tokens.size());
    if (match.tokens > 0) ++prefix_hits_;
    prefix_hit_tokens_ += match.tokens;
  }
  sequences_.emplace(id, std::move(sequence));
  return true;
}

bool CacheManager::Reserve(SequenceId id, int64_t end) {
  Sequence& sequence = Get(id);
  const int64_t needed = BlocksFor(end) - static_cast<int64_t>(sequence.blocks.size());
  if (needed <= 0) return true;
  std::optional<std::vector<int32_t>> fresh = blocks_.Allocate(needed);
  if (!fresh) return false;
  sequence.blocks.insert(sequence.blocks.end(), fresh->begin(), fresh->end());
  return true;
}

std::vector<CheckpointTarget> CacheManager::TakeCheckpoints(SequenceId id, std::span<const int32_t> tokens,
                                                            int64_t end) {
  Sequence& sequence = Get(id);
  std::vector<CheckpointTarget> targets;
  if (!options_.prefix_caching || !NeedsCheckpoints()) return targets;
  const int64_t b = options_.block_tokens, interval = options_.checkpoint_interval;
  GLINT_CHECK(end <= static_cast<int64_t>(tokens.size())) << "checkpoints past the sequence's tokens";
  // Positions whose key is known: with key_next_token the token at the position is part of it.
  const int64_t through = std::min(end, static_cast<int64_t>(tokens.size()) - KeyExtra());
  // Chain hashes of the blocks up to `through`: the committed ones are known, the others follow from the tokens.
  std::vector<BlockHash> chain = sequence.hashes;
  const int64_t first = (sequence.checkpoints_through / interval + 1) * interval;  // through ≥ committed − 1
  sequence.checkpoints_through = std::max(sequence.checkpoints_through, through);
  for (int64_t position = first; position <= through; position += interval) {
    while (static_cast<int64_t>(chain.size()) * b < position) {
      const int64_t i = static_cast<int64_t>(chain.size());
      chain.push_back(HashBlock(i == 0 ? kRootBlockHash : chain[i - 1], BlockKey(tokens, i)));
    }
    const BlockHash hash = chain[position / b - 1];
    const std::optional<int32_t> checkpoint = checkpoints_.Take(hash, /*pinned=*/true);
    if (!checkpoint) {  // an identical sequence already has it, or every checkpoint is being written
      if (options_.split_at_every_checkpoint) targets.push_back({position, -1, nullptr});
      continue;
    }
    sequence.pending_checkpoints.emplace_back(position, hash);
    ++pending_checkpoints_;
    targets.push_back({position, *checkpoint, checkpoint_arena_.Item(*checkpoint)});
  }
  return targets;
}

void CacheManager::Commit(SequenceId id, std::span<const int32_t> tokens, int64_t computed) {
  Sequence& sequence = Get(id);
  const int64_t b = options_.block_tokens;
  GLINT_CHECK(computed >= sequence.committed && computed + KeyExtra() <= static_cast<int64_t>(tokens.size()) &&
              computed <= static_cast<int64_t>(sequence.blocks.size()) * b)
      << "commit of " << computed << " positions for a sequence at " << sequence.committed << " with " << tokens.size()
      << " tokens";
  const int64_t previous = sequence.committed;
  sequence.committed = computed;
  sequence.checkpoints_through = std::max(sequence.checkpoints_through, computed);
  if (!options_.prefix_caching) return;
  // Newly full blocks join the cache.
  for (int64_t i = static_cast<int64_t>(sequence.hashes.size()); (i + 1) * b <= computed; ++i) {
    const BlockHash parent = i == 0 ? kRootBlockHash : sequence.hashes[i - 1];
    const std::span<const int32_t> key = BlockKey(tokens, i);
    const BlockHash hash = HashBlock(parent, key);
    blocks_.Register(sequence.blocks[i], hash, parent, key);  // false: an identical block is cached
    sequence.hashes.push_back(hash);
  }
  if (!NeedsCheckpoints()) return;
  // The checkpoints written up to `computed` are final; every checkpoint position passed must have had one (or
  // been cached already).
  std::vector<std::pair<int64_t, BlockHash>> still_pending;
  for (const auto& [position, hash] : sequence.pending_checkpoints) {
    if (position <= computed) {
      checkpoints_.Unpin(hash);
      ++checkpoints_taken_;
      --pending_checkpoints_;
    } else {
      still_pending.emplace_back(position, hash);
    }
  }
  sequence.pending_checkpoints.swap(still_pending);
  const int64_t interval = options_.checkpoint_interval;
  for (int64_t position = (previous / interval + 1) * interval; position <= computed; position += interval) {
    if (!checkpoints_.Peek(sequence.hashes[position / b - 1])) ++checkpoints_missed_;
  }
  if (options_.checkpoint_policy == CheckpointPolicy::kTail) ThinCheckpoints(sequence, previous, computed);
}

void CacheManager::ThinCheckpoints(const Sequence& sequence, int64_t previous, int64_t computed) {
  const int64_t interval = options_.checkpoint_interval, dense = options_.dense_checkpoints;
  const int64_t before = previous / interval, newest = computed / interval;
  if (newest == before) return;
  // The `dense` newest are always kept; the verdict is monotone, so only those kept at `before` can change.
  for (int64_t index = 1; index <= newest - dense; ++index) {
    if (index <= before && !TailPolicyKeeps(index, before, dense)) continue;  // demoted already
    if (!TailPolicyKeeps(index, newest, dense)) {
      checkpoints_.Demote(sequence.hashes[index * interval / options_.block_tokens - 1]);
    }
  }
}

bool CacheManager::Fork(SequenceId parent_id, SequenceId child_id) {
  GLINT_CHECK(!IsLive(child_id)) << "sequence " << child_id << " is already live";
  const Sequence& parent = Get(parent_id);
  const int64_t b = options_.block_tokens;
  // Shared: the full blocks, except (key_next_token) the one holding the last position, whose last rows the child
  // writes itself.
  const int64_t full = options_.key_next_token ? std::max<int64_t>(parent.committed - 1, 0) / b : parent.committed / b;
  const bool partial = static_cast<int64_t>(parent.blocks.size()) > full &&
                       (parent.committed % b != 0 || (options_.key_next_token && parent.committed > 0));
  if (slots_.num_free() == 0 || blocks_.num_free() < (partial ? 1 : 0)) return false;
  auto child = std::make_unique<Sequence>();
  child->slot = *slots_.Allocate();
  child->committed = parent.committed;
  child->hashes.assign(parent.hashes.begin(),
                       parent.hashes.begin() + std::min<int64_t>(full, static_cast<int64_t>(parent.hashes.size())));
  // Its own checkpoint at the last position is keyed by its own next token: looked at again.
  child->checkpoints_through = options_.key_next_token ? parent.committed - 1 : parent.committed;
  for (int64_t i = 0; i < full; ++i) {
    blocks_.Acquire(parent.blocks[i]);
    child->blocks.push_back(parent.blocks[i]);
  }
  if (partial) {
    const int32_t copy = blocks_.Allocate(1)->front();
    CopyBytes(block_arena_.Item(copy), block_arena_.Item(parent.blocks[full]), options_.block_bytes);
    child->blocks.push_back(copy);
  }
  CopyBytes(slot_arena_.Item(child->slot), slot_arena_.Item(parent.slot), options_.slot_bytes);
  sequences_.emplace(child_id, std::move(child));
  return true;
}

void CacheManager::Free(SequenceId id) {
  auto found = sequences_.find(id);
  GLINT_CHECK(found != sequences_.end()) << "freeing sequence " << id << " that is not live";
  const Sequence& sequence = *found->second;
  // Checkpoints taken for a step that never completed hold nothing valid.
  for (const auto& [position, hash] : sequence.pending_checkpoints) {
    checkpoints_.Drop(hash);
    --pending_checkpoints_;
  }
  for (auto block = sequence.blocks.rbegin(); block != sequence.blocks.rend(); ++block) blocks_.Release(*block);
  slots_.Free(sequence.slot);
  sequences_.erase(found);
}

void AddCacheStats(CacheStats& total, const CacheStats& part) {
  for (auto field : {&CacheStats::blocks_total, &CacheStats::blocks_used, &CacheStats::blocks_cached,
                     &CacheStats::slots_total, &CacheStats::slots_used, &CacheStats::checkpoints_total,
                     &CacheStats::checkpoints_used, &CacheStats::checkpoints_demoted, &CacheStats::prefix_queries,
                     &CacheStats::prefix_hits, &CacheStats::prefix_query_tokens, &CacheStats::prefix_hit_tokens,
                     &CacheStats::block_evictions, &CacheStats::checkpoint_evictions, &CacheStats::checkpoints_taken,
                     &CacheStats::checkpoints_missed, &CacheStats::disk_hit_tokens}) {
    total.*field += part.*field;
  }
}

void CacheManager::CopyBytes(std::byte* destination, const std::byte* source, int64_t bytes) {
  if (options_.backed) std::memcpy(destination, source, static_cast<size_t>(bytes));
  if (mirror_ != nullptr) mirror_->OnCopy(destination, source, bytes);
}

void CacheManager::ZeroBytes(std::byte* destination, int64_t bytes) {
  if (options_.backed) std::memset(destination, 0, static_cast<size_t>(bytes));
  if (mirror_ != nullptr) mirror_->OnZero(destination, bytes);
}

CacheStats CacheManager::Stats() const {
  CacheStats s;
  s.blocks_total = blocks_.num_blocks();
  s.blocks_used = blocks_.num_used();
  s.blocks_cached = blocks_.num_cached();
  s.slots_total = slots_.num_slots();
  s.slots_used = slots_.num_used();
  s.checkpoints_total = checkpoints_.num_checkpoints();
  s.checkpoints_used = checkpoints_.num_used();
  s.checkpoint_bytes = options_.checkpoint_bytes;
  s.block_bytes = options_.block_bytes;
  s.slot_bytes = options_.slot_bytes;
  s.checkpoints_demoted = checkpoints_.num_demoted();
  s.prefix_queries = prefix_queries_;
  s.prefix_hits = prefix_hits_;
  s.prefix_query_tokens = prefix_query_tokens_;
  s.prefix_hit_tokens = prefix_hit_tokens_;
  s.block_evictions = blocks_.num_evictions();
  s.checkpoint_evictions = checkpoints_.num_evictions();
  s.checkpoints_taken = checkpoints_taken_;
  s.checkpoints_missed = checkpoints_missed_;
  s.disk_tier = disk_ != nullptr;
  if (disk_ != nullptr) s.disk = disk_->Stats();
  s.disk_hit_tokens = disk_hit_tokens_;
  return s;
}

Status CacheManager::CheckIntegrity() const {
  std::vector<int32_t> holders(blocks_.num_blocks(), 0);
  std::vector<bool> slot_seen(slots_.num_slots(), false);
  for (const auto& [id, sequence] : sequences_) {
    if (sequence->slot < 0 || sequence->slot >= slots_.num_slots() || slot_seen[sequence->slot] ||
        slots_.is_free(sequence->slot)) {
      return InternalError("cache manager: sequence ", id, " has slot ", sequence->slot,
                           " which is free, shared or out of range");
    }
    slot_seen[sequence->slot] = true;
    if (sequence->committed > static_cast<int64_t>(sequence->blocks.size()) * options_.block_tokens) {
      return InternalError("cache manager: sequence ", id, " committed ", sequence->committed, " positions in ",
                           sequence->blocks.size(), " blocks");
    }
    if (options_.prefix_caching &&
        static_cast<int64_t>(sequence->hashes.size()) != sequence->committed / options_.block_tokens) {
      return InternalError("cache manager: sequence ", id, " has ", sequence->hashes.size(), " block hashes for ",
                           sequence->committed, " committed positions");
    }
    std::vector<int32_t> sorted = sequence->blocks;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return InternalError("cache manager: sequence ", id, " holds a block twice");
    }
    for (int32_t block : sequence->blocks) {
      if (block < 0 || block >= blocks_.num_blocks()) return InternalError("cache manager: bad block id ", block);
      ++holders[block];
    }
  }
  int64_t pending = 0;
  for (const auto& [id, sequence] : sequences_) pending += static_cast<int64_t>(sequence->pending_checkpoints.size());
  if (pending != pending_checkpoints_) {
    return InternalError("cache manager: ", pending, " pending checkpoints listed, ", pending_checkpoints_, " counted");
  }
  if (slots_.num_used() != num_live()) {
    return InternalError("cache manager: ", slots_.num_used(), " slots in use for ", num_live(), " live sequences");
  }
  GLINT_RETURN_IF_ERROR(blocks_.CheckIntegrity(holders));
  return checkpoints_.CheckIntegrity();
}

}  // namespace glint
