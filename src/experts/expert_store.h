// Where the fast MoE (fast/fast_moe.cc) gets a routed expert's packed weights, and the disk-backed cache behind
// `--expert-memory SIZE` (docs/expert-cache.md).
//
// Without a store every routed expert is resident (bound into the mapped container or converted buffers) and FastMoe
// reads FastMoeWeights::experts directly: nothing changes. With a store, FastMoe asks for one layer pass's experts
// as soon as the router has run, computes the shared expert and the resident ones first, then each missing expert
// as it lands, and releases each when its products are done. The combine order (ascending expert id, shared last) is
// unchanged, so the output is bit-identical whatever the store holds.
//
// The store decides only where an expert's bytes are; which experts a process holds at all (expert parallelism)
// is a different layer that can sit in front of it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "experts/expert_trace.h"
#include "io/extent_reader.h"
#include "packed/fast_weights.h"

namespace glint {

class ExpertStore {
 public:
  virtual ~ExpertStore() = default;
  // Starts one MoE pass over `experts` (distinct, ascending) of `moe`, `rows[i]` of the pass's rows routed to
  // experts[i] (what a frequency policy weighs); one pass at a time (Forward is serialised).
  virtual Status Begin(const FastMoeWeights& moe, std::span<const int32_t> experts, std::span<const int64_t> rows) = 0;
  // Appends to `ready` the indices (into Begin's list) in [begin, end) that are resident and not yet handed out, and
  // to `failed` those whose read failed (index, error; never handed out, nothing to Release: no partly read expert
  // is ever computed with, and only the rows routed to it are lost). With `wait`, blocks until at least one index
  // is in either list (unless all are handed out or failed). An error return is a bug in the store, not a read.
  virtual Status NextReady(size_t begin, size_t end, std::vector<size_t>& ready,
                           std::vector<std::pair<size_t, Status>>& failed, bool wait) = 0;
  // The weights of a handed-out expert; valid until Release(i) or End().
  virtual const FastMlpWeights& Weights(size_t i) const = 0;
  // The caller is done with expert i (its memory may be reused for another expert of the pass).
  virtual void Release(size_t i) = 0;
  // Ends the pass (also after an error): releases everything and waits for the pass's reads still in flight.
  virtual void End() = 0;
  // --expert-prefetch next-layer: between passes (after End), starts reading `experts` (distinct) of `moe`, the
  // next MoE layer's likely experts, into slots no pass holds. A guess only: nothing waits for these reads, a pass
  // that does not want them cancels those not started, and a failed one fails no request (the expert is read
  // again if a pass wants it). Default: nothing.
  virtual void Prefetch(const FastMoeWeights& moe, std::span<const int32_t> experts) { (void)moe, (void)experts; }
};

// Cache counters since the start (or ResetStats).
struct ExpertCacheStats {
  int64_t hits = 0, misses = 0;
  uint64_t bytes_read = 0;
  double read_seconds = 0;    // summed over the reader threads
  int64_t failed_reads = 0;   // reads that failed twice (the expert failed)
  int64_t corrupt_reads = 0;  // of those, reads whose bytes were not the container's (checksum, changed file)
  int64_t retried_reads = 0;  // reads that failed once and were tried again
  // --expert-prefetch: reads started by Prefetch; of those, experts a pass then asked for (used), evicted unasked
  // (their bytes wasted), cancelled before the read started, failed (no request failed by it).
  int64_t prefetch_issued = 0, prefetch_used = 0, prefetch_cancelled = 0, prefetch_failed = 0;
  uint64_t prefetch_wasted_bytes = 0;
};

// How misses are read (--expert-io): a pool of threads each blocking in pread, or one thread keeping many reads in
// flight through io_uring. `glint bench-expert-io` measures both on a drive (docs/expert-cache.md).
enum class ExpertIo { kPread, kUring };
std::string_view ExpertIoName(ExpertIo io);  // "pread", "uring"
Result<ExpertIo> ParseExpertIo(std::string_view name);

struct ExpertCacheOptions {
  uint64_t budget_bytes = 0;  // RAM for cached experts (--expert-memory)
  int readers = 4;            // reads in flight: pread threads, or the io_uring queue depth
  // Eviction (--expert-policy): chosen by replaying routing traces (docs/expert-cache.md "Policy").
  ExpertPolicy policy = ExpertPolicy::kFrequencyWeighted;
};

// Routed experts read from the container's per-expert extents into a fixed set of equal slots, evicting the unpinned
// slot the policy ranks lowest (ExpertPolicyRanker, shared with the trace replay). Thread-safe as far as the
// ExpertStore contract needs (one pass at a time, reads on the reader threads).
class DiskExpertCache final : public ExpertStore {
 public:
  // `weights` are bound to `container` (their expert views point into its mapping, which is never touched for
  // routed experts); `reader` reads the container's file. Refuses a budget below one layer's top-k experts.
  static Result<std::unique_ptr<DiskExpertCache>> Create(const FastWeights& weights, const ContainerFile& container,
                                                         int64_t experts_per_token,
                                                         std::unique_ptr<ExtentReader> reader,
                                                         const ExpertCacheOptions& options,
                                                         std::unique_ptr<UringExtentReader> uring = nullptr);
  ~DiskExpertCache() override;

