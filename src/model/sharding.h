// How the weights are split over the ranks of a multi-process run (docs/distributed.md), chosen at load from the
// rank count and `--tp` / `--ep`:
//   - routed experts, expert parallel: rank r holds a contiguous range of the experts of every MoE layer and of
//     the MTP layer — ⌊E/N⌋ each, one more for the first E mod N ranks, so 12 experts on 5 ranks are 3,3,2,2,2 and
//     2 experts on 3 ranks are 1,1,0 (a rank with none still runs attention and adds zeros); never refused;
//   - the shared expert: held and computed by one rank, the last one of those with the fewest routed experts
//     (it balances the uneven split; every other rank skips its bytes);
//   - everything else (embeddings, mHC, norms, routers, attention, dense MLP, lm_head) replicated: `--tp 1`.
// The MoE output is the all-reduce of the ranks' partial sums. The ranges are contiguous and ascending, so the
// rank-order sum adds the experts in the same order as one rank (ascending id, shared expert last): the only
// change is where the partial sums are rounded (ExpertParallelTolerance in docs/distributed.md).
//
// This is the seam "which experts are local": the forward passes skip the experts a rank does not hold, and the
// loaders never read them.
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

// Routed experts [begin, end).
struct ExpertRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool Holds(int64_t expert) const { return expert >= begin && expert < end; }
  int64_t count() const { return end - begin; }
};

// The experts of an MoE layer (main or MTP) that this rank holds and computes. Default: all of them.
struct LocalExperts {
  ExpertRange routed{0, std::numeric_limits<int64_t>::max()};
  bool shared = true;
};

// A default ShardPlan is one rank holding everything.
struct ShardPlan {
  int rank = 0;
  int ranks = 1;
  int tp = 1;  // tensor-parallel degree (attention and dense parts); only 1 is implemented
  int ep = 1;  // expert-parallel degree (= ranks / tp)
  std::vector<ExpertRange> experts_of_rank;  // [ranks]
  int shared_expert_rank = 0;                // who computes the shared expert

  ExpertRange experts() const { return experts_of_rank.empty() ? LocalExperts{}.routed : experts_of_rank[rank]; }
  bool holds_shared_expert() const { return rank == shared_expert_rank; }
  bool distributed() const { return ranks > 1; }
  LocalExperts local_experts() const { return {experts(), holds_shared_expert()}; }
};

// What a model needs to run as one rank of several: the communicator of the ranks and the --tp / --ep flags; the
// model makes its ShardPlan from them and its config. Every rank calls the model's Forward / MtpForward with the
// same batch, in the same order (the collectives pair up).
struct ModelParallel {
  Communicator* comm = nullptr;  // null: one rank; else it must outlive the model
  int tp = 0, ep = 0;            // 0: not given
};
// The plan of this process: SingleRankPlan without a communicator (or with one of one rank), else MakeShardPlan
// for comm's rank and size.
Result<ShardPlan> MakeShardPlan(const ModelConfig& config, const ModelParallel& parallel);

// The plan of one process: everything local.
ShardPlan SingleRankPlan(const ModelConfig& config);

// The plan of `rank` among `ranks`; tp, ep: the --tp / --ep flags (0: not given). Refused: ranks ≠ tp · ep, and
// tp > 1 (tensor parallelism is not implemented yet; the message says so).
Result<ShardPlan> MakeShardPlan(const ModelConfig& config, int rank, int ranks, int tp, int ep);

// One row per rank: its routed experts, whether it has the shared expert, what is replicated, and (when
// `weight_bytes_of_rank` has one entry per rank) the bytes of weights it holds.
Table ShardPlanTable(const ShardPlan& plan, const ModelConfig& config,
                     const std::vector<uint64_t>& weight_bytes_of_rank = {});
// One line for logs and the capacity report: "expert parallel over 2 ranks (--tp 1 --ep 2): rank 0 holds routed
// experts 0–7 of 16 …".
std::string DescribeShard(const ShardPlan& plan, const ModelConfig& config);

}  // namespace glint
