// How the weights are split over the ranks of a multi-process run (docs/distributed.md), chosen at load from the
// rank count and `--tp` / `--ep`. Rank r of N = tp × ep is tensor-parallel rank r % tp of expert-parallel group
// r / tp.
//   - routed experts: split by id over the ep groups in contiguous ranges — ⌊E/ep⌋ each, one more for the first
//     E mod ep groups, so 12 experts on 5 are 3,3,2,2,2 and 2 on 3 are 1,1,0 (a rank with none still runs attention
//     and adds zeros); within a group every expert is split by intermediate columns over the tp ranks, so at
//     --tp N --ep 1 every rank holds 1/N of every expert. Never refused;
//   - the shared expert: held by the last group (one of those with the fewest routed experts), split by columns
//     over its tp ranks; the other groups skip its bytes;
//   - tensor parallel (tp > 1): KDA by head, MLA by head (q_b, kv_b rows; o_proj columns), the dense MLP by
//     intermediate columns — each split over the tp ranks of a group, ⌊n/tp⌋ each and one more for the first
//     n mod tp; a dimension smaller than tp (2 heads on 3 ranks) is replicated instead, and then needs no
//     collective;
//   - lm_head by vocabulary over the tp ranks of rank 0's group (group 0) only, since only rank 0 samples: by
//     blocks of 16 rows (the fast path's int8 row block, so a slice is a byte range of the packed matrix), ⌊B/tp⌋
//     blocks each and one more for the first B mod tp; the other groups hold none of it and skip it. At --tp 1 (or
//     fewer blocks than tp) rank 0 holds it whole and no other rank holds any;
//   - everything else (embeddings, mHC, norms, routers, kv_a, the indexer) replicated.
// A split attention or dense MLP ends with one all-reduce over the tp group; the MoE output is one all-reduce of
// every rank's partial sum (routed and shared) over all ranks. Ranges are contiguous and ascending, so the
// rank-order sums add in the order of one rank; the only change is where partial sums are rounded
// (docs/distributed.md "Tolerance").
//
// This is the seam "which weights are local": the forward passes run on the local config (LocalConfig: local head
// counts and widths) and skip the experts a rank does not hold, and the loaders never read them.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/table.h"
#include "dist/communicator.h"
#include "io/config.h"

namespace glint {

// lm_head is split by blocks of this many rows: the fast path's int8 row block (kInt8RowBlock,
// quant/int8_matrix.h), so that a rank's rows are one contiguous byte range of the packed matrix.
inline constexpr int64_t kLmHeadRowBlock = 16;

// Routed experts [begin, end).
struct ExpertRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool Holds(int64_t expert) const { return expert >= begin && expert < end; }
  int64_t count() const { return end - begin; }
};

// A range of heads or intermediate columns [begin, end) of one tensor-parallel slice.
using IndexRange = ExpertRange;

// The experts of an MoE layer (main or MTP) that this rank holds and computes. Default: all of them.
struct LocalExperts {
  ExpertRange routed{0, std::numeric_limits<int64_t>::max()};
  bool shared = true;
};

// One rank's tensor-parallel slices. A range covering the whole dimension means "replicated" (tp 1, or a
// dimension smaller than tp).
struct TensorSlices {
  IndexRange kda_heads;       // of kda_num_heads
  IndexRange mla_heads;       // of num_attention_heads (trunk DSA layers and the MTP layer)
  IndexRange mlp_columns;     // of intermediate_size (dense MLP)
  IndexRange expert_columns;  // of moe_intermediate_size (every routed expert this rank holds)
  IndexRange shared_columns;  // of moe_intermediate_size × n_shared_experts (the shared expert, when held)
  IndexRange vocab_rows;      // of vocab_size: the lm_head rows (logit columns) this rank computes; may be empty
};

// A default ShardPlan is one rank holding everything.
struct ShardPlan {
  int rank = 0;
  int ranks = 1;
  int tp = 1;  // tensor-parallel degree: ranks per group sharing one copy of attention and the dense parts
  int ep = 1;  // expert-parallel degree: groups the routed experts are split over (= ranks / tp)
  std::vector<ExpertRange> experts_of_rank;  // [ranks]; the same for the tp ranks of a group
  std::vector<TensorSlices> slices_of_rank;  // [ranks]; the same for the tp-th ranks of every group
  // Which sublayers are split over the tp ranks (false: replicated, no collective).
  bool kda_split = false, mla_split = false, mlp_split = false;
  // Routed and shared experts split by columns over the tp ranks of a group (false at tp 1, when
  // moe_intermediate_size < tp, or with ModelParallel::whole_experts: then the experts are split by id over all
  // ranks and one rank holds the shared).
  bool experts_by_columns = false;
  // lm_head split by vocabulary over group 0's tp ranks, whose slices rank 0 gathers (false: rank 0 holds it).
  bool vocab_split = false;
  int shared_expert_rank = 0;  // the shared expert's holder when !experts_by_columns; else the first of its group
  // Column splits land on multiples of this many columns (1: any column, the reference; the fast path's int8 scale
  // group, so that a rank's slice of a column-split int8 matrix holds whole groups: see MakeShardPlan).
  int64_t column_group = 1;
  // --dp-attention (docs/distributed.md "Attention data-parallel"): each rank runs attention, and holds the caches,
  // only for the sequences assigned to it (SequenceState::attention_rank); MoE rows are exchanged all-to-all.
  bool dp_attention = false;
  // --lm-head-split-rows (docs/distributed.md "lm_head"): at --tp 1 over several ranks without --dp-attention
  // (attention replicated: every rank holds every final row) a pass with at most this many rows that want logits
  // computes lm_head split by vocabulary over all ranks — rank r its rows head_rows_of_rank[r], in 16-row blocks —
  // and rank 0 gathers the columns; a pass with more computes it whole on rank 0, which keeps all of lm_head.
  // 0, or empty head_rows_of_rank: never split. Pays while the gather's rows × V × 4 bytes over the link cost less
  // than reading (N − 1)/N of lm_head.
  int64_t head_split_rows = 0;
  std::vector<IndexRange> head_rows_of_rank;  // [ranks] when the split is on

