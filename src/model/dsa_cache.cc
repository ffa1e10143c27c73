#include "model/dsa_cache.h"

#include "model/cache_layout.h"

namespace glint {

DsaCache NewDsaCache(const ModelConfig& config, KvCacheDtype dtype) {
  DsaCache cache;
  cache.dtype = dtype;
  cache.kv_lora_rank = config.kv_lora_rank;
  cache.index_head_dim = config.index_head_dim;
  cache.kpool = config.index_kpool;
  cache.block_tokens = StandaloneBlockTokens(config);
  // A config with unusable sizes gets a cache without memory; DsaForward reports the config first.
  if (config.kv_lora_rank <= 0 || config.index_head_dim <= 0 || config.index_kpool <= 0) return cache;
  const int64_t b = cache.block_tokens;
  cache.latents_offset = 0;
  cache.pooled_offset = AlignItemBytes(cache.LatentSegment().Bytes());
  const int64_t block_bytes = cache.pooled_offset + AlignItemBytes(cache.PooledSegment().Bytes());
  const int64_t slot_bytes = AlignItemBytes(std::max<int64_t>(2 * (cache.kpool - 1) * cache.index_head_dim * 4, 1));
  Result<std::unique_ptr<OwnedSequenceMemory>> memory = OwnedSequenceMemory::Create(b, block_bytes, slot_bytes);
  GLINT_CHECK(memory.ok()) << memory.status().ToString();
  cache.owned = std::move(memory).value();
  cache.blocks = &cache.owned->blocks;
  cache.block_table = &cache.owned->block_table;
  cache.pending = reinterpret_cast<float*>(cache.owned->slot.Item(0));
  return cache;
}

Status PrepareDsaCache(DsaCache& cache, const ModelConfig& config, int64_t new_tokens) {
  if (cache.kv_lora_rank != config.kv_lora_rank || cache.index_head_dim != config.index_head_dim ||
      cache.kpool != config.index_kpool) {
    return FailedPrecondition("the DSA cache was made for kv_lora_rank ", cache.kv_lora_rank, ", index_head_dim ",
                              cache.index_head_dim, ", index_kpool ", cache.kpool, " but the config has ",
                              config.kv_lora_rank, ", ", config.index_head_dim, ", ", config.index_kpool,
                              " (a cache of another model, or not made with NewDsaCache)");
  }
  if (cache.blocks == nullptr || cache.block_table == nullptr || cache.pending == nullptr || cache.block_tokens <= 0 ||
      cache.block_tokens % cache.kpool != 0) {
    return FailedPrecondition("the DSA cache has no memory (blocks of ", cache.block_tokens,
                              " tokens); make it with NewDsaCache or a cache layout");
  }
  if (cache.tokens < 0) return FailedPrecondition("the DSA cache holds ", cache.tokens, " positions");
  const int64_t needed = cache.tokens + new_tokens;
  if (cache.owned != nullptr) {
    cache.owned->Reserve(needed);
  } else if (cache.Capacity() < needed) {
    return FailedPrecondition("the DSA cache's block table covers ", cache.Capacity(), " positions but ", needed,
                              " are needed; blocks must be reserved before the forward pass");
  }
  if (cache.Capacity() < cache.tokens) {
    return FailedPrecondition("the DSA cache holds ", cache.tokens, " positions but its block table covers only ",
                              cache.Capacity());
  }
  return Status::Ok();
}

std::vector<float> GatherLatents(const DsaCache& cache) {
  std::vector<float> out(cache.tokens * cache.kv_lora_rank);
  for (int64_t p = 0; p < cache.tokens; ++p) cache.LoadLatent(p, out.data() + p * cache.kv_lora_rank);
  return out;
}

std::vector<float> GatherPooledKeys(const DsaCache& cache) {
  std::vector<float> out(cache.NumPools() * cache.index_head_dim);
  for (int64_t m = 0; m < cache.NumPools(); ++m) cache.LoadPooledKey(m, out.data() + m * cache.index_head_dim);
  return out;
}

std::vector<float> GatherPendingKeys(const DsaCache& cache) {
  std::vector<float> out;
  for (int64_t j = 0; j < cache.NumPending(); ++j) {
    out.insert(out.end(), cache.PendingKey(j), cache.PendingKey(j) + cache.index_head_dim);
  }
  return out;
}

std::vector<float> GatherPendingGates(const DsaCache& cache) {
  std::vector<float> out;
  for (int64_t j = 0; j < cache.NumPending(); ++j) {
    out.insert(out.end(), cache.PendingGate(j), cache.PendingGate(j) + cache.index_head_dim);
  }
  return out;
}

}  // namespace glint
