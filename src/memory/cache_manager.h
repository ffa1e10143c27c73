// The memory of every live sequence: which blocks hold its per-token caches (its block table), which slot holds
// its recurrent state, and the prefix cache that lets a new sequence start from another one's work.
//
// Prefix caching for a model with recurrent state (docs/engine.md "Prefix caching"):
//   - a full block is identified by the chained hash of its tokens; cached blocks are shared by reference count;
//   - at every multiple of `checkpoint_interval` a sequence computes, the recurrent state (what the first
//     `checkpoint_bytes` of its slot hold at that position) is written into a checkpoint keyed by the hash of the
//     block that ends there. TakeCheckpoints hands out the destinations before a step (the model writes them as it
//     passes those positions, so a chunk need not stop there); Commit makes them findable;
//   - a new sequence reuses the longest run of cached blocks that ends at a checkpoint, copies the checkpoint into
//     its own fresh slot, and recomputes the rest. At least one token is always left to compute, so the sequence
//     gets logits for its last token.
// The slot bytes after `checkpoint_bytes` must describe nothing at a block boundary (for the hybrid model: the
// indexer's filling pool is empty there because block_tokens is a multiple of index_kpool); a restored slot has
// them zeroed. A model without recurrent state (checkpoint_bytes = 0) resumes at any cached block boundary.
//
// With `key_next_token` (speculative decoding: the MTP layer's cache row at a position holds the pair (h_p,
// x_{p+1}), so a block's last row depends on the token after the block) a block's key is its tokens plus the next
// one: a block joins the cache only once that token is known (Commit must be called with it in `tokens`), a
// checkpoint's key likewise, and a fork copies the block holding the parent's last position instead of sharing it
// (the child writes its own row there).
//
// Knows sizes only, never the model. Single-threaded: the engine thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "memory/block_pool.h"
#include "memory/checkpoint_policy.h"
#include "memory/checkpoint_pool.h"
#include "memory/disk_tier.h"
#include "memory/item_arena.h"
#include "memory/memory_mirror.h"
#include "memory/slot_pool.h"

namespace glint {

using SequenceId = int64_t;

struct CacheManagerOptions {
  int64_t block_tokens = 64;  // positions per block
  int64_t block_bytes = 0;    // one block: every layer's per-token caches for block_tokens positions
  int64_t num_blocks = 0;
  int64_t slot_bytes = 0;        // one sequence's state
  int64_t num_slots = 0;         // the maximum number of live sequences
  int64_t checkpoint_bytes = 0;  // the leading bytes of a slot that a checkpoint keeps (0: no recurrent state)
  int64_t num_checkpoints = 0;
  bool prefix_caching = false;
  int64_t checkpoint_interval = 0;  // tokens; a positive multiple of block_tokens when prefix caching is on
  bool key_next_token = false;      // a block's contents depend on the token after it (see the file comment)
  CheckpointPolicy checkpoint_policy = CheckpointPolicy::kTail;  // which checkpoints are evicted first
  // TakeCheckpoints also returns the checkpoint positions it takes no checkpoint for (one is cached already, or
  // every checkpoint is pinned), with data null: the model splits its recurrence there all the same, so that
  // its arithmetic never depends on what the cache holds.
  bool split_at_every_checkpoint = false;
  int64_t dense_checkpoints = kDefaultDenseCheckpoints;  // the tail policy's full-density checkpoints
  // false (--dp-attention, docs/distributed.md "Attention data-parallel"): another rank holds these pools' memory.
  // This manager only books them (ids, reference counts, the prefix cache) over address space with no memory
  // behind it (ItemArena::Reserved): its copies and clears are only told to the mirror, which has the owning rank
  // make them. No disk tier then.
  bool backed = true;
};

// What a new sequence can reuse: `tokens` positions covered by `blocks`, with the state at that position in
// `checkpoint` (−1 when the model has no recurrent state or nothing matched).
struct PrefixMatch {
  int64_t tokens = 0;
  std::vector<int32_t> blocks;    // [tokens / block_tokens]
  std::vector<BlockHash> hashes;  // [tokens / block_tokens] chained hash of each block
  int32_t checkpoint = -1;
};

// Where the state at `position` is to be written during the next step (checkpoint_bytes, laid out as a slot).
// data null (split_at_every_checkpoint): nothing to write, the position only splits the recurrence.
struct CheckpointTarget {
  int64_t position = 0;
  int32_t checkpoint = -1;
  std::byte* data = nullptr;
};

struct CacheStats {
  int64_t blocks_total = 0, blocks_used = 0, blocks_cached = 0;  // used: held by a sequence; cached: findable
  int64_t slots_total = 0, slots_used = 0;
  int64_t checkpoints_total = 0, checkpoints_used = 0;
  int64_t checkpoint_bytes = 0;             // one checkpoint
  int64_t block_bytes = 0, slot_bytes = 0;  // one block, one slot
  int64_t checkpoints_demoted = 0;          // held but dropped by the spacing policy (evicted first)
  int64_t prefix_queries = 0;               // admissions that looked up the prefix cache
  int64_t prefix_hits = 0;                  // ... that reused at least one block
  int64_t prefix_query_tokens = 0;          // tokens of the sequences looked up
  int64_t prefix_hit_tokens = 0;            // tokens not recomputed thanks to a hit
  int64_t block_evictions = 0, checkpoint_evictions = 0, checkpoints_taken = 0;
  int64_t checkpoints_missed = 0;  // checkpoint positions passed with no checkpoint (all pinned, or a bug)
  bool disk_tier = false;          // a disk tier is attached (the disk_ counters are meaningful)
  DiskTierStats disk;
  int64_t disk_hit_tokens = 0;  // prefix positions made reachable by reading blocks or checkpoints back
};

// Adds the pool sizes, usage and counters of another partition's `part` to `total` (--dp-attention: one partition
// per rank); the item sizes are the same in every partition, and only the first has a disk tier.
void AddCacheStats(CacheStats& total, const CacheStats& part);

// Bytes held by live sequences: their slots and the blocks they hold.
inline int64_t LiveCacheBytes(const CacheStats& s) {
  return s.slots_used * s.slot_bytes + s.blocks_used * s.block_bytes;
}

class CacheManager {
 public:
  // Checks the options and allocates every pool up front.
  static Result<std::unique_ptr<CacheManager>> Create(const CacheManagerOptions& options);

