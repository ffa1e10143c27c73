#include "dist/row_exchange.h"

#include <algorithm>
#include <cstring>

namespace glint {

std::vector<int> RowDestinations(std::span<const int32_t> experts, const ShardPlan& plan, bool has_shared_expert) {
  std::vector<int> ranks;
  for (int32_t expert : experts) {
    for (int r = 0; r < plan.ranks; ++r) {
      if (plan.experts_of_rank[r].Holds(expert)) ranks.push_back(r);
    }
  }
  if (has_shared_expert) {
    for (int r = 0; r < plan.ranks; ++r) {
      if (plan.holds_shared_expert(r)) ranks.push_back(r);
    }
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

int64_t DispatchRecordBytes(int64_t k, int64_t d) {
  return k * static_cast<int64_t>(sizeof(int32_t) + sizeof(float)) + d * static_cast<int64_t>(sizeof(float));
}

DispatchedRows PackDispatch(const float* h, int64_t n, int64_t d, int64_t k, std::span<const int32_t> experts,
                            std::span<const float> weights, const std::vector<std::vector<int>>& destinations,
                            int ranks) {
  const int64_t record = DispatchRecordBytes(k, d);
  DispatchedRows sent;
  sent.counts.assign(ranks, 0);
  for (int64_t t = 0; t < n; ++t) {
    for (int r : destinations[t]) sent.counts[r] += record;
  }
  uint64_t total = 0;
  for (uint64_t count : sent.counts) total += count;
  sent.bytes.resize(total);
  std::byte* at = sent.bytes.data();
  for (int r = 0; r < ranks; ++r) {  // grouped by destination, ascending: the order CombineReturned adds in
    for (int64_t t = 0; t < n; ++t) {
      if (std::find(destinations[t].begin(), destinations[t].end(), r) == destinations[t].end()) continue;
      std::memcpy(at, experts.data() + t * k, k * sizeof(int32_t));
      std::memcpy(at + k * sizeof(int32_t), weights.data() + t * k, k * sizeof(float));
      std::memcpy(at + k * (sizeof(int32_t) + sizeof(float)), h + t * d, d * sizeof(float));
      at += record;
      sent.rows.push_back(t);
    }
  }
  return sent;
}

Result<ReceivedRows> UnpackDispatch(std::span<const std::byte> bytes, std::span<const uint64_t> counts, int64_t k,
                                    int64_t d, int64_t num_experts) {
  const uint64_t record = static_cast<uint64_t>(DispatchRecordBytes(k, d));
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] % record != 0) {
      return InternalError("MoE row exchange: rank ", r, " sent ", counts[r], " bytes, not whole records of ", record);
    }
  }
  if (bytes.size() % record != 0) {
    return InternalError("MoE row exchange: ", bytes.size(), " bytes received, not whole records of ", record);
  }
  ReceivedRows in;
  in.rows = static_cast<int64_t>(bytes.size() / record);
  in.experts.resize(in.rows * k);
  in.weights.resize(in.rows * k);
  in.hidden.resize(in.rows * d);
  for (int64_t i = 0; i < in.rows; ++i) {
    const std::byte* at = bytes.data() + i * record;
    std::memcpy(in.experts.data() + i * k, at, k * sizeof(int32_t));
    std::memcpy(in.weights.data() + i * k, at + k * sizeof(int32_t), k * sizeof(float));
    std::memcpy(in.hidden.data() + i * d, at + k * (sizeof(int32_t) + sizeof(float)), d * sizeof(float));
  }
  for (int32_t expert : in.experts) {
    if (expert < 0 || expert >= num_experts) {
      return InternalError("MoE row exchange: a row routed to expert ", expert, " of ", num_experts);
    }
  }
  return in;
}

std::vector<uint64_t> ReturnCounts(std::span<const uint64_t> received_counts, int64_t k, int64_t d) {
  const uint64_t record = static_cast<uint64_t>(DispatchRecordBytes(k, d));
  std::vector<uint64_t> counts;
  counts.reserve(received_counts.size());
  for (uint64_t count : received_counts) counts.push_back(count / record * d * sizeof(float));
  return counts;
}

Status CombineReturned(std::span<const std::byte> returned, std::span<const uint64_t> returned_counts,
                       const DispatchedRows& dispatched, int64_t n, int64_t k, int64_t d, float* out) {
  const std::vector<uint64_t> expected = ReturnCounts(dispatched.counts, k, d);
  if (returned_counts.size() != expected.size() ||
      !std::equal(expected.begin(), expected.end(), returned_counts.begin())) {
    return InternalError("MoE row exchange: the partial sums that came back do not match the rows sent");
  }
  std::vector<double> sums(n * d, 0.0);
  const float* partial = reinterpret_cast<const float*>(returned.data());
  for (size_t i = 0; i < dispatched.rows.size(); ++i) {  // records by destination rank, ascending
    double* sum = sums.data() + dispatched.rows[i] * d;
    const float* part = partial + static_cast<int64_t>(i) * d;
    for (int64_t j = 0; j < d; ++j) sum[j] += static_cast<double>(part[j]);
  }
  for (int64_t i = 0; i < n * d; ++i) out[i] = static_cast<float>(sums[i]);
  return Status::Ok();
}

}  // namespace glint
