#include "plan/collectives.h"

#include <algorithm>
#include <cmath>

namespace glint::plan {
namespace {

constexpr uint64_t kFloat = 4;           // activations and logits cross the ranks as fp32
constexpr int64_t kLmHeadRowBlock = 16;  // lm_head is split by 16-row blocks (dist/sharding.h; plan/ cannot see it)

// Bytes of rank 0's plans (lockstep/lockstep.cc's wire format, field by field): a Forward plan is the op, the options
// (3 bytes and a count of forced positions) and the forced-choices flag and the entry count (21 bytes); per entry
// its state (an owned sequence: kind, key, attention rank, positions, MTP pairs — 29 bytes; a bound one adds its pools
// id, its block table and its slot: 24 + 4 per block), its tokens (8 + 4 each), logits wanted (a 4-byte enum),
// want-hidden, whether it streams its layers (an export: --role prefill), the image rows' positions and values
// (8 + 4 each, 8 + 4 per float: none counted here), the checkpoint count and the rollback count (31), and per rollback
// snapshot its position and pointer (24 — one per drafted token of a verification: none counted here). An MTP batch: 21
// bytes, and per entry its state, its hidden input named in the last Forward's outputs (33) or, in a chained draft's
// call, inline (9 + 4 · D), its next tokens (8 + 4 each), logits wanted (4) and its image rows' positions and values (8
// + 4 each, 8 + 4 per float: none counted here). Not counted: pool copies and releases between the steps (≈ 40 and 9
// bytes each).
uint64_t ForwardPlanBytes(const StepShape& s) {
  const uint64_t state = 29 + (s.blocks_per_entry > 0 ? 24 + 4 * s.blocks_per_entry : 0);
  return 21 + s.entries * (state + 8 + 31) + 4 * s.rows;
}
uint64_t MtpPlanBytes(const StepShape& s, int64_t hidden_size) {
  const uint64_t state = 29 + (s.blocks_per_entry > 0 ? 24 + 4 * s.blocks_per_entry : 0);
  const uint64_t first = 21 + s.mtp_entries * (state + 33 + 8 + 4 + 16) + 4 * s.mtp_rows;
  const uint64_t chained = 21 + s.mtp_entries * (state + 9 + 4 * hidden_size + 8 + 4 + 16) + 4 * s.mtp_entries;
  return first + s.mtp_chain * chained;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The rows wanting logits in each of a step's passes: when every row wants them, each pass's own rows (full passes,
// then the rest: exact); in one pass, all of them (exact); else spread evenly over the last min(passes, logit rows)
// passes (a prefill's last row lies in its last pass: exact for one sequence).
std::vector<int64_t> LogitRowsPerPass(const StepShape& s, int64_t passes) {
  std::vector<int64_t> per_pass(passes, 0);
  if (passes == 0 || s.logit_rows == 0) return per_pass;
  if (s.logit_rows == s.rows) {
    for (int64_t p = 0; p < passes; ++p) per_pass[p] = std::min(s.pass_rows, s.rows - p * s.pass_rows);
    return per_pass;
  }
  const int64_t holding = std::min(passes, s.logit_rows);
  for (int64_t i = 0; i < holding; ++i) {
    per_pass[passes - holding + i] = s.logit_rows / holding + (i < s.logit_rows % holding ? 1 : 0);
  }
  return per_pass;
}

int CeilLog2(int n) {
  int steps = 0;
  while ((1 << steps) < n) ++steps;
  return steps;
}

}  // namespace

Status ValidateLayout(const ParallelLayout& layout) {
  if (layout.ranks < 1 || layout.ranks > 4096)
    return InvalidArgument("--ranks ", layout.ranks, " must be in [1, 4096]");
  if (layout.tp < 1 || layout.ranks % layout.tp != 0) {
    return InvalidArgument("--tp ", layout.tp, " must be ≥ 1 and divide --ranks ", layout.ranks,
                           " (--tp × --ep = ranks)");
  }
  if (layout.dp_attention && layout.tp != 1) return InvalidArgument("--dp-attention needs --tp 1");
  return Status::Ok();
}

const char* CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kBroadcast:
      return "broadcast";
    case CollectiveOp::kAllReduce:
      return "all-reduce";
    case CollectiveOp::kAllGather:
      return "all-gather";
    case CollectiveOp::kGather:
      return "gather";
    case CollectiveOp::kAllToAll:
      return "all-to-all";
  }
  return "collective";
}

uint64_t CollectiveLine::BytesSent(bool root) const {
  if (op == CollectiveOp::kAllToAll) return payload;
  if (op == CollectiveOp::kBroadcast) return root ? payload : 0;
  if (op == CollectiveOp::kGather) return root || group < 2 ? 0 : payload / static_cast<uint64_t>(group - 1);
  return payload;
}

uint64_t CollectiveLine::BytesReceived(bool root) const {
  if (op == CollectiveOp::kAllToAll) return received;
  if (op == CollectiveOp::kBroadcast) return root ? 0 : payload;
  if (op == CollectiveOp::kGather) return root ? payload : 0;
  return payload * static_cast<uint64_t>(group - 1);
}

namespace {

// The probability that a row routed to k of E experts uniformly has one among the `held` experts of a rank:
// 1 − C(E − held, k) / C(E, k).
double HoldsOneOf(int64_t experts, int64_t held, int64_t k) {
  double none = 1;
  for (int64_t i = 0; i < k; ++i) none *= std::max<double>(0, static_cast<double>(experts - held - i)) / (experts - i);
  return 1 - none;
}

// --dp-attention's collectives (see CollectiveSeconds in the header): the plan broadcast, then per pass 2
// all-to-alls per MoE layer and one for the head.
std::vector<CollectiveLine> DpAttentionCollectives(const ModelConfig& c, int n, const StepShape& s,
                                                   uint64_t plan_bytes) {
  std::vector<CollectiveLine> lines;
  lines.push_back({"plan broadcast (Forward)", CollectiveOp::kBroadcast, n, 1, plan_bytes, true});
  if (s.rows <= 0) return lines;
  const int64_t entries = std::max<int64_t>(1, s.entries), own_entries = CeilDiv(entries, n);
  const int64_t own_rows = CeilDiv(s.rows * own_entries, entries), other_rows = s.rows - own_rows;
  const int64_t own_logits = CeilDiv(s.logit_rows * own_entries, entries), other_logits = s.logit_rows - own_logits;
  const int64_t passes = CeilDiv(own_rows, std::max<int64_t>(1, s.pass_rows));
  // Expected destinations of a row among the other ranks (experts split by id as SplitExperts does, the shared
  // expert on the last rank), and the chance that another rank's row comes to rank 0.
  const int64_t e = c.n_routed_experts, k = c.num_experts_per_tok;
  double to_others = 0, to_rank0 = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t held = e / n + (r < e % n ? 1 : 0);
    const double p = (c.n_shared_experts > 0 && r == n - 1) ? 1.0 : HoldsOneOf(e, held, k);
    (r == 0 ? to_rank0 : to_others) += p;
  }
  const double record = static_cast<double>(k * 8 + c.hidden_size * kFloat), partial = c.hidden_size * kFloat;
  const double sent = own_rows * to_others, arrived = other_rows * to_rank0;  // records, per MoE layer
  const int64_t moe = c.NumLayersOf(MlpKind::kMoe);
  auto bytes = [&](double records, double each) { return static_cast<uint64_t>(std::llround(moe * records * each)); };
  lines.push_back({"MoE rows to their experts' ranks (all-to-all)", CollectiveOp::kAllToAll, n, passes * moe,
                   bytes(sent, record), true, bytes(arrived, record)});
  lines.push_back({"MoE partial sums back (all-to-all)", CollectiveOp::kAllToAll, n, passes * moe,
                   bytes(arrived, partial), true, bytes(sent, partial)});
  lines.push_back({"rows wanting logits to rank 0 (all-to-all)", CollectiveOp::kAllToAll, n, passes, 0, false,
                   static_cast<uint64_t>(other_logits) * (8 + c.hidden_size * kFloat)});
  return lines;
}

}  // namespace

