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

template <typename T, typename Decode, typename Encode>
Status Communicator::SumInRankOrder(std::span<T> values, Decode decode, Encode encode) {
  ++stats_.all_reduces;
  const int ranks = size();
  if (ranks == 1) return Status::Ok();  // Σ over one rank: the value itself (no rounding either)
  const size_t bytes = values.size_bytes();
  gathered_.resize(bytes * ranks);
  GLINT_RETURN_IF_ERROR(DoAllGather(std::as_bytes(values), gathered_));
  stats_.bytes_sent += bytes;
  stats_.bytes_received += bytes * (ranks - 1);
  for (size_t i = 0; i < values.size(); ++i) {
    double sum = 0;
    for (int r = 0; r < ranks; ++r) {
      T part;
      std::memcpy(&part, gathered_.data() + r * bytes + i * sizeof(T), sizeof(T));
      sum += decode(part);
    }
    values[i] = encode(sum);
  }
  return Status::Ok();
}

Status Communicator::AllReduceSum(std::span<float> values) {
  Stopwatch watch;
  ++stats_.calls;
  Status status = SumInRankOrder(
      values, [](float v) { return static_cast<double>(v); }, [](double s) { return static_cast<float>(s); });
  stats_.seconds += watch.Seconds();
  return status;
}

Status Communicator::AllReduceSumBf16(std::span<uint16_t> values) {
  Stopwatch watch;
  ++stats_.calls;
  // The double sum is rounded to fp32, then to bf16: the first rounding (2^-24 relative) can move a value that
  // lies within 2^-24 of a bf16 tie across it, so the result is the nearest bf16 to the sum or its neighbour in
  // those rare cases; the same on every rank.
  Status status = SumInRankOrder(
      values, [](uint16_t v) { return static_cast<double>(Bf16BitsToFloat(v)); },
      [](double s) { return FloatToBf16Bits(static_cast<float>(s)); });
  stats_.seconds += watch.Seconds();
  return status;
}

Status Communicator::AllGather(std::span<const std::byte> send, std::span<std::byte> received) {
  if (received.size() != send.size() * static_cast<size_t>(size())) {
    return InvalidArgument("all-gather of ", send.size(), " bytes from ", size(), " ranks needs ", send.size() * size(),
                           " bytes to receive into, got ", received.size());
  }
  Stopwatch watch;
  ++stats_.calls, ++stats_.all_gathers;
  stats_.bytes_sent += send.size();
  stats_.bytes_received += send.size() * (size() - 1);
  Status status = DoAllGather(send, received);
  stats_.seconds += watch.Seconds();
  return status;
}

Status Communicator::Broadcast(std::vector<std::byte>& buffer, int root) {
  if (root < 0 || root >= size()) return InvalidArgument("broadcast root ", root, " is not a rank of ", size());
  Stopwatch watch;
  ++stats_.calls, ++stats_.broadcasts;
  Status status = DoBroadcast(buffer, root);
  (rank() == root ? stats_.bytes_sent : stats_.bytes_received) += size() > 1 ? buffer.size() : 0;
  stats_.seconds += watch.Seconds();
  return status;
}

Status Communicator::Barrier() {
  Stopwatch watch;
  ++stats_.calls, ++stats_.barriers;
  Status status = DoBarrier();
  stats_.seconds += watch.Seconds();
  return status;
}

Status SingleProcessCommunicator::DoAllGather(std::span<const std::byte> send, std::span<std::byte> received) {
  if (!send.empty()) std::memcpy(received.data(), send.data(), send.size());
  return Status::Ok();
}

}  // namespace glint
