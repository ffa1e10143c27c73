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
  std::vector<IndexRange> columns(plan.tp);
  for (int r = 0; r < plan.tp; ++r) columns[r] = plan.slices_of_rank[r].vocab_rows;
  return GatherLogitColumns(columns, vocab, group, local, rows, logits);
}

Status GatherLogitColumns(std::span<const IndexRange> columns_of_member, int64_t vocab, Communicator* group,
                          std::span<const float> local, int64_t rows, float* logits) {
  const int members = static_cast<int>(columns_of_member.size());
  if (group == nullptr || group->size() != members) {
    return InternalError("gathering logit columns of ", members, " members over a group of ",
                         group == nullptr ? 0 : group->size());
  }
  const bool root = group->rank() == 0;
  const int64_t width = columns_of_member[group->rank()].count();
  // MPI counts are ints: a call moves at most 1 GiB of logits (the released vocabulary: ≈ 1700 rows).
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 30) / (vocab * static_cast<int64_t>(sizeof(float))));
  std::vector<uint64_t> counts(members);
  std::vector<std::byte> received;
  for (int64_t first = 0; first < rows; first += chunk) {
    const int64_t n = std::min(chunk, rows - first);
    for (int m = 0; m < members; ++m)
      counts[m] = static_cast<uint64_t>(n * columns_of_member[m].count()) * sizeof(float);
    received.resize(root ? static_cast<size_t>(n * vocab) * sizeof(float) : 0);
    GLINT_RETURN_IF_ERROR(group->Gather(std::as_bytes(local.subspan(first * width, n * width)), counts, received, 0)
                              .WithContext("gathering the logit rows of the vocabulary-split lm_head"));
    if (!root) continue;
    // Member m's block [n, width_m] → columns [v0_m, v0_m + width_m) of rows first … first + n − 1.
    const std::byte* block = received.data();
    for (int m = 0; m < members; ++m) {
      const int64_t v0 = columns_of_member[m].begin, bytes = columns_of_member[m].count() * sizeof(float);
      for (int64_t i = 0; i < n; ++i) std::memcpy(logits + (first + i) * vocab + v0, block + i * bytes, bytes);
      block += counts[m];
    }
  }
  return Status::Ok();
}

}  // namespace glint
