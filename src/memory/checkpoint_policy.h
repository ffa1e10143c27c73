// Which prefix-cache checkpoints a sequence keeps (docs/engine.md "Checkpoint spacing").
//
// A checkpoint is a copy of every KDA layer's recurrent state (136 MiB on the released model), taken every
// `checkpoint_interval` tokens. Kept at every interval, a 90K-token conversation would hold 350 of them (47 GiB). A
// hit resumes at the deepest checkpoint at or before the point where the new prompt leaves the cached one, and
// in a conversation that point is almost always near the end of the previous turn (the new prompt is the old one
// plus the answer and a new message); a prompt that leaves earlier (an edited message, another request sharing
// only a system prompt) is rarer, and the further back it leaves, the smaller the share of the prompt the
// checkpoint saves anyway.
//
// The tail policy therefore spaces the checkpoints of a chain geometrically behind its newest one: the `dense`
// newest stay at full density, then every second one for the next 2·dense intervals, every fourth for the next
// 4·dense, and so on. Counting in intervals, the checkpoint with index i (position i · interval) is kept behind a
// frontier whose newest checkpoint index is n when
//     r = n − i,   level = ⌊log2(r / dense + 1)⌋,   i mod 2^level = 0.
// Each level keeps about `dense` checkpoints, so a chain keeps about dense · log2(n / dense) of them: 25 at 90K
// tokens, 40 at 1M with the defaults (interval 256, dense 4), instead of 352 and 4096 (TailPolicyKeptCount).
// A hit that leaves the chain r intervals behind its newest checkpoint recomputes fewer than 2 · (r / dense + 1)
// intervals (checked exhaustively by the tests): the recompute grows with the distance, so it stays a bounded
// share of what the hit saves, and near the end of a conversation, where hits land, it is one interval at most.
//
// The verdict is monotone: once dropped, a checkpoint is never kept again as the frontier advances (level only
// grows with r, and a multiple of 2^(level+1) is a multiple of 2^level), so the cache manager demotes each
// checkpoint at most once. Demoted checkpoints are evicted first; a hit on one makes it ordinary again.
// The uniform policy keeps every checkpoint and leaves the order to plain LRU (the behaviour before the policy).
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace glint {

enum class CheckpointPolicy {
  kUniform,  // every interval, plain LRU
  kTail,     // geometric spacing behind the newest checkpoint of each chain (above)
};

inline constexpr int64_t kDefaultDenseCheckpoints = 4;

// Whether the checkpoint of index `index` (≥ 1) is kept behind a newest checkpoint of index `newest` (≥ index).
bool TailPolicyKeeps(int64_t index, int64_t newest, int64_t dense);

// How many of the checkpoints 1 .. newest the tail policy keeps (for the capacity report and tests).
int64_t TailPolicyKeptCount(int64_t newest, int64_t dense);

Result<CheckpointPolicy> ParseCheckpointPolicy(std::string_view name);
const char* CheckpointPolicyName(CheckpointPolicy policy);

}  // namespace glint
