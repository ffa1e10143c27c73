#include "memory/checkpoint_pool.h"

#include <algorithm>
#include <functional>

namespace glint {

CheckpointPool::CheckpointPool(int64_t num_checkpoints) : num_checkpoints_(num_checkpoints) {
  GLINT_CHECK(num_checkpoints >= 0 && num_checkpoints < (int64_t{1} << 31));
  for (int64_t id = num_checkpoints - 1; id >= 0; --id) free_.push_back(static_cast<int32_t>(id));  // pop_back = lowest
}

std::optional<int32_t> CheckpointPool::Take(BlockHash hash, bool pinned) {
  if (num_checkpoints_ == 0 || index_.count(hash) != 0) return std::nullopt;
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    auto victim = std::find_if(lru_.begin(), lru_.end(), [&](BlockHash h) { return !index_.at(h).pinned; });
    if (victim == lru_.end()) return std::nullopt;  // every checkpoint is being written
    const Entry& evicted = index_.at(*victim);
    id = evicted.id;
    if (on_evict_) on_evict_(id, *victim, evicted.demoted);
    if (evicted.demoted) --demoted_;
    index_.erase(*victim);
    lru_.erase(victim);
    ++evictions_;
  }
  lru_.push_back(hash);
  index_.emplace(hash, Entry{id, std::prev(lru_.end()), pinned});
  return id;
}

void CheckpointPool::Unpin(BlockHash hash) {
  auto found = index_.find(hash);
  if (found != index_.end()) found->second.pinned = false;
}

void CheckpointPool::Demote(BlockHash hash) {
  auto found = index_.find(hash);
  if (found == index_.end() || found->second.demoted) return;
  found->second.demoted = true;
  ++demoted_;
  lru_.splice(lru_.begin(), lru_, found->second.lru_position);
}

std::optional<int32_t> CheckpointPool::Find(BlockHash hash) {
  auto found = index_.find(hash);
  if (found == index_.end()) return std::nullopt;
  if (found->second.demoted) {  // used again: the policy's verdict is overruled by a hit
    found->second.demoted = false;
    --demoted_;
  }
  lru_.splice(lru_.end(), lru_, found->second.lru_position);  // iterators stay valid across splice
  return found->second.id;
}

void CheckpointPool::Drop(BlockHash hash) {
  auto found = index_.find(hash);
  if (found == index_.end()) return;
  lru_.erase(found->second.lru_position);
  if (found->second.demoted) --demoted_;
  free_.push_back(found->second.id);
  std::sort(free_.begin(), free_.end(), std::greater<int32_t>());
  index_.erase(found);
}

std::vector<int32_t> CheckpointPool::LruOrder() const {
  std::vector<int32_t> order;
  for (BlockHash hash : lru_) order.push_back(index_.at(hash).id);
  return order;
}

Status CheckpointPool::CheckIntegrity() const {
  if (lru_.size() != index_.size()) {
    return InternalError("checkpoint pool: LRU list has ", lru_.size(), " entries, index ", index_.size());
  }
  if (static_cast<int64_t>(index_.size() + free_.size()) != num_checkpoints_) {
    return InternalError("checkpoint pool: ", index_.size(), " used + ", free_.size(), " free != ", num_checkpoints_);
  }
  std::vector<bool> seen(num_checkpoints_, false);
  int64_t demoted = 0;
  for (BlockHash hash : lru_) {
    auto found = index_.find(hash);
    if (found == index_.end()) return InternalError("checkpoint pool: LRU entry missing from the index");
    if (*found->second.lru_position != hash) return InternalError("checkpoint pool: stale LRU position");
    demoted += found->second.demoted ? 1 : 0;
    const int32_t id = found->second.id;
    if (id < 0 || id >= num_checkpoints_ || seen[id]) return InternalError("checkpoint pool: id ", id, " reused");
    seen[id] = true;
  }
  if (demoted != demoted_)
    return InternalError("checkpoint pool: ", demoted, " demoted entries, ", demoted_, " counted");
  for (int32_t id : free_) {
    if (id < 0 || id >= num_checkpoints_ || seen[id]) return InternalError("checkpoint pool: free id ", id, " in use");
    seen[id] = true;
  }
  return Status::Ok();
}

}  // namespace glint
