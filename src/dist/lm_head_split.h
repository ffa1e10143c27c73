// lm_head split by vocabulary over several ranks (docs/distributed.md "lm_head"). Only rank 0 samples, so only rank
// 0's tensor-parallel group holds lm_head: its tp ranks hold contiguous ranges of rows (blocks of kLmHeadRowBlock,
// ShardPlan vocab_rows), each computes its logit columns for the rows that want logits, and rank 0 gathers them —
// a gather to one rank, not an all-gather: nobody else reads logits. The other groups hold no lm_head and skip it.
// Each logit is one vocabulary row's dot product computed whole on one rank by the same kernel as on one process, so
// rank 0's assembled rows are bit-identical to one process's.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "dist/communicator.h"
#include "dist/sharding.h"

namespace glint {

// Rank 0's logits [rows, V] from the slices of its tp group. `local` [rows, v1 − v0]: this rank's columns for its
// lm_head rows [v0, v1). With plan.vocab_split, `group` is the communicator of rank 0's tp group (tp rank 0 =
// rank 0, its root) and every rank of that group calls this with the same `rows`; rank 0 receives the others'
// slices (one gather, in calls of < 1 GiB) and writes every row whole into `logits` [rows, V]; the others only send
// (`logits` unused). Without a split rank 0's `local` is the whole rows: copied into `logits` unless it is the same
// memory. A rank outside rank 0's group (no lm_head rows) must not call it.
Status GatherLogitRows(const ShardPlan& plan, int64_t vocab, Communicator* group, std::span<const float> local,
                       int64_t rows, float* logits);

// The same over any group whose member m computes the logit columns `columns_of_member[m]` (contiguous ranges of
// the vocabulary, together all of it): the group's rank 0 receives and assembles `logits` [rows, V]; the others
// only send. Used by GatherLogitRows (rank 0's tp group) and by --lm-head-split-rows (all ranks at --tp 1,
// ShardPlan::head_rows_of_rank).
Status GatherLogitColumns(std::span<const IndexRange> columns_of_member, int64_t vocab, Communicator* group,
                          std::span<const float> local, int64_t rows, float* logits);

}  // namespace glint