  int tp_rank() const { return rank % tp; }
  int ep_rank() const { return rank / tp; }
  ExpertRange experts() const { return experts_of_rank.empty() ? LocalExperts{}.routed : experts_of_rank[rank]; }
  bool holds_shared_expert(int r) const {
    return experts_by_columns ? r / tp == shared_expert_rank / tp : r == shared_expert_rank;
  }
  bool holds_shared_expert() const { return holds_shared_expert(rank); }
  bool distributed() const { return ranks > 1; }
  bool tensor_parallel() const { return tp > 1; }
  LocalExperts local_experts() const { return {experts(), holds_shared_expert()}; }
  const TensorSlices& slices() const { return slices_of_rank[rank]; }
  // Whether this rank computes logits at all (some lm_head rows), and whether it receives the whole rows.
  bool computes_logits() const { return slices_of_rank.empty() || slices().vocab_rows.count() > 0; }
  bool receives_logits() const { return rank == 0; }
  bool head_split() const { return !head_rows_of_rank.empty(); }
  // Whether a pass with `logit_rows` rows wanting logits splits lm_head over every rank (all ranks agree: they see
  // the same batch).
  bool splits_head(int64_t logit_rows) const { return head_split() && logit_rows <= head_split_rows; }
};

// What a model needs to run as one rank of several: the communicator of the ranks and the --tp / --ep flags; the
// model makes its ShardPlan from them and its config. Every rank calls the model's Forward / MtpForward with the
// same batch, in the same order (the collectives pair up).
struct ModelParallel {
  Communicator* comm = nullptr;  // null: one rank; else it must outlive the model
  int tp = 0, ep = 0;            // 0: not given
  int64_t column_group = 1;      // ShardPlan::column_group (the fast path sets its int8 scale group)
  // Routed experts whole, by id over every rank, even at tp > 1 (ShardPlan::experts_by_columns false): the expert
  // cache of --expert-memory reads and holds whole experts, one container extent each (docs/distributed.md).
  bool whole_experts = false;
  // --dp-attention (ShardPlan::dp_attention): needs several ranks and --tp 1.
  bool dp_attention = false;
  // --lm-head-split-rows (ShardPlan::head_split_rows): used at --tp 1 without --dp-attention; 0: off.
  int64_t head_split_rows = 0;
};
// The plan of this process: SingleRankPlan without a communicator (or with one of one rank), else MakeShardPlan
// for comm's rank and size.
Result<ShardPlan> MakeShardPlan(const ModelConfig& config, const ModelParallel& parallel);

// The plan of one process: everything local.
ShardPlan SingleRankPlan(const ModelConfig& config);

// The plan of `rank` among `ranks`; tp, ep: the --tp / --ep flags (0: not given; default --tp 1). Refused only
// when ranks ≠ tp · ep.
//
// column_group g (≥ 1): every column split lands on a multiple of g columns. The intermediate dimensions (dense
// MLP, routed and shared experts) are split in whole units of g columns (⌈n/g⌉ units, the last one partial when g
// does not divide n; ⌊units/tp⌋ each, one more for the first units mod tp); a head set in whole units of
// g / gcd(g, head columns) heads (head columns: KDA kda_head_dim, MLA v_head_dim, o_proj's input per head). A
// dimension with fewer units than tp is replicated. At g = 1 (the reference) a unit is one column or one head.
// `whole_experts`: ModelParallel::whole_experts.
Result<ShardPlan> MakeShardPlan(const ModelConfig& config, int rank, int ranks, int tp, int ep,
                                int64_t column_group = 1, bool whole_experts = false);

// One row per rank: its routed experts, whether it has the shared expert, what is replicated, and (when
// `weight_bytes_of_rank` has one entry per rank) the bytes of weights it holds.
Table ShardPlanTable(const ShardPlan& plan, const ModelConfig& config,
                     const std::vector<uint64_t>& weight_bytes_of_rank = {});
// The config of this rank's shard: the head counts and widths of its tensor-parallel slices (kda_num_heads,
// num_attention_heads, intermediate_size, moe_intermediate_size); the layer code runs on it unchanged. With
// n_shared_experts > 1 the shared expert's width is not moe_intermediate_size × n_shared_experts: the layer code
// reads it from the weights' shapes. The caches are laid out for it (KDA state and conv windows by local head).
ModelConfig LocalConfig(const ModelConfig& config, const ShardPlan& plan);

// One line for logs and the capacity report: "expert parallel over 2 ranks (--tp 1 --ep 2): rank 0 holds routed
// experts 0–7 of 16 …".
std::string DescribeShard(const ShardPlan& plan, const ModelConfig& config);

}  // namespace glint
