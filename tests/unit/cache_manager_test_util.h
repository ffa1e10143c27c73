// A small CacheManager for model-free tests of the prefix cache: blocks of 4 tokens (64 bytes), 2 slots of 128
// bytes, checkpoints of 64 bytes taken every 8 tokens, prefix caching on.
#pragma once

#include <cstdint>

#include "memory/cache_manager.h"

namespace glint::testing {

inline CacheManagerOptions SmallCacheManagerOptions(int64_t blocks, int64_t checkpoints) {
  CacheManagerOptions o;
  o.block_tokens = 4;
  o.block_bytes = 64;
  o.num_blocks = blocks;
  o.slot_bytes = 128;
  o.num_slots = 2;
  o.checkpoint_bytes = 64;
  o.num_checkpoints = checkpoints;
  o.prefix_caching = true;
  o.checkpoint_interval = 8;
  return o;
}

}  // namespace glint::testing
