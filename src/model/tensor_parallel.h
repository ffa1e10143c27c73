// Tensor parallelism on the reference path (docs/distributed.md): the parts of the checkpoint's tensors a rank
// reads (its slices of the ShardPlan), so that the layer code runs unchanged on the local config (LocalConfig).
//
// What is cut (each only where the plan splits that sublayer; a replicated one stays whole):
//   - KDA by head h ∈ [h0, h1) (d = head_dim, width rows [h0·d, h1·d)): q/k/v_proj and their conv1d channels, the
//     f_b/g_b up-projections and dt_bias rows; b_proj rows and A_log by head; o_proj columns. f_a/g_a (the low-rank
//     down-projections, [d, D]) and o_norm (per head, shared weights) stay whole.
//   - MLA by head: q_b_proj rows (qk_head_dim per head), kv_b_proj rows (qk_head_dim + v_head_dim per head, k rows
//     then v rows), o_proj columns (v_head_dim per head). q_a, kv_a and their norms and the indexer stay whole:
//     every head reads the shared latent c_j, so splitting heads does not split kv_a or the latent cache.
//   - the dense MLP, each held routed expert and the shared expert by intermediate column c ∈ [c0, c1):
//     gate/up rows, down columns. SwiGLU is elementwise per column, so a slice's down_proj output is an exact part
//     of the sum over columns.
//   - lm_head by vocabulary rows (ShardPlan vocab_rows; lm_head_split.h), at any --tp: only rank 0's group holds
//     any, and at --tp 1 only rank 0.
// A row-sliced projection feeding a column-sliced one computes the rank's partial sum of the sublayer output; one
// all-reduce over the tp group (attention, dense MLP) or over all ranks (MoE) completes it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "dist/sharding.h"
#include "io/config.h"
#include "model/weights.h"

namespace glint {

// The region of every checkpoint tensor the rank holds a slice of (LoadOptions::regions), by tensor name; tensors
// not named are read whole (replicated) or not at all (another rank's experts). At --tp 1 only lm_head's.
std::map<std::string, TensorRegion> TensorParallelRegions(const ModelConfig& config, const ShardPlan& plan);

// fp32 values held by `weights` (every matrix and vector; empty experts count nothing).
int64_t CountWeightValues(const ModelWeights& weights);

}  // namespace glint