  Status Begin(const FastMoeWeights& moe, std::span<const int32_t> experts, std::span<const int64_t> rows) override;
  Status NextReady(size_t begin, size_t end, std::vector<size_t>& ready, std::vector<std::pair<size_t, Status>>& failed,
                   bool wait) override;
  const FastMlpWeights& Weights(size_t i) const override;
  void Release(size_t i) override;
  void End() override;
  void Prefetch(const FastMoeWeights& moe, std::span<const int32_t> experts) override;

  int64_t slots() const { return static_cast<int64_t>(slots_.size()); }
  uint64_t slot_bytes() const { return slot_bytes_; }
  int64_t moe_layers() const { return static_cast<int64_t>(layers_.size()); }
  uint64_t routed_bytes() const { return routed_bytes_; }  // all routed experts' extents, as on disk
  // Memory the reads need beyond the slots, counted in the budget: O_DIRECT reads land in the slots themselves
  // (no staging buffers; the bandwidth probe reads into empty slots), so this is the io_uring ring's mapping (0
  // with the pread threads, whose queue is the slot indices in read_queue_).
  uint64_t read_buffer_bytes() const { return read_buffer_bytes_; }
  bool direct() const { return reader_->direct(); }
  ExpertIo io() const { return uring_ != nullptr ? ExpertIo::kUring : ExpertIo::kPread; }
  ExpertPolicy policy() const { return ranker_->policy(); }
  ExpertCacheStats stats() const;
  // The first read whose bytes were not the container's (an extent that failed its checksum, a file changed while
  // in use): the container is damaged for good (/health says so); Ok while every read matched.
  Status damage() const;
  // --expert-profile: reads `hot` ((cache layer, expert), hottest first; cache layers in the model's order, MTP
  // last) into slots kept for good (never evicted), at most half of the slots. Returns how many it kept. Call
  // before the first pass.
  Result<int64_t> KeepHot(std::span<const std::pair<int64_t, int64_t>> hot);
  int64_t kept_slots() const;
  // Slots pinned now (0 between passes: tests check that no pass leaks a pin) and slots holding an expert.
  int64_t pinned_slots() const;
  int64_t ready_slots() const;
  void ResetStats();
  // The container's O_DIRECT read bandwidth in GB/s: up to `max_bytes` of expert extents (chosen pseudo-randomly,
  // as misses are), read by as many threads as the cache has readers (at most one per empty slot: the probe reads
  // into empty slots, allocating nothing beyond the budget). Not counted in stats(). Call before the first pass.
  Result<double> ProbeReadGbps(uint64_t max_bytes) const;