std::vector<CollectiveLine> CollectivesPerStep(const ModelConfig& c, const ParallelLayout& layout, const StepShape& s) {
  std::vector<CollectiveLine> lines;
  if (layout.ranks <= 1) return lines;
  if (layout.dp_attention) return DpAttentionCollectives(c, layout.ranks, s, ForwardPlanBytes(s));
  const int n = layout.ranks, tp = layout.tp;
  const int64_t passes = s.rows > 0 ? CeilDiv(s.rows, std::max<int64_t>(1, s.pass_rows)) : 0;
  const int64_t trunk = c.num_hidden_layers, moe = c.NumLayersOf(MlpKind::kMoe), dense = c.NumLayersOf(MlpKind::kDense);
  const uint64_t row_bytes = static_cast<uint64_t>(c.hidden_size) * kFloat;
  const uint64_t moe_row_bytes = row_bytes + (s.expert_memory ? kFloat : 0);
  // What rank 0 receives per logit row: the columns of the other ranks of its group (16-row blocks, rank 0 first
  // with one more block when they do not divide: dist/sharding.h).
  const int64_t blocks = CeilDiv(c.vocab_size, kLmHeadRowBlock);
  const int64_t own = std::min<int64_t>(c.vocab_size, (blocks / tp + (blocks % tp > 0 ? 1 : 0)) * kLmHeadRowBlock);
  const uint64_t vocab_part = static_cast<uint64_t>(blocks >= tp ? c.vocab_size - own : 0) * kFloat;
  // --tp 1 with the vocabulary split over all n ranks for small passes: rank 0 receives V − its share per row.
  const bool head_split = tp == 1 && layout.head_split_rows > 0 && blocks >= n;
  const int64_t head_own = std::min<int64_t>(c.vocab_size, (blocks / n + (blocks % n > 0 ? 1 : 0)) * kLmHeadRowBlock);
  const uint64_t head_part = static_cast<uint64_t>(c.vocab_size - head_own) * kFloat;
  const auto splits = [&](int64_t logit_rows) { return head_split && logit_rows <= layout.head_split_rows; };
  auto add = [&](std::string what, CollectiveOp op, int group, int64_t calls, uint64_t payload, bool estimated) {
    if (calls > 0) lines.push_back({std::move(what), op, group, calls, payload, estimated});
  };
  add("plan broadcast (Forward)", CollectiveOp::kBroadcast, n, 1, ForwardPlanBytes(s), true);
  if (tp > 1) {
    add("attention all-reduce (TP group)", CollectiveOp::kAllReduce, tp, passes * trunk, trunk * s.rows * row_bytes,
        false);
    add("dense MLP all-reduce (TP group)", CollectiveOp::kAllReduce, tp, passes * dense, dense * s.rows * row_bytes,
        false);
  }
  add("MoE all-reduce (all ranks)", CollectiveOp::kAllReduce, n, passes * moe, moe * s.rows * moe_row_bytes, false);
  if (tp > 1 && vocab_part > 0) {  // a pass without a row that wants logits skips lm_head
    add("lm_head gather to rank 0 (its TP group)", CollectiveOp::kGather, tp, std::min(passes, s.logit_rows),
        s.logit_rows * vocab_part, false);
  }
  if (head_split) {  // each pass decides alone
    int64_t calls = 0, rows = 0;
    for (const int64_t pass_logit_rows : LogitRowsPerPass(s, passes)) {
      if (pass_logit_rows > 0 && splits(pass_logit_rows)) ++calls, rows += pass_logit_rows;
    }
    add("lm_head gather to rank 0 (all ranks, --lm-head-split-rows)", CollectiveOp::kGather, n, calls, rows * head_part,
        false);
  }
  if (c.HasMtp() && s.mtp_entries > 0) {
    // FastModel::MtpForwardBatch runs every entry's pairs in one pass: one collective per sublayer per call; the
    // first call over the step's pairs, then one call of one pair per entry per chained draft.
    const int64_t calls = 1 + s.mtp_chain, rows = s.mtp_rows + s.mtp_chain * s.mtp_entries;
    const int64_t logit_rows = s.mtp_logit_rows + s.mtp_chain * s.mtp_entries;
    add("plan broadcast (MTP batch)", CollectiveOp::kBroadcast, n, calls, MtpPlanBytes(s, c.hidden_size), true);
    if (tp > 1) {
      add("MTP attention all-reduce (TP group)", CollectiveOp::kAllReduce, tp, calls, rows * row_bytes, false);
    }
    add("MTP MoE all-reduce (all ranks)", CollectiveOp::kAllReduce, n, calls, rows * moe_row_bytes, false);
    if (tp > 1 && vocab_part > 0) {
      add("MTP lm_head gather to rank 0 (its TP group)", CollectiveOp::kGather, tp,
          (s.mtp_logit_rows > 0 ? 1 : 0) + s.mtp_chain, logit_rows * vocab_part, false);
    }
    // Each MTP call decides alone: the first over the step's draft rows, each chained one over one row per entry.
    const int64_t first_split = s.mtp_logit_rows > 0 && splits(s.mtp_logit_rows) ? 1 : 0;
    const int64_t chained_split = splits(s.mtp_entries) ? s.mtp_chain : 0;
    add("MTP lm_head gather to rank 0 (all ranks, --lm-head-split-rows)", CollectiveOp::kGather, n,
        first_split + chained_split, (first_split * s.mtp_logit_rows + chained_split * s.mtp_entries) * head_part,
        false);
  }
  return lines;
}

