// Where one DSA layer's caches live: a view over the sequence's block table (per-token rows in blocks) and its
// slot (the indexer's filling pool). Layout in cache_layout.h; the math that reads and writes it in dsa.cc and
// indexer.cc is the same whether the memory is the engine's pools or a standalone cache's own.
//
//   latents      row p   = LatentRow(p)    [kv_lora]  at row p % B of block table[p / B]
//   pooled keys  pool m  = PooledKey(m)    [e]        at row m % (B / kpool) of block table[m · kpool / B]
//   pending rows j < tokens % kpool: PendingKey(j), PendingGate(j) [e] — ik and ig of the filling pool
// Positions 0 .. tokens − 1 are cached; pools 0 .. tokens / kpool − 1 are complete.
// Latents and pooled keys are stored in `dtype` (quant/kv_rows.h): StoreLatent / LoadLatent (and the pooled-key
// pair) encode and decode a row; LatentRow / PooledKey address fp32 rows in place and exist only for fp32. The
// pending rows are always fp32 (they are raw inputs of the pooling, not cached values).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "memory/item_arena.h"
#include "memory/owned_memory.h"
#include "quant/kv_rows.h"

namespace glint {

struct DsaCache {
  // Layout identity, checked against the config on every call.
  int64_t kv_lora_rank = 0;
  int64_t index_head_dim = 0;  // e
  int64_t kpool = 0;
  int64_t block_tokens = 0;                     // B, a multiple of kpool
  int64_t tokens = 0;                           // positions cached
  KvCacheDtype dtype = KvCacheDtype::kFloat32;  // latents and pooled keys

  // Where the bytes are (not owned by the view).
  const ItemArena* blocks = nullptr;
  const std::vector<int32_t>* block_table = nullptr;
  int64_t latents_offset = 0;  // bytes into a block
  int64_t pooled_offset = 0;   // bytes into a block
  float* pending = nullptr;    // [2, kpool − 1, e] in the slot: keys, then gates

  // Set by NewDsaCache: the cache owns its memory (shared by copies of this struct) and DsaForward grows it. A
  // view into an engine's pools has none; the engine reserves blocks before each call.
  std::shared_ptr<OwnedSequenceMemory> owned;

  // fp32 caches only: the row in place.
  float* LatentRow(int64_t position) const {
    GLINT_CHECK(dtype == KvCacheDtype::kFloat32) << "LatentRow of a " << KvCacheDtypeName(dtype) << " cache";
    return reinterpret_cast<float*>(LatentValues(position));
  }
  float* PooledKey(int64_t pool) const {
    GLINT_CHECK(dtype == KvCacheDtype::kFloat32) << "PooledKey of a " << KvCacheDtypeName(dtype) << " cache";
    return reinterpret_cast<float*>(PooledValues(pool));
  }
  // Any dtype: a row's stored values and (fp8, int8) its scale.
  KvSegment LatentSegment() const { return KvSegment::Make(dtype, block_tokens, kv_lora_rank); }
  KvSegment PooledSegment() const { return KvSegment::Make(dtype, block_tokens / kpool, index_head_dim); }
  std::byte* LatentValues(int64_t position) const {
    return Block(position / block_tokens) + latents_offset +
           (position % block_tokens) * kv_lora_rank * KvValueBytes(dtype);
  }
  float* LatentScale(int64_t position) const {
    return reinterpret_cast<float*>(Block(position / block_tokens) + latents_offset + LatentSegment().scales_offset) +
           position % block_tokens;
  }
  std::byte* PooledValues(int64_t pool) const {
    const int64_t pools_per_block = block_tokens / kpool;
    return Block(pool / pools_per_block) + pooled_offset +
           (pool % pools_per_block) * index_head_dim * KvValueBytes(dtype);
  }
  float* PooledScale(int64_t pool) const {
    const int64_t pools_per_block = block_tokens / kpool;
    return reinterpret_cast<float*>(Block(pool / pools_per_block) + pooled_offset + PooledSegment().scales_offset) +
           pool % pools_per_block;
  }
  void StoreLatent(int64_t position, const float* row) const {
    EncodeKvRow(dtype, row, kv_lora_rank, LatentValues(position), LatentScale(position));
  }
  void LoadLatent(int64_t position, float* row) const {
    DecodeKvRow(dtype, LatentValues(position), LatentScale(position), kv_lora_rank, row);
  }
  void StorePooledKey(int64_t pool, const float* key) const {
    EncodeKvRow(dtype, key, index_head_dim, PooledValues(pool), PooledScale(pool));
  }
  void LoadPooledKey(int64_t pool, float* key) const {
    DecodeKvRow(dtype, PooledValues(pool), PooledScale(pool), index_head_dim, key);
  }
  float* PendingKey(int64_t row) const { return pending + row * index_head_dim; }
  float* PendingGate(int64_t row) const { return pending + ((kpool - 1) + row) * index_head_dim; }
  int64_t NumPools() const { return kpool > 0 ? tokens / kpool : 0; }
  int64_t NumPending() const { return kpool > 0 ? tokens % kpool : 0; }
  // Positions the block table covers.
  int64_t Capacity() const {
    return block_table == nullptr ? 0 : static_cast<int64_t>(block_table->size()) * block_tokens;
  }

 private:
  std::byte* Block(int64_t table_index) const { return blocks->Item((*block_table)[table_index]); }
};

// An empty cache that owns its memory, laid out for one layer of `config` with StandaloneBlockTokens(config).
DsaCache NewDsaCache(const ModelConfig& config, KvCacheDtype dtype = KvCacheDtype::kFloat32);

// Checks that `cache` was made for `config` and its memory is addressable for `tokens` more positions. A cache
// that owns its memory is grown to fit (no cached value changes); a view must already cover them.
Status PrepareDsaCache(DsaCache& cache, const ModelConfig& config, int64_t new_tokens);

// Copies of the cached values in position / pool order, for tests and tools:
std::vector<float> GatherLatents(const DsaCache& cache);       // [tokens, kv_lora]
std::vector<float> GatherPooledKeys(const DsaCache& cache);    // [tokens / kpool, e]
std::vector<float> GatherPendingKeys(const DsaCache& cache);   // [tokens % kpool, e]
std::vector<float> GatherPendingGates(const DsaCache& cache);  // [tokens % kpool, e]

}  // namespace glint
