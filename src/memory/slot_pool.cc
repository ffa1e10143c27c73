#include "memory/slot_pool.h"

namespace glint {

SlotPool::SlotPool(int64_t num_slots) : num_slots_(num_slots) {
  GLINT_CHECK(num_slots >= 0 && num_slots < (int64_t{1} << 31));
  for (int32_t slot = 0; slot < num_slots; ++slot) free_.insert(free_.end(), slot);
}

std::optional<int32_t> SlotPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t slot = *free_.begin();
  free_.erase(free_.begin());
  return slot;
}

void SlotPool::Free(int32_t slot) {
  GLINT_CHECK(slot >= 0 && slot < num_slots_) << "slot " << slot << " of " << num_slots_;
  GLINT_CHECK(free_.insert(slot).second) << "slot " << slot << " freed twice";
}

}  // namespace glint