  CacheManager(const CacheManager&) = delete;  // the block pool's eviction listener points back here
  CacheManager& operator=(const CacheManager&) = delete;

  const CacheManagerOptions& options() const { return options_; }
  bool prefix_caching() const { return options_.prefix_caching; }
  int64_t BlocksFor(int64_t tokens) const { return (tokens + options_.block_tokens - 1) / options_.block_tokens; }

  // Attaches the disk tier (memory/disk_tier.h): from now on cached blocks and checkpoints evicted from memory are
  // written there, and LoadPrefixFromDisk reads them back. Its fingerprint must cover this cache's layout.
  void AttachDiskTier(std::unique_ptr<DiskTier> disk) {
    GLINT_CHECK(options_.backed) << "a disk tier needs the pools' memory in this process";
    disk_ = std::move(disk);
  }
  const DiskTier* disk_tier() const { return disk_.get(); }
  DiskTier* mutable_disk_tier() { return disk_.get(); }
  // Before FindPrefix: when the longest reusable prefix of `tokens` over memory and disk together needs items
  // from the disk, reads them into free blocks and the checkpoint pool (as cached, unheld entries, most recently
  // used), so that FindPrefix finds them. A file that fails its checks ends the prefix there (a miss). Does
  // nothing without a disk tier, or when the pool has too few free blocks to take the disk's part.
  void LoadPrefixFromDisk(std::span<const int32_t> tokens);
  // The longest reusable prefix of `tokens` (see the file comment). No side effects.
  PrefixMatch FindPrefix(std::span<const int32_t> tokens) const;
  // Whether Admit(match, end) would succeed now.
  bool CanAdmit(const PrefixMatch& match, int64_t end) const;
  // Makes `id` live: a slot (zeroed, then the match's checkpoint copied in), the match's blocks (shared), and new
  // blocks covering positions < `end`. Returns false, changing nothing, when the pools cannot provide them.
  bool Admit(SequenceId id, std::span<const int32_t> tokens, const PrefixMatch& match, int64_t end);
  // More blocks so that positions < `end` are covered. False, changing nothing, when the pool is short.
  bool Reserve(SequenceId id, int64_t end);
  // The checkpoints to write while the sequence computes positions up to `end` of `tokens`: one per checkpoint
  // position not looked at by an earlier call, up to `end` and whose key `tokens` already holds (with
  // key_next_token: positions < tokens.size()), whose chain has none yet, taken from the pool now (the least
  // recently used one is evicted when it is full). They become findable at Commit; if the sequence is freed first
  // they are dropped. A position whose key is not known yet is looked at by a later call (the engine takes such a
  // checkpoint after its step, from the slot).
  std::vector<CheckpointTarget> TakeCheckpoints(SequenceId id, std::span<const int32_t> tokens, int64_t end);
  // Positions < `computed` of `tokens` are now in the sequence's blocks and slot, and the targets up to there are
  // written: newly full blocks and those checkpoints join the prefix cache. With key_next_token, `tokens` must
  // hold the token at `computed` too.
  void Commit(SequenceId id, std::span<const int32_t> tokens, int64_t computed);
  // Makes `child` a copy of the live sequence `parent`: it shares the parent's full blocks, gets its own copy of
  // the partly filled last block (with key_next_token: of the block holding the last position, full or not) and of
  // the slot. False, changing nothing, when there is no slot or block for it.
  bool Fork(SequenceId parent, SequenceId child);
  // Releases the sequence's blocks (last block first, so its tail is evicted before its head) and its slot.
  void Free(SequenceId id);

