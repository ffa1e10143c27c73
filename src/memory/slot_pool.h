// The state-slot pool: one slot per live sequence, holding its fixed-size state (for the hybrid model: every KDA
// layer's recurrent state and conv window, and every DSA layer's partially filled indexer pool). Sized to the
// maximum concurrency; a sequence that cannot get a slot waits. Storage is an ItemArena beside it.
#pragma once

#include <cstdint>
#include <optional>
#include <set>

#include "base/status.h"

namespace glint {

class SlotPool {
 public:
  explicit SlotPool(int64_t num_slots);

  int64_t num_slots() const { return num_slots_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_slots_ - num_free(); }

  // The lowest free slot id (deterministic, so tests can name slots), or nullopt when every slot is taken.
  std::optional<int32_t> Allocate();
  void Free(int32_t slot);
  bool is_free(int32_t slot) const { return free_.count(slot) != 0; }

 private:
  int64_t num_slots_;
  std::set<int32_t> free_;
};

}  // namespace glint
