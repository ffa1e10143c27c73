// The memory of one sequence that no engine manages (a test, a tool, `glint score`): its own blocks, grown on
// demand, its own block table and its own slot. The model reads and writes it exactly as it does the engine's
// pools, so standalone runs exercise the same paged code.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "memory/item_arena.h"

namespace glint {

struct OwnedSequenceMemory {
  OwnedSequenceMemory() = default;
  OwnedSequenceMemory(const OwnedSequenceMemory&) = delete;
  OwnedSequenceMemory& operator=(const OwnedSequenceMemory&) = delete;
  // Runs on_free: a multi-rank leader frees the other ranks' copies of this sequence then (lockstep.h).
  ~OwnedSequenceMemory();
  // `block_bytes`, `slot_bytes`: positive multiples of kItemAlignment (a layout's sizes). The slot is zeroed.
  static Result<std::unique_ptr<OwnedSequenceMemory>> Create(int64_t block_tokens, int64_t block_bytes,
                                                             int64_t slot_bytes);
  // Appends blocks until the table covers positions < `tokens`.
  void Reserve(int64_t tokens);
  int64_t Capacity() const { return static_cast<int64_t>(block_table.size()) * block_tokens; }

  int64_t block_tokens = 0;
  ItemArena blocks;                  // growable, items of block_bytes
  std::vector<int32_t> block_table;  // position p in blocks.Item(block_table[p / block_tokens])
  ItemArena slot;                    // one item of slot_bytes
  std::function<void()> on_free;     // empty: nothing to do
};

}  // namespace glint
