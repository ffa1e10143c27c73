// The communicator the model calls for its collectives (docs/distributed.md): rank, size, all-reduce of fp32 and
// bf16 sums, all-gather, gather, all-to-all, broadcast of a byte buffer, barrier. Passed explicitly to whatever
// communicates; there is no global instance. Two implementations: SingleProcessCommunicator (one rank, every collective
// a copy or a no-op) and MpiCommunicator (mpi_communicator.h, OpenMPI; only when glint is built with MPI).
//
// Threading: only one thread communicates over a communicator (the engine thread; MpiCommunicator's heartbeat
// thread uses a duplicate of its own, mpi_communicator.h).
//
// Sums are deterministic by construction: AllReduceSum gathers every rank's partial vector and adds them in rank
// order 0, 1, …, N−1 in double, rounding once. So every rank holds bit-for-bit the same result (each rank routes
// its own tokens from it: a one-ulp difference between ranks could change an expert choice on one rank only), and
// the result does not depend on the MPI library's reduction algorithm. The price is N× the bytes of a ring
// all-reduce's 2(N−1)/N×, which for hidden-size activations at N ≤ 8 is latency, not bandwidth (docs/distributed.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace glint {

// The kinds of collective a communicator runs (the all-gathers inside all-reduces count as all-reduces).
enum class CollectiveKind : int { kAllReduce = 0, kAllGather, kBroadcast, kBarrier, kGather, kAllToAll };
inline constexpr int kCollectiveKinds = 6;
const char* CollectiveKindName(CollectiveKind kind);  // "all-reduce", …

// What the collectives of one kind cost: calls, payload bytes (as CollectiveStats counts them) and wall time.
struct CollectiveCost {
  int64_t calls = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  double seconds = 0;
};

// What the collectives of a communicator cost so far (benchmarks and `glint plan`'s check). Always on: a few adds
// and one clock read per call. Snapshot it before and after a step and take Since() for the step's collectives.
struct CollectiveStats {
  int64_t calls = 0;  // collectives of any kind
  int64_t all_reduces = 0;
  int64_t all_gathers = 0;  // not counting those inside all-reduces
  int64_t broadcasts = 0;
  int64_t barriers = 0;
  int64_t gathers = 0;          // to one root (the vocabulary-split lm_head's logits)
  int64_t all_to_alls = 0;      // --dp-attention's MoE row exchanges and final-row gathers
  uint64_t bytes_sent = 0;      // payload bytes this rank contributed
  uint64_t bytes_received = 0;  // payload bytes this rank received from others
  double seconds = 0;           // wall time inside collectives
  CollectiveCost by_kind[kCollectiveKinds];

  const CollectiveCost& of(CollectiveKind kind) const { return by_kind[static_cast<int>(kind)]; }
  // The collectives after `earlier` (a snapshot of the same communicator's stats).
  CollectiveStats Since(const CollectiveStats& earlier) const;
  // Adds one call of `kind` to the totals and to its kind's cost.
  void Record(CollectiveKind kind, uint64_t sent, uint64_t received, double call_seconds);
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "single process" or "MPI (Open MPI 4.1.4), 2 ranks"
  virtual std::string Describe() const = 0;

  // values ← Σ_r values_r (every rank passes the same length), summed in rank order in double, rounded once.
  Status AllReduceSum(std::span<float> values);
  // bf16 values (bit patterns) ← Σ_r, summed in rank order in double, rounded once to bf16 (nearest even).
  Status AllReduceSumBf16(std::span<uint16_t> values);
  // received [size · send.size()]: rank r's bytes at offset r · send.size(). Every rank sends the same length.
  Status AllGather(std::span<const std::byte> send, std::span<std::byte> received);
  // To `root` only: rank r contributes counts[r] bytes (`send`, its own count), which land in the root's
  // `received` at offset Σ_{q<r} counts[q] (received.size() = Σ counts on the root; ignored elsewhere). Every rank
  // passes the same counts. The root's own part is copied, not sent.
  Status Gather(std::span<const std::byte> send, std::span<const uint64_t> counts, std::span<std::byte> received,
                int root);
  // Personalised exchange (MPI_Alltoallv): this rank sends send_counts[r] bytes of `send` (in rank order, back to
  // back) to rank r, and gets in `received` what every rank sent it, in rank order; received_counts[r] is what came
  // from rank r. The counts are exchanged first (one MPI_Alltoall), so a receiver need not know them. Any rank may
  // send 0 bytes to any other. The part a rank sends itself is copied. --dp-attention's MoE row exchange.
  Status AllToAll(std::span<const std::byte> send, std::span<const uint64_t> send_counts,
                  std::vector<std::byte>& received, std::vector<uint64_t>& received_counts);
  // The root's buffer to every rank; the other ranks' buffers are resized to the root's length.
  Status Broadcast(std::vector<std::byte>& buffer, int root);
  Status Barrier();
  // A sub-communicator of the ranks passing the same `color`, ranked by `key` (ties: by this rank): MPI_Comm_split.
  // Collective over this communicator (every rank calls it, in the same order). Tensor parallelism sums attention
  // and the dense MLP over the ranks of one tensor-parallel group (docs/distributed.md).
  // The base refuses (a test double that never splits need not implement it).
  virtual Result<std::unique_ptr<Communicator>> Split(int color, int key) {
    return Unimplemented("this communicator (", Describe(), ") cannot make sub-communicators");
  }

