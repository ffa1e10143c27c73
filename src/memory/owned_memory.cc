#include "memory/owned_memory.h"

namespace glint {

Result<std::unique_ptr<OwnedSequenceMemory>> OwnedSequenceMemory::Create(int64_t block_tokens, int64_t block_bytes,
                                                                         int64_t slot_bytes) {
  if (block_tokens <= 0) return InvalidArgument("block_tokens is ", block_tokens, "; expected a positive count");
  auto memory = std::make_unique<OwnedSequenceMemory>();
  memory->block_tokens = block_tokens;
  GLINT_ASSIGN_OR_RETURN(memory->blocks, ItemArena::Growable(block_bytes));
  GLINT_ASSIGN_OR_RETURN(memory->slot, ItemArena::Fixed(1, slot_bytes));
  return memory;
}

OwnedSequenceMemory::~OwnedSequenceMemory() {
  if (on_free) on_free();
}

void OwnedSequenceMemory::Reserve(int64_t tokens) {
  while (Capacity() < tokens) block_table.push_back(blocks.Append());
}

}  // namespace glint
