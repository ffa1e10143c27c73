#include "dist/sharding.h"

#include <algorithm>
#include <numeric>

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

// Units of `unit` items (the last one partial) that a dimension of `total` items splits into.
int64_t Units(int64_t total, int64_t unit) { return (total + unit - 1) / unit; }

// Slice `tp_rank` of a dimension of `total` items split over tp ranks in whole units of `unit` items (⌊units/tp⌋
// each, one more for the first units mod tp; the last unit may be partial), or the whole of it when not `split`.
IndexRange SliceOf(int64_t total, bool split, int tp, int tp_rank, int64_t unit = 1) {
  if (!split) return {0, total};
  const ExpertRange units = SplitExperts(Units(total, unit), tp)[tp_rank];
  return {std::min(total, units.begin * unit), std::min(total, units.end * unit)};
}

// A dimension is split over the tp ranks when every rank gets at least one unit of it; else replicated.
bool Splits(int64_t total, int tp, int64_t unit = 1) { return tp > 1 && Units(total, unit) >= tp; }

// Heads per split unit when a head's slice of a column-split matrix is `head_columns` wide and column splits must
// land on multiples of `column_group`: the fewest heads whose columns are a whole number of groups.
int64_t HeadUnit(int64_t head_columns, int64_t column_group) {
  return column_group / std::gcd(column_group, std::max<int64_t>(1, head_columns));
}

TensorSlices WholeSlices(const ModelConfig& c) {
  return {{0, c.kda_num_heads},         {0, c.num_attention_heads},  {0, c.intermediate_size},
          {0, c.moe_intermediate_size}, {0, c.SharedIntermediate()}, {0, c.vocab_size}};
}

// Rank r of `ranks`'s lm_head rows when the vocabulary is split over all of them: blocks of 16 rows, the first
// ranks one more block.
IndexRange VocabBlocksOf(int64_t vocab, int ranks, int r) {
  const IndexRange blocks = SplitExperts((vocab + kLmHeadRowBlock - 1) / kLmHeadRowBlock, ranks)[r];
  return {blocks.begin * kLmHeadRowBlock, std::min(vocab, blocks.end * kLmHeadRowBlock)};
}

// Rank r's lm_head rows: blocks of 16 rows over group 0's tp ranks when split; else rank 0 holds all.
IndexRange VocabRowsOf(int64_t vocab, bool split, int tp, int r) {
  if (r >= tp) return {0, 0};  // not in rank 0's group: only rank 0 samples
  if (!split) return r == 0 ? IndexRange{0, vocab} : IndexRange{0, 0};
  return VocabBlocksOf(vocab, tp, r);
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
  plan.slices_of_rank = {WholeSlices(config)};
  return plan;
}

ModelConfig LocalConfig(const ModelConfig& config, const ShardPlan& plan) {
  ModelConfig local = config;
  if (plan.slices_of_rank.empty()) return local;
  const TensorSlices& s = plan.slices();
  local.kda_num_heads = s.kda_heads.count();
  local.num_attention_heads = s.mla_heads.count();
  local.intermediate_size = s.mlp_columns.count();
  local.moe_intermediate_size = s.expert_columns.count();
  return local;
}

Result<ShardPlan> MakeShardPlan(const ModelConfig& config, int rank, int ranks, int tp, int ep, int64_t column_group,
                                bool whole_experts) {
  if (column_group < 1) return InvalidArgument("a column group of ", column_group, " columns; expected ≥ 1");
  if (ranks < 1 || rank < 0 || rank >= ranks) return InvalidArgument("rank ", rank, " of ", ranks, " is not a rank");
  if (tp < 0 || ep < 0) return InvalidArgument("--tp and --ep must be positive; got --tp ", tp, " --ep ", ep);
  if (tp == 0) tp = ep > 0 && ranks % ep == 0 ? ranks / ep : 1;
  if (ep == 0) ep = ranks % tp == 0 ? ranks / tp : 0;
  if (tp * ep != ranks) {
    return InvalidArgument("--tp ", tp, " × --ep ", ep, " must equal the number of ranks (", ranks,
                           "); e.g. --tp 1 --ep ", ranks, " (experts split, attention replicated)");
  }
  ShardPlan plan;
  plan.rank = rank, plan.ranks = ranks, plan.tp = tp, plan.ep = ep;
  plan.column_group = column_group;
  const int64_t kda_unit = HeadUnit(config.kda_head_dim, column_group);  // KDA o_proj: kda_head_dim columns a head
  const int64_t mla_unit = HeadUnit(config.v_head_dim, column_group);    // MLA o_proj: v_head_dim columns a head
  plan.kda_split = Splits(config.kda_num_heads, tp, kda_unit);
  plan.mla_split = Splits(config.num_attention_heads, tp, mla_unit);
  plan.mlp_split = Splits(config.intermediate_size, tp, column_group);
  plan.experts_by_columns = !whole_experts && Splits(config.moe_intermediate_size, tp, column_group);
  plan.vocab_split = Splits((config.vocab_size + kLmHeadRowBlock - 1) / kLmHeadRowBlock, tp);
  if (plan.experts_by_columns) {
    // By id over the groups, by columns within a group; the shared expert on the last group (the split gives the
    // first groups the extra experts).
    const std::vector<ExpertRange> of_group = SplitExperts(config.n_routed_experts, ep);
    for (int r = 0; r < ranks; ++r) plan.experts_of_rank.push_back(of_group[r / tp]);
    plan.shared_expert_rank = (ep - 1) * tp;
  } else {
    // tp 1, experts narrower than tp, or whole experts asked for: by id over every rank, the shared one on the
    // last rank.
    plan.experts_of_rank = SplitExperts(config.n_routed_experts, ranks);
    plan.shared_expert_rank = ranks - 1;
  }
  for (int r = 0; r < ranks; ++r) {
    const int t = r % tp;
    plan.slices_of_rank.push_back({SliceOf(config.kda_num_heads, plan.kda_split, tp, t, kda_unit),
                                   SliceOf(config.num_attention_heads, plan.mla_split, tp, t, mla_unit),
                                   SliceOf(config.intermediate_size, plan.mlp_split, tp, t, column_group),
                                   SliceOf(config.moe_intermediate_size, plan.experts_by_columns, tp, t, column_group),
                                   SliceOf(config.SharedIntermediate(), plan.experts_by_columns, tp, t, column_group),
                                   VocabRowsOf(config.vocab_size, plan.vocab_split, tp, r)});
  }
  return plan;
}

