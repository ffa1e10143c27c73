#include "fast/fast_indexer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/indexer_ops.h"

namespace glint {
namespace {

// Pools per parallel chunk (any boundary works: ScoreRange splits at blocks). 2048 pools × 32 heads × 128 values
// are ≈ 8 M multiply-adds, far above a task hand-off's cost, and 1M positions give 128 chunks to balance.
constexpr int64_t kChunkPools = 2048;

// The query in the form the cache's kernel takes: packed with the head weights for fp32 products (fp32, bf16 and
// fp8 keys), int8 codes and scales per head for int8 keys.
struct PreparedQuery {
  const FastIndexerQuery* q = nullptr;
  std::vector<float> fp32;     // indexer::PackQueryFp32's layout, for every dtype but int8 (else empty)
  std::vector<int16_t> codes;  // [heads, e] int8 keys only
  std::vector<float> scales;   // [heads]
  std::vector<uint8_t> vnni;   // the codes packed as the VNNI kernel's operand, where it runs (else empty)
  std::vector<int8_t> amx;     // the codes packed as AMX tiles' B operand, where that kernel runs (else empty)
};

// Blocks are separate items of the cache's arena, so the hardware prefetcher stops at each block's end and every
// block would start with a full memory latency; asking for the next block's keys while this one is scored keeps
// the loads streaming (one query reads each key once: the indexer is a pure streaming read).
void PrefetchKeys(const DsaCache& cache, int64_t pool, int64_t count) {
  const auto* values = reinterpret_cast<const char*>(cache.PooledValues(pool));
  const int64_t bytes = count * cache.index_head_dim * KvValueBytes(cache.dtype);
  for (int64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(values + offset, 0, 0);
  if (KvCacheDtypeHasScale(cache.dtype)) __builtin_prefetch(cache.PooledScale(pool), 0, 0);
}

// int8 keys on AMX tiles: the blocks' key spans of pools [begin, end), scored in one call (one tile
// configuration); the kernel prefetches each next block as the current one is scored.
void ScoreRangeAmx(const DsaCache& cache, const PreparedQuery& prepared, int64_t begin, int64_t end, float* scores) {
  thread_local std::vector<indexer::Int8KeySpan> spans;
  const int64_t pools_per_block = cache.block_tokens / cache.kpool;
  spans.clear();
  for (int64_t m = begin; m < end;) {
    const int64_t count = std::min(pools_per_block - m % pools_per_block, end - m);
    spans.push_back({reinterpret_cast<const int8_t*>(cache.PooledValues(m)), cache.PooledScale(m), count});
    m += count;
  }
  const FastIndexerQuery& q = *prepared.q;
  const float scale = 1.0f / std::sqrt(static_cast<float>(cache.index_head_dim));
  indexer::ScoresInt8Amx(prepared.amx.data(), prepared.scales.data(), q.head_weights, spans, q.heads,
                         cache.index_head_dim, scale, scores);
}

// scores[m − begin] for pools [begin, end) of `cache`, block by block.
void ScoreRange(const DsaCache& cache, const PreparedQuery& prepared, int64_t begin, int64_t end, float* scores) {
  if (!prepared.amx.empty()) return ScoreRangeAmx(cache, prepared, begin, end, scores);
  const FastIndexerQuery& q = *prepared.q;
  const int64_t e = cache.index_head_dim, pools_per_block = cache.block_tokens / cache.kpool;
  const float scale = 1.0f / std::sqrt(static_cast<float>(e));
  for (int64_t m = begin; m < end;) {
    const int64_t count = std::min(pools_per_block - m % pools_per_block, end - m);
    float* out = scores + (m - begin);
    if (m + count < end) PrefetchKeys(cache, m + count, std::min(pools_per_block, end - m - count));
    switch (cache.dtype) {
      case KvCacheDtype::kFloat32:
        indexer::ScoresFp32(prepared.fp32.data(), cache.PooledKey(m), count, q.heads, e, scale, out);
        break;
      case KvCacheDtype::kBfloat16:
        indexer::ScoresBf16(prepared.fp32.data(), reinterpret_cast<const uint16_t*>(cache.PooledValues(m)), count,
                            q.heads, e, scale, out);
        break;
      case KvCacheDtype::kInt8:
        if (!prepared.vnni.empty()) {
          indexer::ScoresInt8Vnni(prepared.vnni.data(), prepared.scales.data(), q.head_weights,
                                  reinterpret_cast<const int8_t*>(cache.PooledValues(m)), cache.PooledScale(m), count,
                                  q.heads, e, scale, out);
        } else {
          indexer::ScoresInt8(prepared.codes.data(), prepared.scales.data(), q.head_weights,
                              reinterpret_cast<const int8_t*>(cache.PooledValues(m)), cache.PooledScale(m), count,
                              q.heads, e, scale, out);
        }
        break;
      case KvCacheDtype::kFp8:
        indexer::ScoresFp8(prepared.fp32.data(), reinterpret_cast<const uint8_t*>(cache.PooledValues(m)),
                           cache.PooledScale(m), count, q.heads, e, scale, out);
        break;
    }
    m += count;
  }
}

PreparedQuery PrepareQuery(const DsaCache& cache, const FastIndexerQuery& query) {
  const int64_t e = cache.index_head_dim;
  PreparedQuery prepared{&query, {}, {}, {}, {}, {}};
  if (cache.dtype != KvCacheDtype::kInt8) {
    prepared.fp32.resize(indexer::Fp32QueryFloats(query.heads, e));
    indexer::PackQueryFp32(query.query, query.head_weights, query.heads, e, prepared.fp32.data());
    return prepared;
  }
  prepared.codes.resize(query.heads * e);
  prepared.scales.resize(query.heads);
  indexer::QuantizeQuery(query.query, query.heads, e, prepared.codes.data(), prepared.scales.data());
  // AMX, else VNNI, else Highway: all bit-exact with ScoresInt8Reference, so the choice never changes a selection.
  if (query.isa >= Isa::kAmx && indexer::Int8AmxSupported(e)) {
    prepared.amx.resize(indexer::AmxQueryBytes(query.heads, e));
    indexer::PackQueryForAmx(prepared.codes.data(), query.heads, e, prepared.amx.data());
  } else if (query.isa >= Isa::kAvx512 && indexer::Int8VnniSupported(e)) {
    prepared.vnni.resize(indexer::VnniQueryBytes(query.heads, e));
    indexer::PackQueryForVnni(prepared.codes.data(), query.heads, e, prepared.vnni.data());
  }
  return prepared;
}

}  // namespace

PoolSelection FastSelectPools(const DsaCache& cache, const FastIndexerQuery& query, int64_t top_pools,
                              WorkerPool* pool) {
  // Per-thread scratch, reused across calls and layers (a decode step makes one call per DSA layer).
  thread_local std::vector<float> scores;
  thread_local std::vector<TopKeyCollector> collectors;  // [workers]: each keeps its chunks' K+1 best pool keys
  const int64_t visible = VisiblePools(query.position, cache.kpool);
  const PreparedQuery prepared = PrepareQuery(cache, query);
  scores.resize(visible);
  const int64_t chunks = (visible + kChunkPools - 1) / kChunkPools;
  const bool parallel = pool != nullptr && chunks > 1 && pool->size() > 1;
  // The selection is fused into the scoring: each chunk's scores go through its worker's collector while they
  // are in L1 (a threshold select), so no pass re-reads all n scores; k ≥ n needs no select at all.
  const bool select = top_pools < visible;
  // A lambda names a thread_local as the running thread's own instance: the workers get this thread's by reference.
  std::vector<TopKeyCollector>& per_worker = collectors;
  per_worker.resize(parallel ? pool->size() : 1);
  for (TopKeyCollector& collector : per_worker) collector.Reset(top_pools + 1);
  float* out = scores.data();
  if (!parallel) {
    ScoreRange(cache, prepared, 0, visible, out);
    if (select) collectors[0].Add(out, 0, visible);
  } else {
    pool->Run(chunks, [&](int64_t chunk, int worker) {
      const int64_t begin = chunk * kChunkPools, end = std::min(visible, begin + kChunkPools);
      ScoreRange(cache, prepared, begin, end, out + begin);
      if (select) per_worker[worker].Add(out + begin, begin, end - begin);
    });
  }
  const std::span<const float> all(scores.data(), visible);
  if (!select) return SelectTopPools(all, top_pools);
  std::vector<uint64_t>& keys = collectors[0].keys();
  for (size_t w = 1; w < collectors.size(); ++w)
    keys.insert(keys.end(), collectors[w].keys().begin(), collectors[w].keys().end());
  return SelectTopPoolsFromKeys(all, top_pools, keys);
}

int64_t IndexerKeyBytes(const DsaCache& cache, int64_t position) {
  return VisiblePools(position, cache.kpool) * KvRowBytes(cache.dtype, cache.index_head_dim);
}

}  // namespace glint
