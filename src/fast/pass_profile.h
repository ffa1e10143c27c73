// Where a forward call's wall time goes, by part of the fast path (`glint bench-model`'s prefill profile,
// docs/bench.md "Prefill profile"). Exclusive times: entering a part pauses the part it was entered from, so the
// parts add up to the profiled wall time exactly and a product inside the MoE counts as a product, not as MoE.
//
// Only the thread that drives a pass enters and leaves parts (worker tasks never do: WorkerPool::Run returns when
// its tasks are done), so the profile needs no synchronisation. Off (the default), Enter and Leave are one
// predictable branch each and read no clock.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace glint {

enum class PassPart : uint8_t {
  kRest,             // everything outside a named part: embedding, residual adds, logits' softmax, bookkeeping
  kInt8Products,     // int8 / int4 matrix products (the kernels' gemm over quantized activations)
  kBf16Products,     // exact bf16 products (gate projections, the router, the indexer's projections)
  kActivationQuant,  // activations quantized to int8 for the products (the MoE's SwiGLU is fused into its share)
  kKdaChunks,        // the KDA delta rule: chunked WY form and the fused decode step
  kKdaElementwise,   // KDA short conv + SiLU, L2 norms, decay gates, gated RMSNorm
  kMlaAttention,     // absorbed MLA attention over the selected latents
  kIndexer,          // DSA indexer: pooled-key appends, scoring, top-k selection
  kMhc,              // mHC reads (coefficients, collapse, RMSNorm) and writes
  kMoeRouting,       // routing from the logits, grouping rows by expert, gathering and combining expert rows
  kSwiGlu,           // the dense MLP's SwiGLU
  kCount,
};

inline constexpr int kPassParts = static_cast<int>(PassPart::kCount);

// A short name for reports ("int8 products", …).
const char* PassPartName(PassPart part);

class PassProfile {
 public:
  using Seconds = std::array<double, kPassParts>;

  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }

  // Starts a profiled call: the clock runs for kRest until a part is entered.
  void Start() {
    if (!enabled_) return;
    current_ = PassPart::kRest;
    since_ = Clock::now();
  }
  // Ends it: the time since the last switch goes to the current part.
  void Stop() {
    if (enabled_) Charge();
  }
  // `part` becomes current; returns the part to restore with Leave.
  PassPart Enter(PassPart part) {
    if (!enabled_) return part;
    const PassPart previous = current_;
    Charge();
    current_ = part;
    return previous;
  }
  void Leave(PassPart previous) {
    if (!enabled_) return;
    Charge();
    current_ = previous;
  }
  void Reset() { seconds_.fill(0.0); }
  const Seconds& seconds() const { return seconds_; }

 private:
  using Clock = std::chrono::steady_clock;
  void Charge() {
    const Clock::time_point now = Clock::now();
    seconds_[static_cast<int>(current_)] += std::chrono::duration<double>(now - since_).count();
    since_ = now;
  }

  bool enabled_ = false;
  PassPart current_ = PassPart::kRest;
  Clock::time_point since_{};
  Seconds seconds_{};
};

// Multiply-adds, weight bytes and wall time of a kind of integer product (bench-model: the dense products and the
// routed and shared experts' are timed apart, because their token counts — the whole pass against a few rows per
// expert — give them different efficiencies and different bounds: compute or memory).
struct ProductTime {
  uint64_t macs = 0;
  uint64_t weight_bytes = 0;  // codes and scales read (each product's matrix once)
  double seconds = 0;
  void Add(int64_t multiply_adds, uint64_t bytes, double wall_seconds) {
    macs += static_cast<uint64_t>(multiply_adds);
    weight_bytes += bytes;
    seconds += wall_seconds;
  }
  ProductTime operator+(const ProductTime& other) const {
    return {macs + other.macs, weight_bytes + other.weight_bytes, seconds + other.seconds};
  }
  double Gops() const { return seconds > 0 ? 2.0 * static_cast<double>(macs) / seconds / 1e9 : 0.0; }
};

// A product kind's bound alone: its weight bytes at the machine's bandwidth, or its multiply-adds at the integer
// peak, whichever is longer.
struct ProductBound {
  double memory_seconds = 0;   // weight_bytes ÷ bandwidth
  double compute_seconds = 0;  // 2 · macs ÷ peak
  double seconds() const { return memory_seconds > compute_seconds ? memory_seconds : compute_seconds; }
  bool compute_bound() const { return compute_seconds > memory_seconds; }
};

// A decode step's bound by part (bench-model, issue 36): the dense products and the experts' each bounded alone,
// plus the step's other weight bytes (bf16 router, gates, norms) at the bandwidth. The parts run one after the other
// in a step, so their bounds add — unlike the whole step's roofline, where the dense products' arithmetic could
// hide behind the experts' streaming.
struct DecodeStepBound {
  ProductBound dense, experts;
  double other_weights_seconds = 0;  // (bytes_per_step − both kinds' weight bytes) ÷ bandwidth, at least 0
  double seconds() const { return dense.seconds() + experts.seconds() + other_weights_seconds; }
};
// bandwidth in bytes/s, peak in integer ops/s (2 per multiply-add), bytes_per_step every weight byte a step reads.
DecodeStepBound BoundDecodeStep(const ProductTime& dense, const ProductTime& experts, double bytes_per_step,
                                double bandwidth, double peak);

// The enclosing scope's time is charged to `part` (exclusive of the parts entered inside it).
class ScopedPart {
 public:
  ScopedPart(PassProfile& profile, PassPart part) : profile_(profile), previous_(profile.Enter(part)) {}
  ~ScopedPart() { profile_.Leave(previous_); }
  ScopedPart(const ScopedPart&) = delete;
  ScopedPart& operator=(const ScopedPart&) = delete;

 private:
  PassProfile& profile_;
  PassPart previous_;
};

}  // namespace glint
