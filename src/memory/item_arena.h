// Storage for fixed-size items (cache blocks, state slots, state checkpoints): raw bytes, each item 64-byte
// aligned so SIMD kernels can load rows without peeling. Either one allocation made up front (the engine's pools:
// their size is the capacity the engine reports) or grown one item at a time (a standalone sequence that owns its
// memory, e.g. a test or `glint score`). Items never move once made, so pointers into them stay valid until the
// arena is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"

namespace glint {

inline constexpr int64_t kItemAlignment = 64;  // bytes: a cache line, and the widest SIMD register (AVX-512)
// Item ids (block, slot and checkpoint ids, block-table entries) are int32_t: at most 2^31 − 1 items per pool.
// Capacity planning caps pools there (docs/long-context.md); a block of 64 tokens then covers 2^37 positions.
inline constexpr int64_t kMaxItemsPerPool = (int64_t{1} << 31) - 1;

// Rounds `bytes` up to a multiple of kItemAlignment.
inline int64_t AlignItemBytes(int64_t bytes) { return (bytes + kItemAlignment - 1) / kItemAlignment * kItemAlignment; }

class ItemArena {
 public:
  ItemArena() = default;
  // `count` items of `item_bytes` (a positive multiple of kItemAlignment), zero-filled — the memory is touched now
  // so that a budget larger than the machine fails at start-up, not under load.
  static Result<ItemArena> Fixed(int64_t count, int64_t item_bytes);
  // An empty arena that Append grows.
  static Result<ItemArena> Growable(int64_t item_bytes);
  // `count` items of `item_bytes` whose addresses are only names: address space reserved with no memory behind it
  // and no access allowed (--dp-attention, docs/distributed.md "Attention data-parallel": the pools of the
  // sequences another rank holds, which this process books and names in batch plans but never reads or writes).
  static Result<ItemArena> Reserved(int64_t count, int64_t item_bytes);

  ItemArena(ItemArena&&) = default;
  ItemArena& operator=(ItemArena&&) = default;
  ItemArena(const ItemArena&) = delete;
  ItemArena& operator=(const ItemArena&) = delete;

  // Growable arenas only: a new zero-filled item; returns its id.
  int32_t Append();

  std::byte* Item(int32_t id) const {
    GLINT_CHECK(id >= 0 && id < count()) << "item " << id << " of an arena of " << count();
    return items_[id];
  }
  int64_t count() const { return static_cast<int64_t>(items_.size()); }
  int64_t item_bytes() const { return item_bytes_; }
  bool growable() const { return growable_; }
  // False for a Reserved arena: its items have no memory (touching one faults).
  bool backed() const { return backed_; }

 private:
  struct AlignedFree {
    int64_t reserved_bytes = 0;  // > 0: an address range from Reserve (unmapped), else aligned_alloc's memory
    void operator()(std::byte* p) const;
  };
  using Allocation = std::unique_ptr<std::byte, AlignedFree>;
  static Allocation Allocate(int64_t bytes);
  static Allocation Reserve(int64_t bytes);
  // Checks `count` × `item_bytes`, reserves or allocates them and lays out the items.
  static Result<ItemArena> Make(int64_t count, int64_t item_bytes, bool backed);

  int64_t item_bytes_ = 0;
  bool growable_ = false;
  bool backed_ = true;
  std::vector<Allocation> allocations_;  // one for a fixed arena, one per item for a growable one
  std::vector<std::byte*> items_;        // [count] start of each item
};

}  // namespace glint
