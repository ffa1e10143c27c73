#include "dist/lm_head_split.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace glint {

Status GatherLogitRows(const ShardPlan& plan, int64_t vocab, Communicator* group, std::span<const float> local,
                       int64_t rows, float* logits) {
  const bool root = plan.receives_logits();
  if (!plan.vocab_split) {  // rank 0 holds lm_head whole: its slice is the logits
    if (root && rows > 0 && logits != local.data()) std::memcpy(logits, local.data(), local.size_bytes());
    return Status::Ok();
  }
  if (group == nullptr || group->size() != plan.tp) {
    return InternalError("the vocabulary-split lm_head needs the communicator of rank 0's tp group");
  }
  std::vector<int64_t> widths(plan.tp);
  for (int r = 0; r < plan.tp; ++r) widths[r] = plan.slices_of_rank[r].vocab_rows.count();
  const int64_t width = widths[plan.tp_rank()];
  // MPI counts are ints: a call moves at most 1 GiB of logits (the released vocabulary: ≈ 1700 rows).
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 30) / (vocab * static_cast<int64_t>(sizeof(float))));
  std::vector<uint64_t> counts(plan.tp);
  std::vector<std::byte> received;
  for (int64_t first = 0; first < rows; first += chunk) {
    const int64_t n = std::min(chunk, rows - first);
    for (int r = 0; r < plan.tp; ++r) counts[r] = static_cast<uint64_t>(n * widths[r]) * sizeof(float);
    received.resize(root ? static_cast<size_t>(n * vocab) * sizeof(float) : 0);
    GLINT_RETURN_IF_ERROR(group->Gather(std::as_bytes(local.subspan(first * width, n * width)), counts, received, 0)
                              .WithContext("gathering the logit rows of the vocabulary-split lm_head"));
    if (!root) continue;
    // Rank r's block [n, width_r] → columns [v0_r, v0_r + width_r) of rows first … first + n − 1.
    const std::byte* block = received.data();
    for (int r = 0; r < plan.tp; ++r) {
      const int64_t v0 = plan.slices_of_rank[r].vocab_rows.begin, bytes = widths[r] * sizeof(float);
      for (int64_t i = 0; i < n; ++i) std::memcpy(logits + (first + i) * vocab + v0, block + i * bytes, bytes);
      block += counts[r];
    }
  }
  return Status::Ok();
}

}  // namespace glint
