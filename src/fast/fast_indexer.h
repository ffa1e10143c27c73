// The fast path's KPool indexer for one query past the dense regime (model/indexer.h has the rule): scores every
// visible pool with the kernel of the cache's dtype (kernels/indexer_ops.h, kernels/mla_ops.h), block by block
// (each block's pooled keys are contiguous), spread over the worker pool when asked, then selects the top pools
// in O(n) (SelectTopPoolsLinear: the reference's selection bit for bit on the same scores).
//
// Scores per dtype: fp32 keys: fp32 query (mla::IndexerScores); bf16 keys: fp32 query × widened keys; int8 keys:
// the query quantized per head to int8 codes, exact int32 dots; fp8 keys: decoded to fp32, then as fp32.
#pragma once

#include <cstdint>

#include "base/worker_pool.h"
#include "kernels/isa.h"
#include "model/dsa_cache.h"
#include "model/indexer.h"

namespace glint {

struct FastIndexerQuery {
  const float* query = nullptr;         // [heads, e] iq
  const float* head_weights = nullptr;  // [heads] w · I^-1/2
  int64_t heads = 0;
  int64_t position = 0;  // the query's absolute position (sees VisiblePools(position) pools)
  Isa isa = Isa::kAmx;   // the highest kernel level allowed (--isa): AMX needs kAmx, VNNI kAvx512
};

// `pool` null: on the calling thread (a call made from inside a pool task). Otherwise the scores are split into
// chunks over the pool's workers; the caller must not be inside a Run of that pool.
PoolSelection FastSelectPools(const DsaCache& cache, const FastIndexerQuery& query, int64_t top_pools,
                              WorkerPool* pool);

// Bytes of pooled keys (values and scales) one query past the dense regime reads at `position` (the roofline of
// the indexer: every visible pool's key once).
int64_t IndexerKeyBytes(const DsaCache& cache, int64_t position);

}  // namespace glint