 private:
  struct Expert {                    // one routed expert as stored
    uint64_t offset = 0, bytes = 0;  // its extent
    FastMlpWeights mapped;           // views into the container mapping (layouts; pointers rebased per slot)
    ContainerExtent extent;          // with its checksum, checked after every read
  };
  struct Layer {
    std::vector<Expert> experts;
    const uint8_t* map_base = nullptr;  // the container mapping's first byte
    std::string name;                   // "layers.3.moe", "mtp.moe": for errors
  };
  enum class SlotState { kEmpty, kLoading, kReady };
  struct Slot {
    uint8_t* data = nullptr;
    SlotState state = SlotState::kEmpty;
    int64_t layer = -1, expert = -1;
    int pins = 0;
    ExpertUse use;            // what the eviction policy ranks it by
    bool kept = false;        // --expert-profile: held for good
    bool prefetched = false;  // read by Prefetch and not yet asked for by a pass
    FastMlpWeights weights;   // views into data, when ready
  };
  struct Wanted {  // one expert of the current pass
    int64_t expert = 0;
    int64_t rows = 0;   // pass rows routed to it
    int64_t slot = -1;  // -1: not yet assigned a slot
    bool handed_out = false, released = false;
    Status error;
  };

  DiskExpertCache() = default;
  void Pump(std::unique_lock<std::mutex>& lock);  // assigns free slots to waiting experts and queues their reads
  int64_t Victim() const;                  // an unpinned, not loading slot: empty, else the policy's lowest rank; or -1
  void UseSlot(Slot& slot, int64_t rows);  // the policy's bookkeeping of a use (lock held)
  void Evict(Slot& slot);                  // a ready slot is to hold another expert (lock held)
  void CancelUnwantedPrefetches();         // Begin: queued prefetch reads the pass did not ask for (lock held)
  // Reads an expert's extent into `into` and checks it against the extent's checksum (DataLoss if it differs).
  Status ReadExpert(const Expert& expert, std::span<uint8_t> into) const;
  void ReaderLoop();  // a pread thread
  void UringLoop();   // the io_uring thread: submits every queued read (up to its depth), reaps completions
  // A read of slot s ended (lock held): the slot is ready, or emptied with the error given to the pass.
  void Landed(int64_t s, const Status& status);
  static FastMlpWeights Rebase(const FastMlpWeights& mapped, const uint8_t* from, uint8_t* to);

  std::vector<Layer> layers_;
  std::map<const FastMoeWeights*, int64_t> layer_of_;
  std::string container_path_;                // for errors
  std::unique_ptr<ExtentReader> reader_;      // preads (and the bandwidth probe)
  std::unique_ptr<UringExtentReader> uring_;  // null: the pread threads read
  uint64_t slot_bytes_ = 0, routed_bytes_ = 0, read_buffer_bytes_ = 0;
  std::unique_ptr<uint8_t, void (*)(void*)> memory_{nullptr, nullptr};
  std::vector<Slot> slots_;
  std::map<std::pair<int64_t, int64_t>, int64_t> slot_of_;  // (layer, expert) → slot holding or loading it

  mutable std::mutex mutex_;
  std::condition_variable landed_, queued_;
  std::deque<int64_t> read_queue_;  // slots to read
  int64_t in_flight_ = 0;           // queued or being read
  bool stopping_ = false;
  std::vector<std::thread> readers_;
  std::optional<ExpertPolicyRanker> ranker_;
  uint64_t passes_ = 0;  // the policy's clock: one tick per Begin
  int64_t pass_layer_ = -1;
  std::vector<Wanted> wanted_;
  std::map<int64_t, Status> slot_errors_;  // read failures of the pass, by slot
  ExpertCacheStats stats_;
  Status damage_;  // the first corrupt read
};

}  // namespace glint
