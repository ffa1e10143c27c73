// The collectives glint's own multi-process run makes per step (docs/distributed.md, "Collectives per step"), for
// any ModelConfig and rank layout, and what they cost on a network of a given latency and bandwidth. `glint plan
// --ranks N` prints it for the released model; bench-model and bench-engine print the measured counterparts
// (dist/communicator.h CollectiveStats), and tests/mpi checks that the two counts agree.
//
// What is modelled is the fast path's step as implemented (fast/fast_model.cc, lockstep/lockstep.cc):
//   --tp 1 (expert parallel, attention replicated): one plan broadcast from rank 0 per Forward and per MTP call;
//     one MoE all-reduce over all ranks per MoE layer per pass of at most `pass_rows` rows, and one per MTP call
//     (FastModel::MtpForwardBatch runs every entry's pairs in one pass); lm_head replicated (no collective).
//   --tp T > 1 (the contract of tensor parallelism): per trunk layer per pass one all-reduce over the T ranks of
//     the tensor-parallel group after attention and one after the FFN — over the group for a dense MLP, over all
//     ranks for an MoE layer (routed and shared expert partial sums fused into one) — the same for the MTP layer;
//     lm_head split by vocabulary over rank 0's group only (only rank 0 samples): one gather to rank 0 per pass
//     holding a row that needs logits (taken as min(passes, logit rows): exact for decode and single-pass steps),
//     of those rows' columns (16-row blocks split like the rest of the plan; rank 0 receives V − its own columns);
//     one per MTP call with a row that wants draft logits.
//   --tp 1 with --lm-head-split-rows R: the same gather over all ranks for a pass (or MTP call) of ≤ R logit rows
//     (exact for decode, single-pass steps, steps whose every row wants logits and MTP calls; other multi-pass
//     steps taken with their logit rows spread over their last passes).
// An all-reduce is an all-gather of every rank's partial vector and a rank-order sum (dist/communicator.h): each
// rank sends its R · D · 4 bytes and receives them from every other rank of the group.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/table.h"
#include "io/config.h"

namespace glint::plan {

struct ParallelLayout {
  int ranks = 1;
  int tp = 1;  // tensor-parallel degree; ranks / tp expert-parallel groups
  // --lm-head-split-rows at --tp 1 (ShardPlan::head_split_rows): a pass with at most this many logit rows computes
  // lm_head split by vocabulary over all ranks and gathers the columns to rank 0; 0: never.
  int64_t head_split_rows = 0;
  // --dp-attention (--tp 1): each rank runs attention for its own sequences; the MoE rows travel all-to-all.
  bool dp_attention = false;
};
// ranks ≥ 1, tp ≥ 1, tp divides ranks (the run's own rule: --tp × --ep = ranks).
Status ValidateLayout(const ParallelLayout& layout);

// One step: a Forward over `entries` sequences with `rows` new tokens in all, of which `logit_rows` want logits,
// optionally followed by one MtpForwardBatch over `mtp_entries` entries of `mtp_rows` pairs in all, of which
// `mtp_logit_rows` want draft logits, and `mtp_chain` more MTP calls of one pair per entry (chained drafts,
// --speculative-tokens K: K − 1 of them, their hidden input sent inline in the plan).
struct StepShape {
  int64_t entries = 1;
  int64_t rows = 1;
  int64_t logit_rows = 1;
  int64_t pass_rows = 512;       // FastModelOptions::max_tokens_per_pass: rows run in ⌈rows / pass_rows⌉ passes
  int64_t blocks_per_entry = 0;  // cache blocks of an engine-bound sequence (0: sequences owning their memory)
  int64_t mtp_entries = 0;
  int64_t mtp_rows = 0;
  bool expert_memory = false;  // --expert-memory: each MoE all-reduce carries one float more per row (failure flags)
  int64_t mtp_logit_rows = 0;  // lm_head runs on these rows only
  int64_t mtp_chain = 0;
};

enum class CollectiveOp { kBroadcast, kAllReduce, kAllGather, kGather, kAllToAll };
const char* CollectiveOpName(CollectiveOp op);

// One line of the model: `calls` collectives of one op and purpose in a step, over `group` ranks. `payload`: the
// bytes of all of them that a rank contributes (all-reduce, all-gather: it receives (group − 1) × that from the
// others), the broadcast's messages (the root sends them, every other rank receives them), for a gather what
// the root (rank 0) receives from the others in all, for an all-to-all what rank 0 sends the others (and
// `received`: what it receives from them) — as CollectiveStats counts them.
struct CollectiveLine {
  std::string what;  // "plan broadcast", "MoE all-reduce", …
  CollectiveOp op = CollectiveOp::kAllReduce;
  int group = 1;
  int64_t calls = 0;
  uint64_t payload = 0;
  bool bytes_estimated = false;  // the plan broadcast: from the wire format's field sizes; an all-to-all: expected
                                 // under uniform routing — not exact
  uint64_t received = 0;         // all-to-all only

