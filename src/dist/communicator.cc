#include "dist/communicator.h"

#include <bit>
#include <cstring>

#include "base/timer.h"

namespace glint {

uint16_t FloatToBf16Bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0)
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bf16BitsToFloat(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

const char* CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all-reduce";
    case CollectiveKind::kAllGather:
      return "all-gather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kGather:
      return "gather";
    case CollectiveKind::kAllToAll:
      return "all-to-all";
  }
  return "collective";
}

void CollectiveStats::Record(CollectiveKind kind, uint64_t sent, uint64_t received, double call_seconds) {
  ++calls;
  switch (kind) {
    case CollectiveKind::kAllReduce:
      ++all_reduces;
      break;
    case CollectiveKind::kAllGather:
      ++all_gathers;
      break;
    case CollectiveKind::kBroadcast:
      ++broadcasts;
      break;
    case CollectiveKind::kBarrier:
      ++barriers;
      break;
    case CollectiveKind::kGather:
      ++gathers;
      break;
    case CollectiveKind::kAllToAll:
      ++all_to_alls;
      break;
  }
  bytes_sent += sent, bytes_received += received, seconds += call_seconds;
  CollectiveCost& cost = by_kind[static_cast<int>(kind)];
  ++cost.calls, cost.bytes_sent += sent, cost.bytes_received += received, cost.seconds += call_seconds;
}

CollectiveStats CollectiveStats::Since(const CollectiveStats& earlier) const {
  CollectiveStats d;
  d.calls = calls - earlier.calls;
  d.all_reduces = all_reduces - earlier.all_reduces;
  d.all_gathers = all_gathers - earlier.all_gathers;
  d.broadcasts = broadcasts - earlier.broadcasts;
  d.barriers = barriers - earlier.barriers;
  d.gathers = gathers - earlier.gathers;
  d.all_to_alls = all_to_alls - earlier.all_to_alls;
  d.bytes_sent = bytes_sent - earlier.bytes_sent;
  d.bytes_received = bytes_received - earlier.bytes_received;
  d.seconds = seconds - earlier.seconds;
  for (int k = 0; k < kCollectiveKinds; ++k) {
    const CollectiveCost &now = by_kind[k], &then = earlier.by_kind[k];
    d.by_kind[k] = {now.calls - then.calls, now.bytes_sent - then.bytes_sent, now.bytes_received - then.bytes_received,
                    now.seconds - then.seconds};
  }
  return d;
}

void Communicator::Record(CollectiveKind kind, uint64_t sent, uint64_t received, double call_seconds) {
  stats_.Record(kind, sent, received, call_seconds);
  with_splits_->Record(kind, sent, received, call_seconds);
  for (const std::shared_ptr<CollectiveStats>& ancestor : ancestors_)
    ancestor->Record(kind, sent, received, call_seconds);
}

void Communicator::AdoptSplit(Communicator& split) const {
  split.ancestors_ = ancestors_;
  split.ancestors_.push_back(with_splits_);
}

template <typename T, typename Decode, typename Encode>
Status Communicator::SumInRankOrder(std::span<T> values, Decode decode, Encode encode) {
  Stopwatch watch;
  const int ranks = size();
  const size_t bytes = values.size_bytes();
  if (ranks == 1) {  // Σ over one rank: the value itself (no rounding either)
    Record(CollectiveKind::kAllReduce, 0, 0, 0);
    return Status::Ok();
  }
  gathered_.resize(bytes * ranks);
  Status gathered = DoAllGather(std::as_bytes(values), gathered_);
  if (!gathered.ok()) {
    Record(CollectiveKind::kAllReduce, bytes, 0, watch.Seconds());
    return gathered;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    double sum = 0;
    for (int r = 0; r < ranks; ++r) {
      T part;
      std::memcpy(&part, gathered_.data() + r * bytes + i * sizeof(T), sizeof(T));
      sum += decode(part);
    }
    values[i] = encode(sum);
  }
  Record(CollectiveKind::kAllReduce, bytes, bytes * (ranks - 1), watch.Seconds());  // with the sum's time
  return Status::Ok();
}

Status Communicator::AllReduceSum(std::span<float> values) {
  return SumInRankOrder(
      values, [](float v) { return static_cast<double>(v); }, [](double s) { return static_cast<float>(s); });
}

