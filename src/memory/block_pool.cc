#include "memory/block_pool.h"

#include <xxhash.h>

#include <algorithm>

namespace glint {

BlockHash HashBlock(BlockHash parent, std::span<const int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent);
}

BlockPool::BlockPool(int64_t num_blocks, int64_t block_tokens, int64_t key_tokens)
    : block_tokens_(block_tokens),
      key_tokens_(key_tokens > 0 ? key_tokens : block_tokens),
      ref_count_(num_blocks, 0),
      cached_(num_blocks, false),
      hash_(num_blocks, 0),
      prev_(num_blocks, -1),
      next_(num_blocks, -1),
      in_queue_(num_blocks, false) {
  GLINT_CHECK(num_blocks >= 0 && num_blocks < (int64_t{1} << 31) && block_tokens > 0 && key_tokens_ >= block_tokens);
  for (int32_t id = 0; id < num_blocks; ++id) PushTail(id);  // ids in order: allocation is deterministic
}

void BlockPool::PushHead(int32_t id) {
  prev_[id] = -1;
  next_[id] = head_;
  if (head_ >= 0) prev_[head_] = id;
  head_ = id;
  if (tail_ < 0) tail_ = id;
  in_queue_[id] = true;
  ++free_count_;
}

void BlockPool::PushTail(int32_t id) {
  next_[id] = -1;
  prev_[id] = tail_;
  if (tail_ >= 0) next_[tail_] = id;
  tail_ = id;
  if (head_ < 0) head_ = id;
  in_queue_[id] = true;
  ++free_count_;
}

void BlockPool::Unlink(int32_t id) {
  GLINT_CHECK(in_queue_[id]) << "block " << id << " is not in the free queue";
  if (prev_[id] >= 0)
    next_[prev_[id]] = next_[id];
  else
    head_ = next_[id];
  if (next_[id] >= 0)
    prev_[next_[id]] = prev_[id];
  else
    tail_ = prev_[id];
  prev_[id] = next_[id] = -1;
  in_queue_[id] = false;
  --free_count_;
}

void BlockPool::Uncache(int32_t id) {
  if (!cached_[id]) return;
  auto entry = index_.find(hash_[id]);
  if (on_evict_) on_evict_(id, hash_[id], entry->second.parent, entry->second.tokens);
  index_.erase(entry);
  cached_[id] = false;
  ++evictions_;
}

std::optional<std::vector<int32_t>> BlockPool::Allocate(int64_t count) {
  if (count < 0 || count > free_count_) return std::nullopt;
  std::vector<int32_t> blocks;
  blocks.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t id = head_;
    Unlink(id);
    Uncache(id);
    ref_count_[id] = 1;
    blocks.push_back(id);
  }
  return blocks;
}

void BlockPool::Acquire(int32_t id) {
  GLINT_CHECK(id >= 0 && id < num_blocks()) << "block " << id;
  if (ref_count_[id] == 0) {
    GLINT_CHECK(cached_[id]) << "acquiring free block " << id << " that holds nothing";
    Unlink(id);
  }
  ++ref_count_[id];
}

void BlockPool::Release(int32_t id) {
  GLINT_CHECK(id >= 0 && id < num_blocks() && ref_count_[id] > 0) << "releasing block " << id << " with no holder";
  if (--ref_count_[id] > 0) return;
  if (cached_[id]) {
    PushTail(id);
  } else {
    PushHead(id);
  }
}

bool BlockPool::Register(int32_t id, BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) {
  GLINT_CHECK(id >= 0 && id < num_blocks() && ref_count_[id] > 0) << "registering block " << id << " with no holder";
  GLINT_CHECK(static_cast<int64_t>(tokens.size()) == key_tokens_)
      << "a cached block must be full (" << key_tokens_ << " key tokens, got " << tokens.size() << ")";
  if (cached_[id] || index_.count(hash) != 0) return false;
  index_.emplace(hash, CacheEntry{id, parent, std::vector<int32_t>(tokens.begin(), tokens.end())});
  cached_[id] = true;
  hash_[id] = hash;
  return true;
}

std::optional<int32_t> BlockPool::Lookup(BlockHash hash, BlockHash parent, std::span<const int32_t> tokens) const {
  auto found = index_.find(hash);
  if (found == index_.end()) return std::nullopt;
  const CacheEntry& entry = found->second;
  if (entry.parent != parent || !std::equal(tokens.begin(), tokens.end(), entry.tokens.begin(), entry.tokens.end())) {
    return std::nullopt;  // a hash collision: different contents under the same 64-bit hash
  }
  return entry.block;
}

std::vector<int32_t> BlockPool::FreeQueue() const {
  std::vector<int32_t> order;
  for (int32_t id = head_; id >= 0; id = next_[id]) order.push_back(id);
  return order;
}

Status BlockPool::CheckIntegrity(std::span<const int32_t> expected_refs) const {
  const int64_t n = num_blocks();
  int64_t queued = 0;
  int32_t previous = -1;
  for (int32_t id = head_; id >= 0; id = next_[id]) {
    if (id >= n || !in_queue_[id] || prev_[id] != previous) {
      return InternalError("block pool: free queue is broken at block ", id);
    }
    if (ref_count_[id] != 0)
      return InternalError("block pool: block ", id, " is queued as free with ", ref_count_[id], " holders");
    previous = id;
    if (++queued > n) return InternalError("block pool: free queue has a cycle");
  }
  if (previous != tail_)
    return InternalError("block pool: free queue tail is ", tail_, ", the walk ended at ", previous);
  if (queued != free_count_)
    return InternalError("block pool: ", queued, " queued blocks but free count ", free_count_);
  int64_t cached = 0;
  for (int32_t id = 0; id < n; ++id) {
    if (ref_count_[id] < 0) return InternalError("block pool: block ", id, " has ", ref_count_[id], " holders");
    if ((ref_count_[id] == 0) != in_queue_[id]) {
      return InternalError("block pool: block ", id, " has ", ref_count_[id], " holders but in_queue=", in_queue_[id]);
    }
    if (!expected_refs.empty() && expected_refs[id] != ref_count_[id]) {
      return InternalError("block pool: block ", id, " has ", ref_count_[id], " holders; the sequences hold it ",
                           expected_refs[id], " times");
    }
    if (cached_[id]) {
      ++cached;
      auto found = index_.find(hash_[id]);
      if (found == index_.end() || found->second.block != id) {
        return InternalError("block pool: cached block ", id, " is missing from the index");
      }
    }
  }
  if (cached != num_cached()) return InternalError("block pool: ", cached, " cached blocks, index has ", num_cached());
  return Status::Ok();
}

}  // namespace glint
