#include "memory/item_arena.h"

#include <sys/mman.h>

#include <cstdlib>

#include "base/aligned_buffer.h"

namespace glint {

void ItemArena::AlignedFree::operator()(std::byte* p) const {
  if (reserved_bytes > 0) {
    munmap(p, static_cast<size_t>(reserved_bytes));
  } else {
    std::free(p);
  }
}

ItemArena::Allocation ItemArena::Allocate(int64_t bytes) {
  // From 2 MiB up on 2 MiB pages (AllocateZeroed): a decode step of 16 sequences reads and writes every KDA state of
  // their slots (≈ 12 MB a slot at three KDA layers of the bench widths), and on 4 KiB pages that is a TLB miss, and a
  // stop for the hardware prefetcher, every 4 KiB.
  return Allocation(static_cast<std::byte*>(AllocateZeroed(static_cast<size_t>(bytes))));
}

ItemArena::Allocation ItemArena::Reserve(int64_t bytes) {
  // PROT_NONE + MAP_NORESERVE: no memory, no swap reservation, no overcommit charge; page-aligned, hence aligned
  // to kItemAlignment.
  void* range =
      mmap(nullptr, static_cast<size_t>(bytes), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) return Allocation(nullptr, AlignedFree{});
  return Allocation(static_cast<std::byte*>(range), AlignedFree{bytes});
}

Result<ItemArena> ItemArena::Fixed(int64_t count, int64_t item_bytes) { return Make(count, item_bytes, true); }

Result<ItemArena> ItemArena::Reserved(int64_t count, int64_t item_bytes) { return Make(count, item_bytes, false); }

Result<ItemArena> ItemArena::Make(int64_t count, int64_t item_bytes, bool backed) {
  if (item_bytes <= 0 || item_bytes % kItemAlignment != 0) {
    return InvalidArgument("arena item size ", item_bytes, " bytes is not a positive multiple of ", kItemAlignment);
  }
  if (count < 0 || count > kMaxItemsPerPool) {
    return InvalidArgument("arena item count ", count, " is outside 0 .. 2^31 − 1");
  }
  ItemArena arena;
  arena.item_bytes_ = item_bytes;
  arena.backed_ = backed;
  if (count == 0) return arena;
  if (count > INT64_MAX / item_bytes) return InvalidArgument("arena of ", count, " × ", item_bytes, " bytes overflows");
  Allocation allocation = backed ? Allocate(count * item_bytes) : Reserve(count * item_bytes);
  if (allocation == nullptr) {
    return ResourceExhausted("could not ", backed ? "allocate " : "reserve address space for ", count, " × ",
                             item_bytes, " bytes (", count * item_bytes,
                             " bytes) for a cache pool; lower the memory budget");
  }
  arena.items_.reserve(count);
  for (int64_t i = 0; i < count; ++i) arena.items_.push_back(allocation.get() + i * item_bytes);
  arena.allocations_.push_back(std::move(allocation));
  return arena;
}

Result<ItemArena> ItemArena::Growable(int64_t item_bytes) {
  if (item_bytes <= 0 || item_bytes % kItemAlignment != 0) {
    return InvalidArgument("arena item size ", item_bytes, " bytes is not a positive multiple of ", kItemAlignment);
  }
  ItemArena arena;
  arena.item_bytes_ = item_bytes;
  arena.growable_ = true;
  return arena;
}

int32_t ItemArena::Append() {
  GLINT_CHECK(growable_) << "Append on a fixed arena";
  GLINT_CHECK(count() < kMaxItemsPerPool) << "an arena holds at most 2^31 − 1 items (int32 ids)";
  Allocation allocation = Allocate(item_bytes_);
  GLINT_CHECK(allocation != nullptr) << "out of memory growing an arena by " << item_bytes_ << " bytes";
  items_.push_back(allocation.get());
  allocations_.push_back(std::move(allocation));
  return static_cast<int32_t>(items_.size() - 1);
}

}  // namespace glint