  const CollectiveStats& stats() const { return stats_; }
  // The collectives of this communicator and of every communicator split from it, recursively (a tensor-parallel
  // group's all-reduces and lm_head gathers): what a benchmark compares with `glint plan`, which counts them all.
  const CollectiveStats& stats_with_splits() const { return *with_splits_; }
  void ResetStats() {
    stats_ = CollectiveStats{};
    *with_splits_ = CollectiveStats{};
  }

 protected:
  virtual Status DoAllGather(std::span<const std::byte> send, std::span<std::byte> received) = 0;
  virtual Status DoBroadcast(std::vector<std::byte>& buffer, int root) = 0;
  virtual Status DoBarrier() = 0;
  // Arguments checked by Gather. The base refuses (a test double need not gather).
  virtual Status DoGather(std::span<const std::byte> send, std::span<const uint64_t> counts,
                          std::span<std::byte> received, int root) {
    return Unimplemented("this communicator (", Describe(), ") cannot gather");
  }
  // Arguments checked by AllToAll (send_counts sum to send.size()); fills received and received_counts. The base
  // refuses (a test double need not exchange).
  virtual Status DoAllToAll(std::span<const std::byte> send, std::span<const uint64_t> send_counts,
                            std::vector<std::byte>& received, std::vector<uint64_t>& received_counts) {
    return Unimplemented("this communicator (", Describe(), ") cannot exchange rows (all-to-all)");
  }
  // For Split implementations: `split`'s collectives count in this communicator's stats_with_splits() too (and in
  // those of the communicators this one was split from).
  void AdoptSplit(Communicator& split) const;

 private:
  // Adds one call to stats_, to stats_with_splits() and to every ancestor's.
  void Record(CollectiveKind kind, uint64_t sent, uint64_t received, double call_seconds);

  template <typename T, typename Decode, typename Encode>
  Status SumInRankOrder(std::span<T> values, Decode decode, Encode encode);

  CollectiveStats stats_;
  // Shared with the communicators split from this one, which may outlive it.
  std::shared_ptr<CollectiveStats> with_splits_ = std::make_shared<CollectiveStats>();
  std::vector<std::shared_ptr<CollectiveStats>> ancestors_;  // with_splits_ of those this one was split from
  std::vector<std::byte> gathered_;                          // scratch of the all-reduces
};

// One rank: all-reduce and broadcast leave the buffer as it is, all-gather copies, barrier returns.
class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string Describe() const override { return "single process"; }
  Result<std::unique_ptr<Communicator>> Split(int, int) override {
    auto split = std::make_unique<SingleProcessCommunicator>();
    AdoptSplit(*split);
    return std::unique_ptr<Communicator>(std::move(split));
  }

 protected:
  Status DoAllGather(std::span<const std::byte> send, std::span<std::byte> received) override;
  Status DoBroadcast(std::vector<std::byte>&, int) override { return Status::Ok(); }
  Status DoBarrier() override { return Status::Ok(); }
  Status DoGather(std::span<const std::byte> send, std::span<const uint64_t> counts, std::span<std::byte> received,
                  int root) override;
  Status DoAllToAll(std::span<const std::byte> send, std::span<const uint64_t> send_counts,
                    std::vector<std::byte>& received, std::vector<uint64_t>& received_counts) override;
};

// fp32 → bf16 bits, round to nearest even (NaN kept quiet). Exposed for tests.
uint16_t FloatToBf16Bits(float value);
float Bf16BitsToFloat(uint16_t bits);

}  // namespace glint
