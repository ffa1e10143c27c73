// CacheManager's disk tier (memory/disk_tier.h): what eviction writes, and reading a prefix back before a lookup.
#include <algorithm>

#include "memory/cache_manager.h"

namespace glint {

void CacheManager::OnBlockEvicted(int32_t id, BlockHash hash, BlockHash parent, std::span<const int32_t> key) {
  const std::span<const std::byte> contents(block_arena_.Item(id), static_cast<size_t>(options_.block_bytes));
  // On disk the block stays reachable, and so does its checkpoint; without it the checkpoint is useless.
  if (disk_ != nullptr && disk_->Write(DiskItemKind::kBlock, hash, parent, key, contents)) return;
  checkpoints_.Drop(hash);
}

void CacheManager::OnCheckpointEvicted(int32_t id, BlockHash hash, bool demoted) {
  // A checkpoint the spacing policy dropped is not worth its write (136 MiB on the released model).
  if (disk_ == nullptr || demoted) return;
  const std::span<const std::byte> contents(checkpoint_arena_.Item(id), static_cast<size_t>(options_.checkpoint_bytes));
  disk_->Write(DiskItemKind::kCheckpoint, hash, 0, {}, contents);
}

std::vector<CacheManager::ChainLink> CacheManager::DiskChain(std::span<const int32_t> tokens,
                                                             bool& checkpoint_on_disk) const {
  const int64_t b = options_.block_tokens;
  const int64_t length = static_cast<int64_t>(tokens.size());
  std::vector<ChainLink> chain;
  size_t best = 0;  // links of the deepest resumable point
  bool best_needs_disk = false, disk_so_far = false;
  checkpoint_on_disk = false;
  BlockHash parent = kRootBlockHash;
  // As FindPrefix: a block is reusable only if at least one token follows it.
  for (int64_t i = 0; (i + 1) * b <= length - 1; ++i) {
    const std::span<const int32_t> key = BlockKey(tokens, i);
    const BlockHash hash = HashBlock(parent, key);
    const std::optional<int32_t> block = blocks_.Lookup(hash, parent, key);
    if (!block && !disk_->HasBlock(hash, parent, key)) break;
    chain.push_back({hash, parent, i, block.value_or(-1)});
    disk_so_far = disk_so_far || !block;
    parent = hash;
    bool checkpoint_here_on_disk = false;
    if (NeedsCheckpoints()) {
      if ((i + 1) * b % options_.checkpoint_interval != 0) continue;
      if (!checkpoints_.Peek(hash)) {
        if (!disk_->HasCheckpoint(hash)) continue;
        checkpoint_here_on_disk = true;
      }
    }
    best = chain.size();
    best_needs_disk = disk_so_far || checkpoint_here_on_disk;
    checkpoint_on_disk = checkpoint_here_on_disk;
  }
  chain.resize(best_needs_disk ? best : 0);  // all in memory: FindPrefix finds it as it is
  if (chain.empty()) checkpoint_on_disk = false;
  return chain;
}

bool CacheManager::LoadCheckpoint(BlockHash hash) {
  const std::optional<int32_t> id = checkpoints_.Take(hash, /*pinned=*/true);  // may evict one (to the disk)
  if (!id) return false;
  const std::span<std::byte> destination(checkpoint_arena_.Item(*id), static_cast<size_t>(options_.checkpoint_bytes));
  if (!disk_->Read(DiskItemKind::kCheckpoint, hash, 0, {}, destination)) {
    checkpoints_.Drop(hash);
    return false;
  }
  checkpoints_.Unpin(hash);
  return true;
}

void CacheManager::LoadPrefixFromDisk(std::span<const int32_t> tokens) {
  if (disk_ == nullptr || !options_.prefix_caching) return;
  bool checkpoint_on_disk = false;
  const std::vector<ChainLink> chain = DiskChain(tokens, checkpoint_on_disk);
  if (chain.empty()) return;
  const int64_t b = options_.block_tokens;
  // The chain's blocks in memory are held while the others are read, so that those reads cannot evict them.
  std::vector<int32_t> held(chain.size(), -1);  // [chain] block ids to release at the end
  int64_t on_disk = 0;
  for (size_t i = 0; i < chain.size(); ++i) {
    if (chain[i].block >= 0) {
      blocks_.Acquire(chain[i].block);
      held[i] = chain[i].block;
    } else {
      ++on_disk;
    }
  }
  bool complete = on_disk <= blocks_.num_free() && (!checkpoint_on_disk || LoadCheckpoint(chain.back().hash));
  for (size_t i = 0; complete && i < chain.size(); ++i) {
    if (chain[i].block >= 0) continue;
    const int32_t id = blocks_.Allocate(1)->front();  // may evict a block of another prefix (to the disk)
    const std::span<const int32_t> key = BlockKey(tokens, chain[i].index);
    const std::span<std::byte> destination(block_arena_.Item(id), static_cast<size_t>(options_.block_bytes));
    held[i] = id;
    if (!disk_->Read(DiskItemKind::kBlock, chain[i].hash, chain[i].parent, key, destination)) {
      complete = false;  // the prefix ends before this block; the garbage in `id` is never registered
      break;
    }
    blocks_.Register(id, chain[i].hash, chain[i].parent, key);
  }
  if (complete) disk_hit_tokens_ += static_cast<int64_t>(chain.size()) * b;
  // Last first, as Free does: the prefix's tail is evicted before its head.
  for (auto id = held.rbegin(); id != held.rend(); ++id) {
    if (*id >= 0) blocks_.Release(*id);
  }
}

}  // namespace glint
