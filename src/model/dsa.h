// A DSA layer of GLM-5.3-Flash, fp32 reference: NoPE MLA whose keys are chosen per query by the KPool indexer
// (docs/model-glm53.md §6–§7; equations, cache layout and numerics in docs/model-dsa.md).
//
//   q_resid = RMSNorm(q_a_proj h; q_a_layernorm)          [q_lora]       (also the indexer's query input)
//   q       = q_b_proj q_resid                            [heads, qk]
//   c       = RMSNorm(kv_a_proj h; kv_a_layernorm)        [kv_lora]      (cached per token: the MLA latent)
//   kv      = kv_b_proj c                                 [heads, qk + v]; k_h = kv[h, 0:qk], v_h = kv[h, qk:]
//   S(p)    = the indexer's selected positions (indexer.h), ⊆ 0..p
//   o_h(p)  = Σ_{j∈S(p)} softmax_j(q_h · k_h(j) · qk^-1/2) v_h(j)
//   out     = o_proj concat_h o_h                         [D]
//
// The reference is the oracle for every fast path: each query row is computed independently with the same
// operation order whatever the batching, so a prefill, any chunking of it and token-by-token decode give
// bit-identical outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "model/dsa_cache.h"
#include "model/indexer.h"
#include "model/weights.h"

namespace glint {

enum class MlaForm {
  kNaive,     // materialise k_h, v_h = kv_b_proj c_j for the attended positions (the model card's equations)
  kAbsorbed,  // q̃_h = Wk_hᵀ q_h scored against c_j; ō_h = Σ p_j c_j; o_h = Wv_h ō_h (same math, reordered)
};

enum class KeySelection {
  kIndexer,  // the KPool indexer chooses (the model)
  kDense,    // every causal position 0..p (equals kIndexer while p + 1 ≤ DenseRegimeTokens(); for tests)
  kForced,   // DsaOptions::forced_positions (e.g. the fp32 path's choices replayed on a quantized path)
};

struct DsaOptions {
  MlaForm form = MlaForm::kAbsorbed;
  KeySelection selection = KeySelection::kIndexer;
  // kForced only: for each of the T new queries (query t is at position cache.tokens + t) the attended positions,
  // strictly ascending, non-empty, each within 0..position. Not owned.
  const std::vector<std::vector<int64_t>>* forced_positions = nullptr;
};

// What the selection step decided, per new query (replaced on each call).
struct DsaTrace {
  std::vector<std::vector<int64_t>> selected;  // [T][|S|] attended positions, ascending
  // [T] indexer score gap between the K-th and (K+1)-th best visible pool: +inf when every visible pool is
  // selected (dense regime), NaN when a boundary score is NaN or the indexer did not run (kDense, kForced).
  std::vector<float> margin;
};

// Runs the layer on T new tokens at positions cache.tokens .. cache.tokens + T − 1 and appends them to `cache`
// (dsa_cache.h: a view over blocks and a slot, or a cache made by NewDsaCache that grows its own memory).
// hidden: [T, D] the layer's normed input; out: [T, D] after o_proj. On error no cached value is changed. NaN
// inputs give NaN outputs but never an invalid selection.
Status DsaForward(const DsaWeights& weights, const ModelConfig& config, const float* hidden, int64_t tokens,
                  DsaCache& cache, const DsaOptions& options, float* out, DsaTrace* trace = nullptr);

// Checks every DSA (and indexer) tensor's shape against the config.
Status ValidateDsaWeights(const DsaWeights& weights, const ModelConfig& config);

}  // namespace glint
