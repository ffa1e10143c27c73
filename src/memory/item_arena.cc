#include "memory/item_arena.h"

#include <cstdlib>
#include <cstring>

namespace glint {

void ItemArena::AlignedFree::operator()(std::byte* p) const { std::free(p); }

ItemArena::Allocation ItemArena::Allocate(int64_t bytes) {
  void* memory = std::aligned_alloc(kItemAlignment, static_cast<size_t>(bytes));
  if (memory != nullptr) std::memset(memory, 0, static_cast<size_t>(bytes));
  return Allocation(static_cast<std::byte*>(memory));
}

Result<ItemArena> ItemArena::Fixed(int64_t count, int64_t item_bytes) {
  if (item_bytes <= 0 || item_bytes % kItemAlignment != 0) {
    return InvalidArgument("arena item size ", item_bytes, " bytes is not a positive multiple of ", kItemAlignment);
  }
  if (count < 0 || count > kMaxItemsPerPool) {
    return InvalidArgument("arena item count ", count, " is outside 0 .. 2^31 − 1");
  }
  ItemArena arena;
  arena.item_bytes_ = item_bytes;
  if (count == 0) return arena;
  if (count > INT64_MAX / item_bytes) return InvalidArgument("arena of ", count, " × ", item_bytes, " bytes overflows");
  Allocation allocation = Allocate(count * item_bytes);
  if (allocation == nullptr) {
    return ResourceExhausted("could not allocate ", count, " × ", item_bytes, " bytes (", count * item_bytes,
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