CollectiveTime CollectiveSeconds(const CollectiveLine& line, const Network& network) {
  const double depth = CeilLog2(line.group);
  CollectiveTime time;
  if (line.op == CollectiveOp::kAllToAll) {
    time.latency = static_cast<double>(line.calls) * 2 * (line.group - 1) * network.latency;
    const double bytes = static_cast<double>(std::max(line.payload, line.received));
    time.bandwidth = network.bandwidth > 0 ? bytes / network.bandwidth : 0;
    return time;
  }
  time.latency = static_cast<double>(line.calls) * depth * network.latency;
  // A gather's root receives every part over its own link: its bytes, not a tree's.
  const double bytes = line.op == CollectiveOp::kBroadcast ? depth * static_cast<double>(line.payload)
                                                           : static_cast<double>(line.BytesReceived(true));
  time.bandwidth = network.bandwidth > 0 ? bytes / network.bandwidth : 0;
  return time;
}

CollectiveTotals SumCollectives(const std::vector<CollectiveLine>& lines, const Network& network) {
  CollectiveTotals totals;
  for (const CollectiveLine& line : lines) {
    totals.calls += line.calls;
    totals.bytes_sent += line.BytesSent(true);
    totals.bytes_received += line.BytesReceived(true);
    const CollectiveTime t = CollectiveSeconds(line, network);
    totals.time.latency += t.latency;
    totals.time.bandwidth += t.bandwidth;
  }
  return totals;
}

