// The block pool: ids, reference counts and the prefix-cache index of the per-token cache blocks (storage is an
// ItemArena beside it). A block holds `block_tokens` consecutive positions of one sequence.
//
// Blocks with no holder sit in one free queue, which is also the eviction order (vLLM v1's scheme):
//   - Allocate takes blocks from the head; a taken block that was cached loses its cache entry (an eviction);
//   - Release of the last holder puts a cached block at the tail (least recently used is evicted first) and an
//     uncached block at the head (it holds nothing worth keeping, so it is reused before any cached block).
// A cached block with no holder therefore stays findable until the pool runs out of uncached free blocks.
//
// Cache entries are keyed by a chained hash (BlockHash) and keep the parent hash and the tokens they were made
// from, so a lookup is verified and a 64-bit hash collision can never hand out the wrong contents.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace glint {

using BlockHash = uint64_t;

// The hash of the chain that ends at the first block (no parent).
inline constexpr BlockHash kRootBlockHash = 0x676c696e74ULL;  // "glint"

// Hash of a full block whose predecessor's hash is `parent`: XXH3-64 of the token ids, seeded with `parent`.
BlockHash HashBlock(BlockHash parent, std::span<const int32_t> tokens);

class BlockPool {
 public:
  // A cache key holds `key_tokens` token ids: the block's block_tokens, or one more when a block's contents also
  // depend on the token after it (the MTP layer's cache; CacheManagerOptions::key_next_token). 0: block_tokens.
  BlockPool(int64_t num_blocks, int64_t block_tokens, int64_t key_tokens = 0);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_count_.size()); }
  int64_t block_tokens() const { return block_tokens_; }
  int64_t key_tokens() const { return key_tokens_; }
  int64_t num_free() const { return free_count_; }  // no holder (includes cached blocks waiting to be evicted)
  int64_t num_used() const { return num_blocks() - free_count_; }
  int64_t num_cached() const { return static_cast<int64_t>(index_.size()); }
  int64_t num_evictions() const { return evictions_; }

  // `count` blocks, each with one holder, from the head of the free queue (evicting cached contents). nullopt —
  // and nothing changes — when fewer than `count` blocks are free.
  std::optional<std::vector<int32_t>> Allocate(int64_t count);
  // One more holder of `id` (a prefix-cache hit or a fork); a block that had none leaves the free queue.
  void Acquire(int32_t id);
  // One holder less; see the class comment for where a block with no holder goes.
  void Release(int32_t id);

  // Records that the full block `id` holds `tokens` (its key: key_tokens ids) after the chain `parent`, under
  // `hash` = HashBlock(parent, tokens). Returns false (and changes nothing) when another block already holds that
  // chain: the first copy stays the cached one and `id` stays uncached.
  bool Register(int32_t id, BlockHash hash, BlockHash parent, std::span<const int32_t> tokens);
  // The cached block holding `tokens` after `parent`, verified against the stored key. Does not take a reference.
  std::optional<int32_t> Lookup(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) const;

  int32_t ref_count(int32_t id) const { return ref_count_.at(id); }
  bool is_cached(int32_t id) const { return cached_.at(id); }
  std::vector<int32_t> FreeQueue() const;  // head (next to be allocated) to tail, for tests and diagnostics

  // Called for each cached block whose contents are about to be evicted (still intact): its id and cache key.
  using EvictionListener =
      std::function<void(int32_t id, BlockHash hash, BlockHash parent, std::span<const int32_t> key)>;
  void set_eviction_listener(EvictionListener listener) { on_evict_ = std::move(listener); }

  // Free-queue links, counts and the cache index agree with each other. `expected_refs[id]`, when given, is the
  // number of holders the caller knows of for each block.
  Status CheckIntegrity(std::span<const int32_t> expected_refs = {}) const;

 private:
  struct CacheEntry {
    int32_t block;
    BlockHash parent;
    std::vector<int32_t> tokens;  // [key_tokens]
  };
  void PushHead(int32_t id);
  void PushTail(int32_t id);
  void Unlink(int32_t id);
  void Uncache(int32_t id);

  int64_t block_tokens_;
  int64_t key_tokens_;
  std::vector<int32_t> ref_count_;    // [num_blocks]
  std::vector<bool> cached_;          // [num_blocks] has an entry in index_
  std::vector<BlockHash> hash_;       // [num_blocks] valid when cached_
  std::vector<int32_t> prev_, next_;  // [num_blocks] free-queue links, −1 = none
  std::vector<bool> in_queue_;        // [num_blocks]
  int32_t head_ = -1, tail_ = -1;
  int64_t free_count_ = 0;
  int64_t evictions_ = 0;
  std::unordered_map<BlockHash, CacheEntry> index_;
  EvictionListener on_evict_;
};

}  // namespace glint
