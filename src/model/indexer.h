// KPool lightning indexer of a DSA layer, fp32 reference (docs/model-glm53.md §7, docs/model-dsa.md).
//
// For a query at absolute position p (0-based) the indexer scores every complete, visible pool of `kpool`
// consecutive tokens (pools anchored at position 0; pool m = tokens [kpool·m, kpool·m + kpool − 1], visible when
// its last token is ≤ p) and keeps the K = index_topk / index_kpool best. The attended set is the selected pools'
// tokens plus the tail of the incomplete pool, {kpool·n_pool(p), …, p}.
//
// Per token (h = the layer's normed hidden [D], q_resid = RMSNorm(q_a_proj h) [q_lora], shared with MLA):
//   iq[I, e] = wq_b q_resid                      ik[e] = LayerNorm(wk h; k_norm weight, bias, eps 1e-6)
//   ig[e]    = compress_gate h                   w[I]  = weights_proj h · I^-1/2
// Per complete pool m, per channel c:  pk_m[c] = Σ_j softmax_j(ig_{kpool·m+j}[c] + ape[j, c]) · ik_{kpool·m+j}[c]
// Score of pool m for a query:          s_m    = Σ_h w_h · relu((iq_h · pk_m) · e^-1/2)
//
// Arrays are row-major fp32; sums accumulate in double (ref::Dot) and are stored as fp32.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "model/dsa_cache.h"
#include "model/weights.h"

namespace glint {

// Checks every indexer tensor's shape against the config (hand-built weights in tests can be wrong).
Status ValidateIndexerWeights(const IndexerWeights& weights, const ModelConfig& config);

// Number of complete pools visible to a query at `position`: floor((position + 1) / kpool).
inline int64_t VisiblePools(int64_t position, int64_t kpool) { return (position + 1) / kpool; }

// Key side for `tokens` rows of h [tokens, D] at positions cache.tokens, …: ik and ig of each token go to the
// filling pool's pending rows; a pool that completes is pooled into its PooledKey slot. The caller advances
// cache.tokens afterwards. Inputs and the cache's capacity must have been checked (PrepareDsaCache).
void AppendIndexerKeys(const IndexerWeights& weights, const ModelConfig& config, const float* hidden, int64_t tokens,
                       const DsaCache& cache);

// pk[e] = Σ_j softmax_j(gates[j, c] + ape[j, c]) · keys[j, c] for one pool (softmax over the kpool members of each
// channel, in fp32 with the max subtracted). keys, gates, ape: [kpool, e].
void PoolKeys(const float* keys, const float* gates, const float* ape, int64_t kpool, int64_t head_dim, float* pooled);

// Query side for one token: iq [I, e] = wq_b q_resid and the head weights w [I] = weights_proj h · I^-1/2.
void IndexerQuery(const IndexerWeights& weights, const ModelConfig& config, const float* q_resid, const float* hidden,
                  float* query, float* head_weights);

// s_m for m < num_pools: query [I, e], head_weights [I], pooled [num_pools, e] (contiguous) → scores [num_pools].
void ScorePools(const float* query, const float* head_weights, const float* pooled, int64_t num_pools,
                int64_t num_heads, int64_t head_dim, float* scores);

// The K best pools by score. The order is total so that any input gives a valid answer (pitfall 14): higher
// score first, equal scores toward the LOWER pool index (the golden reference's rule; torch.topk leaves it
// unspecified), and NaN below every number (−inf included), NaNs among themselves by lower index.
struct PoolSelection {
  std::vector<int64_t> pools;  // [min(k, n)] ascending pool indices
  // score(K-th best) − score((K+1)-th best) in the order above; +inf when k ≥ n (every pool selected), NaN when
  // either score is NaN (the boundary is undecided).
  float margin = 0.0f;
};
PoolSelection SelectTopPools(std::span<const float> scores, int64_t k);  // k ≥ 1

// The same selection (pools and margin bit for bit, ties and NaNs included) in O(n) expected time for the fast
// path: each pool becomes one 64-bit key that orders as the total order above — the score mapped to an unsigned
// integer monotone in the score (−0 and +0 equal, every NaN below −inf) in the high half, ~index in the low half
// so that equal scores rank toward the lower index — and std::nth_element finds the K+1 best keys. Only the K
// selected pools are then sorted (K log K, independent of n). `keys` is scratch, grown to n. n < 2^32.
PoolSelection SelectTopPoolsLinear(std::span<const float> scores, int64_t k, std::vector<uint64_t>& keys);

// The total order above as one integer per pool (larger = ranks first), the key of SelectTopPoolsLinear.
uint64_t PoolOrderKey(float score, int64_t pool);
// SelectTopPoolsLinear's selection from `keys` (PoolOrderKey of scores[index], reordered in place): the K best
// of keys, which must hold the K+1 best keys of all n pools (any superset: the answer is the same). 1 ≤ k < keys.
PoolSelection SelectTopPoolsFromKeys(std::span<const float> scores, int64_t k, std::span<uint64_t> keys);

// The `keep` best pool keys of scores streamed in pieces (one per worker, fed as each chunk is scored, while its
// scores are still in L1): a threshold select that never re-reads the scores. A key enters only above the floor
// (the keep-th best key when last cut); the buffer is cut back to `keep` when it reaches 4 · keep, so it holds a
// superset of the keep best of everything added, in O(n + keep · log(n / keep)) expected work.
class TopKeyCollector {
 public:
  void Reset(int64_t keep);                                          // keep ≥ 1
  void Add(const float* scores, int64_t first_pool, int64_t count);  // scores[i] is pool first_pool + i
  std::vector<uint64_t>& keys() { return keys_; }

 private:
  void Cut();
  int64_t keep_ = 1;
  uint64_t floor_ = 0;
  bool floor_nan_ = true;     // no cut yet, or the floor is a NaN score's key: every score goes to the key compare
  float floor_value_ = 0.0f;  // else the score half of floor_ as a float
  std::vector<uint64_t> keys_;
};

// Token positions attended by a query at `position` given its selected pools (ascending): each pool expanded to
// its kpool tokens, then the tail {kpool · n_pool(position), …, position}. Ascending, no duplicates.
std::vector<int64_t> ExpandPools(std::span<const int64_t> pools, int64_t position, int64_t kpool);

// The whole indexer for one query at `position`, whose visible pools are already in `cache`: query [I, e],
// head_weights [I]. Dense regime (n_pool ≤ K): every visible pool, without scoring, margin +inf. Pools are scored
// block by block (each block's pooled keys are contiguous) with the same per-pool arithmetic as one flat call.
struct IndexerSelection {
  std::vector<int64_t> positions;  // ascending
  float margin = 0.0f;             // as PoolSelection::margin
};
IndexerSelection IndexerSelect(const ModelConfig& config, const DsaCache& cache, const float* query,
                               const float* head_weights, int64_t position);

}  // namespace glint