namespace {

struct NamedShape {
  std::string name;
  StepShape shape;
  int64_t tokens = 0;  // tokens the step produces (decode) or consumes (prefill)
};

std::vector<NamedShape> PlanShapes(int concurrency, int64_t pass_rows) {
  std::vector<NamedShape> shapes;
  for (const int64_t b : {int64_t{1}, static_cast<int64_t>(concurrency)}) {
    if (b == 1 && !shapes.empty()) continue;  // --concurrency 1
    const std::string seqs = b == 1 ? "1 sequence" : std::to_string(b) + " sequences";
    shapes.push_back({"decode, " + seqs, {b, b, b, pass_rows, 0, 0, 0}, b});
    // A speculative step with K drafts all accepted: verify the token and its drafts (K + 1 rows), the MTP layer
    // over the K + 1 accepted positions drafting once per sequence, then K − 1 chained calls — K + 1 tokens per
    // sequence.
    for (const int64_t k : {int64_t{1}, int64_t{3}}) {
      StepShape shape{b, (k + 1) * b, (k + 1) * b, pass_rows, 0, b, (k + 1) * b};
      shape.mtp_logit_rows = b;
      shape.mtp_chain = k - 1;
      shapes.push_back({StrCat("decode + ", k, " MTP draft", k > 1 ? "s, " : ", ", seqs), shape, (k + 1) * b});
    }
  }
  shapes.push_back({"prefill 512 tokens", {1, 512, 1, pass_rows, 0, 0, 0}, 512});
  return shapes;
}

}  // namespace