  uint64_t BytesSent(bool root) const;  // by one rank (root: rank 0, the broadcasts' and gathers' root; a gather's
                                        // other ranks: the mean of their parts)
  uint64_t BytesReceived(bool root) const;
};

// The step's collectives; empty with one rank.
std::vector<CollectiveLine> CollectivesPerStep(const ModelConfig& config, const ParallelLayout& layout,
                                               const StepShape& step);

// The network between the ranks: latency per message (s) and bandwidth per rank and direction (bytes/s).
struct Network {
  double latency = 30e-6;
  double bandwidth = 1.25e9;
};
// Wall time of one line's calls, a latency and a bandwidth term: ⌈log₂ G⌉ · α per call (recursive doubling for the
// all-gathers inside all-reduces, a binomial tree for the broadcast), plus for an all-gather the (G − 1) parts a
// rank must receive over β, for a broadcast its message ⌈log₂ G⌉ times over β (the tree's depth, store and
// forward); an all-to-all is two exchanges (the byte counts, then the data), each G − 1 pairwise steps: 2 (G − 1) α
// a call, and the larger of what rank 0 sends and receives over β (the link is full duplex). A lower bound for the
// algorithms Open MPI picks at these sizes; nothing overlaps compute.
//
// --dp-attention (`ParallelLayout::dp_attention`): per pass two all-to-alls per MoE layer (the rows to the ranks
// holding their experts and the shared expert, then the partial sums back) and one for the head (the rows wanting
// logits to rank 0). Rank 0 holds its share of the sequences (⌈entries / N⌉ of them, the assignment's ties going to
// the lowest rank) and runs the most passes; a row goes to each other rank with the probability that one of its k
// experts lies there under uniform routing (1 − C(E − E_r, k) / C(E, k)), and always to the shared expert's holder.
struct CollectiveTime {
  double latency = 0;
  double bandwidth = 0;
  double total() const { return latency + bandwidth; }
};
CollectiveTime CollectiveSeconds(const CollectiveLine& line, const Network& network);

struct CollectiveTotals {
  int64_t calls = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;  // by rank 0 (the broadcasts' root)
  CollectiveTime time;
};
CollectiveTotals SumCollectives(const std::vector<CollectiveLine>& lines, const Network& network);

// `glint plan --ranks N`: the tables `collectives` (per step shape: decode of 1 and `concurrency` sequences, the
// same with one MTP draft token per sequence and with 3 (--speculative-tokens 3, all accepted), prefill of 512 tokens —
// calls, bytes, latency and bandwidth terms, the tokens/s the collectives alone allow) and `collective_lines` (decode
// of `concurrency` sequences, line by line).
std::vector<Table> CollectiveTables(const ModelConfig& config, const ParallelLayout& layout, const Network& network,
                                    int concurrency, int64_t pass_rows = 512);

}  // namespace glint::plan
