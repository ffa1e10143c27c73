// --dp-attention's MoE row exchange (docs/distributed.md "Attention data-parallel"). Each rank runs attention for
// its own sequences only, so before each MoE block a rank's token rows go to the ranks holding one of the experts
// they were routed to (and to the shared expert's holder), and the partial sums those ranks compute come back.
//
// The exchange is two Communicator::AllToAll calls per MoE block: the dispatch (a record per row and destination:
// the row's k expert ids, its k routing weights and its D values) and the return (D partial sums per record, in
// the order the records arrived). The owner adds a row's returned partial sums in ascending rank order in double
// and rounds once — the arithmetic of the replicated layout's all-reduce (communicator.h), where the ranks that hold
// none of the row's experts add exact zeros — so a row's MoE output is bit for bit what `--ep N` without
// --dp-attention gives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "dist/sharding.h"

namespace glint {

// The ranks a row routed to `experts` goes to, ascending, each once: the holders of its routed experts, and the
// shared expert's holder when the model has a shared expert (it takes every row).
std::vector<int> RowDestinations(std::span<const int32_t> experts, const ShardPlan& plan, bool has_shared_expert);

// Bytes of one dispatch record: k int32 expert ids, k float weights, d float values.
int64_t DispatchRecordBytes(int64_t k, int64_t d);

// The rows this rank sends: records grouped by destination rank (ascending), in row order inside a group.
struct DispatchedRows {
  std::vector<std::byte> bytes;  // the records
  std::vector<uint64_t> counts;  // [ranks] bytes to each rank
  std::vector<int64_t> rows;     // [records] the local row of each record
};

// Packs n rows of h [n, d] with their routing (experts, weights: [n, k] each) for `destinations` ([n] lists, as
// RowDestinations gives them, ranks < `ranks`).
DispatchedRows PackDispatch(const float* h, int64_t n, int64_t d, int64_t k, std::span<const int32_t> experts,
                            std::span<const float> weights, const std::vector<std::vector<int>>& destinations,
                            int ranks);

// The rows this rank received, in arrival order (by source rank, then the source's row order).
struct ReceivedRows {
  int64_t rows = 0;
  std::vector<int32_t> experts;  // [rows, k]
  std::vector<float> weights;    // [rows, k]
  std::vector<float> hidden;     // [rows, d]
};
// An error when `bytes` is not whole records or a count is not; expert ids are checked against `num_experts`.
Result<ReceivedRows> UnpackDispatch(std::span<const std::byte> bytes, std::span<const uint64_t> counts, int64_t k,
                                    int64_t d, int64_t num_experts);

// Bytes of partial sums to send back to each source: d floats per record it sent (`received_counts` are dispatch
// bytes).
std::vector<uint64_t> ReturnCounts(std::span<const uint64_t> received_counts, int64_t k, int64_t d);

// out [n, d] ← for each local row, the sum of its returned partial sums (`returned`: d floats per record of
// `dispatched`, in its record order) in ascending rank order, in double, rounded once; 0 for a row sent nowhere.
// An error when `returned_counts` do not match what was dispatched.
Status CombineReturned(std::span<const std::byte> returned, std::span<const uint64_t> returned_counts,
                       const DispatchedRows& dispatched, int64_t n, int64_t k, int64_t d, float* out);

}  // namespace glint