Result<ShardPlan> MakeShardPlan(const ModelConfig& config, const ModelParallel& parallel) {
  if (parallel.comm == nullptr || parallel.comm->size() == 1) {
    if (parallel.tp > 1 || parallel.ep > 1) {
      return InvalidArgument("--tp ", parallel.tp, " --ep ", parallel.ep,
                             " need that many ranks; this is one "
                             "process (start it with mpirun -np N, docs/distributed.md)");
    }
    if (parallel.dp_attention) {
      return InvalidArgument(
          "--dp-attention spreads sequences over several ranks; this is one process (start it "
          "with mpirun -np N --ep N, docs/distributed.md)");
    }
    return SingleRankPlan(config);
  }
  GLINT_ASSIGN_OR_RETURN(ShardPlan plan,
                         MakeShardPlan(config, parallel.comm->rank(), parallel.comm->size(), parallel.tp, parallel.ep,
                                       parallel.column_group, parallel.whole_experts));
  if (parallel.dp_attention && plan.tp > 1) {
    return InvalidArgument("--dp-attention runs whole attention on each sequence's rank: it needs --tp 1 (got --tp ",
                           plan.tp, "); use --ep ", plan.ranks, " --dp-attention");
  }
  plan.dp_attention = parallel.dp_attention;
  // The vocabulary split over every rank needs every final row on every rank: --tp 1 with attention replicated.
  if (parallel.head_split_rows > 0 && plan.tp == 1 && !plan.dp_attention &&
      (config.vocab_size + kLmHeadRowBlock - 1) / kLmHeadRowBlock >= plan.ranks) {
    plan.head_split_rows = parallel.head_split_rows;
    for (int r = 0; r < plan.ranks; ++r)
      plan.head_rows_of_rank.push_back(VocabBlocksOf(config.vocab_size, plan.ranks, r));
  }
  return plan;
}

namespace {

// "0–1 of 3" for a split dimension, "all 3" for a replicated one.
std::string SliceText(const IndexRange& range, int64_t total, bool split) {
  if (!split) return StrCat("all ", total);
  return StrCat(RangeText(range), " of ", total);
}

// "0–159 of 320", "all 320" or "none".
std::string VocabRowsText(const IndexRange& rows, int64_t vocab) {
  if (rows.count() == 0) return "none";
  return rows.count() == vocab ? StrCat("all ", vocab) : StrCat(RangeText(rows), " of ", vocab);
}

// What every rank holds a whole copy of.
std::string ReplicatedText(const ShardPlan& plan) {
  std::string text = "embeddings, mHC, norms, routers";
  if (plan.dp_attention) return text + ", attention and dense MLP weights (each rank runs them for its own sequences)";
  if (plan.tp == 1) return text + ", attention, dense MLP";
  text += ", MLA kv_a, indexer";
  if (!plan.kda_split) text += ", KDA";
  if (!plan.mla_split) text += ", MLA";
  if (!plan.mlp_split) text += ", dense MLP";
  return text;
}

}  // namespace