Status Communicator::AllReduceSumBf16(std::span<uint16_t> values) {
  // The double sum is rounded to fp32, then to bf16: the first rounding (2^-24 relative) can move a value that
  // lies within 2^-24 of a bf16 tie across it, so the result is the nearest bf16 to the sum or its neighbour in
  // those rare cases; the same on every rank.
  return SumInRankOrder(
      values, [](uint16_t v) { return static_cast<double>(Bf16BitsToFloat(v)); },
      [](double s) { return FloatToBf16Bits(static_cast<float>(s)); });
}

Status Communicator::AllGather(std::span<const std::byte> send, std::span<std::byte> received) {
  if (received.size() != send.size() * static_cast<size_t>(size())) {
    return InvalidArgument("all-gather of ", send.size(), " bytes from ", size(), " ranks needs ", send.size() * size(),
                           " bytes to receive into, got ", received.size());
  }
  Stopwatch watch;
  Status status = DoAllGather(send, received);
  Record(CollectiveKind::kAllGather, send.size(), send.size() * (size() - 1), watch.Seconds());
  return status;
}

Status Communicator::Gather(std::span<const std::byte> send, std::span<const uint64_t> counts,
                            std::span<std::byte> received, int root) {
  if (root < 0 || root >= size()) return InvalidArgument("gather root ", root, " is not a rank of ", size());
  if (counts.size() != static_cast<size_t>(size()) || counts[rank()] != send.size()) {
    return InvalidArgument("gather: ", counts.size(), " counts for ", size(), " ranks, this rank's ",
                           counts.size() > static_cast<size_t>(rank()) ? counts[rank()] : 0, " bytes against ",
                           send.size(), " sent");
  }
  uint64_t total = 0;
  for (uint64_t count : counts) total += count;
  if (rank() == root && received.size() != total) {
    return InvalidArgument("gather of ", total, " bytes needs that many to receive into, got ", received.size());
  }
  Stopwatch watch;
  Status status = DoGather(send, counts, received, root);
  const bool is_root = rank() == root;
  Record(CollectiveKind::kGather, is_root ? 0 : send.size(), is_root ? total - send.size() : 0, watch.Seconds());
  return status;
}

Status Communicator::AllToAll(std::span<const std::byte> send, std::span<const uint64_t> send_counts,
                              std::vector<std::byte>& received, std::vector<uint64_t>& received_counts) {
  uint64_t total = 0;
  for (uint64_t count : send_counts) total += count;
  if (send_counts.size() != static_cast<size_t>(size()) || total != send.size()) {
    return InvalidArgument("all-to-all: ", send_counts.size(), " counts for ", size(), " ranks summing to ", total,
                           " bytes, against ", send.size(), " to send");
  }
  Stopwatch watch;
  Status status = DoAllToAll(send, send_counts, received, received_counts);
  const uint64_t own = send_counts[rank()];
  const uint64_t got = status.ok() ? received.size() - received_counts[rank()] : 0;
  Record(CollectiveKind::kAllToAll, send.size() - own, got, watch.Seconds());
  return status;
}

Status Communicator::Broadcast(std::vector<std::byte>& buffer, int root) {
  if (root < 0 || root >= size()) return InvalidArgument("broadcast root ", root, " is not a rank of ", size());
  Stopwatch watch;
  Status status = DoBroadcast(buffer, root);
  const uint64_t bytes = size() > 1 ? buffer.size() : 0;
  Record(CollectiveKind::kBroadcast, rank() == root ? bytes : 0, rank() == root ? 0 : bytes, watch.Seconds());
  return status;
}

Status Communicator::Barrier() {
  Stopwatch watch;
  Status status = DoBarrier();
  Record(CollectiveKind::kBarrier, 0, 0, watch.Seconds());
  return status;
}

Status SingleProcessCommunicator::DoAllGather(std::span<const std::byte> send, std::span<std::byte> received) {
  if (!send.empty()) std::memcpy(received.data(), send.data(), send.size());
  return Status::Ok();
}

Status SingleProcessCommunicator::DoGather(std::span<const std::byte> send, std::span<const uint64_t>,
                                           std::span<std::byte> received, int) {
  if (!send.empty()) std::memcpy(received.data(), send.data(), send.size());
  return Status::Ok();
}

Status SingleProcessCommunicator::DoAllToAll(std::span<const std::byte> send, std::span<const uint64_t>,
                                             std::vector<std::byte>& received, std::vector<uint64_t>& received_counts) {
  received.assign(send.begin(), send.end());
  received_counts.assign(1, send.size());
  return Status::Ok();
}

}  // namespace glint
