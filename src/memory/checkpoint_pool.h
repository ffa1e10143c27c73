// The checkpoint pool of the prefix cache: copies of a sequence's recurrent state (for the hybrid model, every KDA
// layer's S and conv window) taken when the sequence reaches a checkpoint position, keyed by the chained hash of
// the block that ends there. A later sequence with the same prefix copies the checkpoint into its own slot and
// recomputes only what follows; checkpoints themselves are never written after they are taken.
//
// Least-recently-used eviction: Take on a full pool reuses the checkpoint touched longest ago that is not pinned;
// Find touches. A checkpoint is pinned from Take (pinned) until Unpin: it is being written and must not be reused.
// Demote marks a checkpoint the spacing policy no longer keeps (memory/checkpoint_policy.h): it moves to the front
// of the LRU order, so it is the next to be evicted, until a Find uses it again. Storage is an ItemArena beside it.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "memory/block_pool.h"

namespace glint {

class CheckpointPool {
 public:
  explicit CheckpointPool(int64_t num_checkpoints);

  int64_t num_checkpoints() const { return num_checkpoints_; }
  int64_t num_used() const { return static_cast<int64_t>(index_.size()); }
  int64_t num_evictions() const { return evictions_; }

  // The checkpoint id to write the state of the chain `hash` into: a free one, else the least recently used one
  // that is not pinned (evicted). nullopt when `hash` already has one (nothing to take) or every checkpoint is
  // pinned (or there are none).
  std::optional<int32_t> Take(BlockHash hash, bool pinned = false);
  void Unpin(BlockHash hash);
  // Makes the checkpoint of `hash` (if any) the next one to be evicted: the spacing policy dropped it.
  void Demote(BlockHash hash);
  bool IsDemoted(BlockHash hash) const {
    auto found = index_.find(hash);
    return found != index_.end() && found->second.demoted;
  }
  int64_t num_demoted() const { return demoted_; }
  // Called by Take with the checkpoint it is about to reuse (its contents still intact) before reusing it.
  using EvictionListener = std::function<void(int32_t id, BlockHash hash, bool demoted)>;
  void set_eviction_listener(EvictionListener listener) { on_evict_ = std::move(listener); }
  // The checkpoint of `hash`, made most recently used.
  std::optional<int32_t> Find(BlockHash hash);
  // The checkpoint of `hash` without touching it.
  std::optional<int32_t> Peek(BlockHash hash) const {
    auto found = index_.find(hash);
    return found == index_.end() ? std::nullopt : std::optional<int32_t>(found->second.id);
  }
  // Drops the checkpoint of `hash` if there is one (its blocks were evicted, so it can no longer be used).
  void Drop(BlockHash hash);
  // Ids from least to most recently used, for tests.
  std::vector<int32_t> LruOrder() const;

  Status CheckIntegrity() const;

 private:
  struct Entry {
    int32_t id;
    std::list<BlockHash>::iterator lru_position;
    bool pinned = false;
    bool demoted = false;
  };
  int64_t num_checkpoints_;
  std::vector<int32_t> free_;  // ids never used or dropped, handed out lowest first
  std::list<BlockHash> lru_;   // front = least recently used
  std::unordered_map<BlockHash, Entry> index_;
  int64_t evictions_ = 0;
  int64_t demoted_ = 0;  // entries with demoted set
  EvictionListener on_evict_;
};

}  // namespace glint