Table ShardPlanTable(const ShardPlan& plan, const ModelConfig& config, const std::vector<uint64_t>& weight_bytes) {
  Table table;
  table.id = "shard_plan";
  table.title = StrCat("Sharding plan: ", plan.ranks, plan.ranks == 1 ? " rank" : " ranks", ", --tp ", plan.tp,
                       " --ep ", plan.ep);
  table.columns = {{"rank", "rank"},
                   {"tp_rank", "tp rank"},
                   {"routed_experts", "routed experts", false},
                   {"expert_count", "count"},
                   {"expert_columns", "expert columns", false},
                   {"shared_expert", "shared expert", false},
                   {"kda_heads", "KDA heads", false},
                   {"mla_heads", "MLA heads", false},
                   {"mlp_columns", "dense MLP columns", false},
                   {"vocab_rows", "lm_head rows", false}};
  const bool with_bytes = weight_bytes.size() == static_cast<size_t>(plan.ranks);
  if (with_bytes) table.columns.push_back({"weight_bytes", "weights"});
  for (int r = 0; r < plan.ranks; ++r) {
    const ExpertRange& range = plan.experts_of_rank[r];
    const TensorSlices& s = plan.slices_of_rank[r];
    std::vector<Cell> row = {IntegerCell(r),
                             IntegerCell(r % plan.tp),
                             RangeText(range),
                             IntegerCell(range.count()),
                             SliceText(s.expert_columns, config.moe_intermediate_size, plan.experts_by_columns),
                             config.n_shared_experts == 0 ? "-" : (plan.holds_shared_expert(r) ? "yes" : "no"),
                             SliceText(s.kda_heads, config.kda_num_heads, plan.kda_split),
                             SliceText(s.mla_heads, config.num_attention_heads, plan.mla_split),
                             SliceText(s.mlp_columns, config.intermediate_size, plan.mlp_split),
                             VocabRowsText(s.vocab_rows, config.vocab_size)};
    if (with_bytes) row.push_back(Cell(FormatBytes(static_cast<double>(weight_bytes[r])), weight_bytes[r]));
    table.AddRow(std::move(row));
  }
  table.notes.push_back(StrCat("every MoE layer and the MTP layer split alike; ", config.n_routed_experts,
                               plan.dp_attention
                                   ? " routed experts; --dp-attention: each rank runs attention for its own "
                                     "sequences, and each MoE layer sends their rows to the ranks holding their "
                                     "experts and back (two all-to-alls)"
                                   : " routed experts; the MoE output is one all-reduce (sum) per MoE layer over all "
                                     "ranks"));
  if (plan.tp > 1) {
    table.notes.push_back(StrCat("rank r is tp rank r % ", plan.tp, " of group r / ", plan.tp,
                                 "; a split KDA, MLA or dense MLP sublayer ends with one all-reduce over its group"));
  }
  if (plan.tp > 1 && plan.column_group > 1) {
    table.notes.push_back(
        StrCat("column splits in whole scale groups of ", plan.column_group,
               " columns (heads in whole groups of o_proj columns); fewer units than --tp: replicated"));
  }
  table.notes.push_back(StrCat("lm_head: ",
                               plan.vocab_split ? StrCat("split by vocabulary over the ", plan.tp,
                                                         " ranks of rank 0's group, which gathers the logit rows "
                                                         "sampling needs")
                                                : "on rank 0 only (it samples)",
                               plan.head_split() ? "" : "; the other ranks hold none and skip it"));
  if (plan.head_split()) {
    table.notes.push_back(StrCat("lm_head for passes of at most ", plan.head_split_rows,
                                 " logit rows (--lm-head-split-rows): split by vocabulary over all ", plan.ranks,
                                 " ranks, rank 0 gathers the columns; each other rank holds its 1/", plan.ranks,
                                 " of the rows"));
  }
  table.notes.push_back("replicated on every rank: " + ReplicatedText(plan));
  return table;
}

std::string DescribeShard(const ShardPlan& plan, const ModelConfig& config) {
  if (!plan.distributed()) return "one rank: every weight local";
  const TensorSlices& s = plan.slices();
  std::string text = StrCat(plan.tp == 1   ? "expert parallel"
                            : plan.ep == 1 ? "tensor parallel"
                                           : "tensor and expert parallel",
                            " over ", plan.ranks, " ranks (--tp ", plan.tp, " --ep ", plan.ep, "): rank ", plan.rank,
                            " holds routed experts ", RangeText(plan.experts()), " of ", config.n_routed_experts);
  if (plan.experts_by_columns) text += StrCat(" (columns ", RangeText(s.expert_columns), ")");
  if (plan.tp > 1 && !plan.experts_by_columns) text += " (whole experts, by id over every rank)";
  if (plan.holds_shared_expert() && config.n_shared_experts > 0) text += " and the shared expert";
  if (plan.dp_attention) return text + "; attention data-parallel (--dp-attention): only its own sequences' caches";
  if (plan.tp == 1) return text + "; attention and dense parts replicated";
  return StrCat(text, "; KDA heads ", SliceText(s.kda_heads, config.kda_num_heads, plan.kda_split), ", MLA heads ",
                SliceText(s.mla_heads, config.num_attention_heads, plan.mla_split), ", dense MLP columns ",
                SliceText(s.mlp_columns, config.intermediate_size, plan.mlp_split));
}

}  // namespace glint
