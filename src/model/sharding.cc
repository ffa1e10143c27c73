#include "model/sharding.h"

namespace glint {
namespace {

std::vector<ExpertRange> SplitExperts(int64_t experts, int ranks) {
  std::vector<ExpertRange> ranges(ranks);
  const int64_t base = experts / ranks, extra = experts % ranks;
  int64_t next = 0;
  for (int r = 0; r < ranks; ++r) {
    ranges[r].begin = next;
    next += base + (r < extra ? 1 : 0);
    ranges[r].end = next;
  }
  return ranges;
}

std::string RangeText(const ExpertRange& range) {
  if (range.count() == 0) return "none";
  if (range.count() == 1) return std::to_string(range.begin);
  return std::to_string(range.begin) + "–" + std::to_string(range.end - 1);
}

}  // namespace

ShardPlan SingleRankPlan(const ModelConfig& config) {
  ShardPlan plan;
  plan.experts_of_rank = {ExpertRange{0, config.n_routed_experts}};
  return plan;
}

Result<ShardPlan> MakeShardPlan(const ModelConfig& config, int rank, int ranks, int tp, int ep) {
  if (ranks < 1 || rank < 0 || rank >= ranks) return InvalidArgument("rank ", rank, " of ", ranks, " is not a rank");
  if (tp < 0 || ep < 0) return InvalidArgument("--tp and --ep must be positive; got --tp ", tp, " --ep ", ep);
  if (tp == 0) tp = ep > 0 && ranks % ep == 0 ? ranks / ep : 1;
  if (ep == 0) ep = ranks % tp == 0 ? ranks / tp : 0;
  if (tp * ep != ranks) {
    return InvalidArgument("--tp ", tp, " × --ep ", ep, " must equal the number of ranks (", ranks,
                           "); e.g. --tp 1 --ep ", ranks, " (experts split, attention replicated)");
  }
  if (tp > 1) {
    return Unimplemented("tensor parallelism (--tp ", tp,
                         ") is not implemented yet; use --tp 1: attention and "
                         "dense parts replicated on every rank, routed experts split over the ",
                         ranks, " ranks");
  }
  ShardPlan plan;
  plan.rank = rank, plan.ranks = ranks, plan.tp = tp, plan.ep = ep;
  plan.experts_of_rank = SplitExperts(config.n_routed_experts, ranks);
  // The last rank with the fewest routed experts (the split gives the first ranks the extra ones).
  plan.shared_expert_rank = ranks - 1;
  return plan;
}

Result<ShardPlan> MakeShardPlan(const ModelConfig& config, const ModelParallel& parallel) {
  if (parallel.comm == nullptr || parallel.comm->size() == 1) {
    if (parallel.tp > 1 || parallel.ep > 1) {
      return InvalidArgument("--tp ", parallel.tp, " --ep ", parallel.ep,
                             " need that many ranks; this is one "
                             "process (start it with mpirun -np N, docs/distributed.md)");
    }
    return SingleRankPlan(config);
  }
  return MakeShardPlan(config, parallel.comm->rank(), parallel.comm->size(), parallel.tp, parallel.ep);
}

Table ShardPlanTable(const ShardPlan& plan, const ModelConfig& config, const std::vector<uint64_t>& weight_bytes) {
  Table table;
  table.id = "shard_plan";
  table.title = StrCat("Sharding plan: ", plan.ranks, plan.ranks == 1 ? " rank" : " ranks", ", --tp ", plan.tp,
                       " --ep ", plan.ep);
  table.columns = {{"rank", "rank"},
                   {"routed_experts", "routed experts", false},
                   {"expert_count", "count"},
                   {"shared_expert", "shared expert", false},
                   {"replicated", "replicated", false}};
  const bool with_bytes = weight_bytes.size() == static_cast<size_t>(plan.ranks);
  if (with_bytes) table.columns.push_back({"weight_bytes", "weights"});
  for (int r = 0; r < plan.ranks; ++r) {
    const ExpertRange& range = plan.experts_of_rank[r];
    std::vector<Cell> row = {IntegerCell(r), RangeText(range), IntegerCell(range.count()),
                             config.n_shared_experts == 0 ? "-" : (r == plan.shared_expert_rank ? "yes" : "no"),
                             "attention, dense MLP, mHC, norms, routers, embeddings, lm_head"};
    if (with_bytes) row.push_back(Cell(FormatBytes(static_cast<double>(weight_bytes[r])), weight_bytes[r]));
    table.AddRow(std::move(row));
  }
  table.notes.push_back(StrCat("every MoE layer and the MTP layer split alike; ", config.n_routed_experts,
                               " routed experts; the MoE output is one all-reduce (sum) per MoE layer"));
  return table;
}

std::string DescribeShard(const ShardPlan& plan, const ModelConfig& config) {
  if (!plan.distributed()) return "one rank: every weight local";
  return StrCat("expert parallel over ", plan.ranks, " ranks (--tp ", plan.tp, " --ep ", plan.ep, "): rank ", plan.rank,
                " holds routed experts ", RangeText(plan.experts()), " of ", config.n_routed_experts,
                plan.holds_shared_expert() && config.n_shared_experts > 0 ? " and the shared expert" : "",
                "; attention and dense parts replicated");
}

}  // namespace glint
