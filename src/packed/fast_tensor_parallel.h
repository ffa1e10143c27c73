// Tensor parallelism on the fast path (docs/distributed.md "The fast path"): which part of each packed tensor a
// rank holds under its ShardPlan, and the cuts themselves, so that the fast layers run unchanged on the local
// config (LocalConfig), as the reference's layers do (model/tensor_parallel.h).
//
// The fast tensors stack what the checkpoint keeps apart (fast_weights.h), so a head or column slice is one or
// more row ranges, or one column range:
//   - KDA heads [h0, h1) (d = kda_head_dim, W = H·d): qkv rows [h0·d, h1·d) of each of q, k, v; gates_in rows
//     [0, 2d) (f_a, g_a whole) and 2d + [h0, h1) (b by head); f_b, g_b, the three convs, dt_bias rows [h0·d, h1·d);
//     a_log [h0, h1); o_proj columns [h0·d, h1·d). o_norm whole.
//   - MLA heads: q_b rows (qk per head), k_absorb rows (kv_lora per head), v_up rows (v per head), o_proj columns
//     (v per head). qa_kva, the norms and the indexer whole (the latent c_j is every head's).
//   - the dense MLP, each routed expert the rank holds and the shared expert by intermediate columns [c0, c1):
//     gate_up rows [c0, c1) and F + [c0, c1), down columns [c0, c1).
// Column slices start on a multiple of the scale group (ShardPlan::column_group), so the rank's columns are whole
// groups of the one-rank matrix: its codes and scales are those of the one-rank matrix, and the activations it
// quantizes (its heads' outputs, its SwiGLU columns) fall into the same groups with the same scales.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "dist/sharding.h"
#include "io/config.h"
#include "packed/fast_weights.h"

namespace glint {

// The part of one fast tensor a rank holds: the rows of `rows`, stacked in order (empty: every row), or the columns
// [columns.begin, columns.end) of every row (end < 0: every column). Never both.
struct FastSlice {
  std::vector<IndexRange> rows;
  IndexRange columns{0, -1};
};

// Every fast tensor (by its name in the container and in FastWeightSource) that the rank holds a part of under
// `plan`; tensors not named are held whole, or not at all (another rank's experts). Empty at --tp 1.
std::map<std::string, FastSlice> FastTensorSlices(const ModelConfig& config, const ShardPlan& plan);

// Cuts the named tensors of `source` to their slices. One row range starting on a 16-row block (and ending on one,
// or at the last row) is a view of the same memory — for a mapped container, the rank's pages only, no copy; any
// other row selection and every column slice is copied into memory the source owns (a column slice is one
// contiguous run per 16-row block, so the copy reads only the rank's columns). Errors name the tensor.
Status SliceFastSource(FastWeightSource& source, const std::map<std::string, FastSlice>& slices);

// The column group a source's packed tensors allow a column split on: the least common multiple of the K-groups
// of its int8 and int4 tensors (1 when it has none).
int64_t SourceColumnGroup(const FastWeightSource& source);

// The same for a conversion with these groups (int8 `group`; `int4_group` when routed experts are int4, else 0).
int64_t ConvertColumnGroup(int64_t group, int64_t int4_group);

}  // namespace glint