  // Tokens past a position that its key holds: 1 with key_next_token, else 0.
  int64_t KeyExtra() const { return options_.key_next_token ? 1 : 0; }
  bool IsLive(SequenceId id) const { return sequences_.count(id) != 0; }
  int64_t num_live() const { return static_cast<int64_t>(sequences_.size()); }
  // Block ids of the sequence, position p in blocks[p / block_tokens]. The reference stays valid while it lives.
  const std::vector<int32_t>& BlockTable(SequenceId id) const;
  int64_t Committed(SequenceId id) const;
  int32_t SlotOf(SequenceId id) const;
  std::byte* Slot(SequenceId id) const;
  // Told about the copies and clears Admit and Fork make (null: nobody); not owned, must outlive this.
  void set_mirror(MemoryMirror* mirror) { mirror_ = mirror; }
  ItemArena& block_arena() { return block_arena_; }
  const ItemArena& block_arena() const { return block_arena_; }
  const BlockPool& block_pool() const { return blocks_; }
  const SlotPool& slot_pool() const { return slots_; }
  const CheckpointPool& checkpoint_pool() const { return checkpoints_; }
  const ItemArena& slot_arena() const { return slot_arena_; }
  const ItemArena& checkpoint_arena() const { return checkpoint_arena_; }
  std::byte* CheckpointData(int32_t id) const { return checkpoint_arena_.Item(id); }

  CacheStats Stats() const;
  // Reference counts equal the number of tables holding each block, every live sequence has a distinct slot and
  // blocks for its committed positions, and each pool is consistent. Tests call it after every step.
  Status CheckIntegrity() const;

 private:
  struct Sequence {
    std::vector<int32_t> blocks;  // block table
    int32_t slot = -1;
    int64_t committed = 0;          // positions whose caches are written
    std::vector<BlockHash> hashes;  // chained hash of each full block below `committed` (prefix caching only)
    std::vector<std::pair<int64_t, BlockHash>> pending_checkpoints;  // taken, not yet written: (position, hash)
    int64_t checkpoints_through = 0;  // checkpoint positions ≤ this were looked at by TakeCheckpoints
  };
  explicit CacheManager(const CacheManagerOptions& options);
  Sequence& Get(SequenceId id);
  const Sequence& Get(SequenceId id) const;
  bool NeedsCheckpoints() const { return options_.checkpoint_bytes > 0; }
  // The key of block i of `tokens` (which must hold it): its tokens, and the next one with key_next_token.
  std::span<const int32_t> BlockKey(std::span<const int32_t> tokens, int64_t i) const;
  // The tail policy: demotes the sequence's checkpoints that its advance from `previous` to `computed` positions
  // takes out of the kept set (memory/checkpoint_policy.h).
  void ThinCheckpoints(const Sequence& sequence, int64_t previous, int64_t computed);
  // Disk tier: what eviction of a cached block / a checkpoint does with it.
  void OnBlockEvicted(int32_t id, BlockHash hash, BlockHash parent, std::span<const int32_t> key);
  void OnCheckpointEvicted(int32_t id, BlockHash hash, bool demoted);
  struct ChainLink {  // one block of a prefix walked over memory and disk
    BlockHash hash, parent;
    int64_t index;  // block index in the sequence
    int32_t block;  // in memory; −1: on disk
  };
  // The chain LoadPrefixFromDisk would load: blocks up to the deepest resumable point, and whether that point's
  // checkpoint is on disk.
  std::vector<ChainLink> DiskChain(std::span<const int32_t> tokens, bool& checkpoint_on_disk) const;
  bool LoadCheckpoint(BlockHash hash);
  // Every byte the manager copies or clears in its pools goes through these: done here when this process holds the
  // memory (options_.backed), and told to the mirror either way.
  void CopyBytes(std::byte* destination, const std::byte* source, int64_t bytes);
  void ZeroBytes(std::byte* destination, int64_t bytes);

  CacheManagerOptions options_;
  BlockPool blocks_;
  SlotPool slots_;
  CheckpointPool checkpoints_;
  ItemArena block_arena_, slot_arena_, checkpoint_arena_;
  std::map<SequenceId, std::unique_ptr<Sequence>> sequences_;  // unique_ptr: block tables do not move
  int64_t prefix_queries_ = 0, prefix_hits_ = 0, prefix_query_tokens_ = 0, prefix_hit_tokens_ = 0;
  int64_t checkpoints_taken_ = 0, checkpoints_missed_ = 0;
  int64_t pending_checkpoints_ = 0;  // taken by live sequences, not yet committed
  MemoryMirror* mirror_ = nullptr;
  std::unique_ptr<DiskTier> disk_;
  int64_t disk_hit_tokens_ = 0;
};

}  // namespace glint