std::vector<Table> CollectiveTables(const ModelConfig& config, const ParallelLayout& layout, const Network& network,
                                    int concurrency, int64_t pass_rows) {
  const std::string where = StrCat(layout.ranks, " ranks, --tp ", layout.tp, " --ep ", layout.ranks / layout.tp,
                                   "; network ", FormatSeconds(network.latency), " latency, ",
                                   FormatFixed(network.bandwidth / 1e9, 2), " GB/s per rank and direction");
  Table steps{"collectives",
              "Collectives per step (" + where + ")",
              {{"step", "step", false},
               {"calls", "collectives"},
               {"all_reduces", "all-reduces"},
               {"bytes_sent", "rank 0 sends"},
               {"bytes_received", "rank 0 receives"},
               {"latency", "latency term"},
               {"bandwidth", "bandwidth term"},
               {"total", "in collectives"},
               {"tokens_per_s", "tokens/s at most"}},
              {},
              {}};
  for (const NamedShape& s : PlanShapes(concurrency, pass_rows)) {
    if (layout.dp_attention && s.shape.mtp_entries > 0) continue;  // the MTP layer is refused under --dp-attention
    const std::vector<CollectiveLine> lines = CollectivesPerStep(config, layout, s.shape);
    const CollectiveTotals t = SumCollectives(lines, network);
    int64_t all_reduces = 0;
    for (const CollectiveLine& line : lines) all_reduces += line.op == CollectiveOp::kAllReduce ? line.calls : 0;
    const double total = t.time.total();
    steps.AddRow({s.name, IntegerCell(t.calls), IntegerCell(all_reduces), BytesCell(static_cast<double>(t.bytes_sent)),
                  BytesCell(static_cast<double>(t.bytes_received)), SecondsCell(t.time.latency),
                  SecondsCell(t.time.bandwidth), SecondsCell(total),
                  total > 0 ? FixedCell(static_cast<double>(s.tokens) / total, 1) : Cell("-")});
  }
  steps.notes = {
      "what glint's own run does (plan/collectives.h): --tp 1 — one plan broadcast per Forward and per MTP batch, one "
      "MoE all-reduce over all ranks per MoE layer per pass of ≤ 512 rows and per MTP call; --tp > 1 adds an "
      "all-reduce over the TP group after every attention and dense MLP and a gather of the logit rows to rank 0 "
      "(lm_head split by vocabulary over rank 0's group)",
      "an all-reduce is an all-gather + a rank-order sum: each rank sends R × hidden × 4 bytes and receives that "
      "from every other rank; bytes are as bench-model's 'collectives' line counts them (rank 0)",
      "time = ⌈log2 group⌉ × latency per call + received bytes / bandwidth (a broadcast: its depth × message); not "
      "overlapped with compute. 'tokens/s at most' = the step's tokens / its time in collectives: the ceiling the "
      "network alone sets; add the compute time of a step (bench-model's ms/step) for the expected rate",
      "plan broadcast bytes are from the wire format's field sizes (≈ 60 B + 4 B per new token per sequence); pool "
      "copies between steps are not counted"};
  if (layout.dp_attention) {
    steps.notes.push_back(
        "--dp-attention: per pass two all-to-alls per MoE layer (rows to their experts' ranks, partial sums back) and "
        "one to rank 0 for the rows wanting logits, no all-reduce; rank 0 holds ⌈sequences / N⌉ sequences; bytes "
        "expected under uniform routing; an all-to-all costs 2 (N − 1) latencies and the larger of its sent and "
        "received bytes over the bandwidth");
  }
  Table detail{"collective_lines",
               "Collectives of one decode step of " + std::to_string(concurrency) + " sequences, line by line",
               {{"collective", "collective", false},
                {"op", "op", false},
                {"group", "ranks"},
                {"calls", "calls"},
                {"payload", "payload per rank"},
                {"latency", "latency term"},
                {"bandwidth", "bandwidth term"}},
               {},
               {}};
  const StepShape decode{concurrency, concurrency, concurrency, pass_rows, 0, 0, 0};
  for (const CollectiveLine& line : CollectivesPerStep(config, layout, decode)) {
    const CollectiveTime t = CollectiveSeconds(line, network);
    detail.AddRow({line.what, CollectiveOpName(line.op), IntegerCell(line.group), IntegerCell(line.calls),
                   BytesCell(static_cast<double>(line.payload)), SecondsCell(t.latency), SecondsCell(t.bandwidth)});
  }
  return {steps, detail};
}

}  // namespace glint::plan
