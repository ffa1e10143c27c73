// Where the time of a prefill/decode transfer goes (docs/disaggregation.md "Where the time goes"): each side cuts
// its part of a transfer into phases laid back to back on the steady clock, so that the phases of one transfer sum
// to its total exactly (integer nanoseconds), and /metrics shows one histogram per phase.
//
//   decode server   lease → connect → handshake → send → prefill → stream → import        (first token out)
//   prefill server  handshake → queue → compute → tail                                     (last byte written)
//
// decode: `lease` from the request reaching the backend to its memory reserved (an engine round trip); `connect`
// the TCP connection to the prefill server; `handshake` HELLO both ways (and the proofs, with a shared secret);
// `send` PROMPT, its images and END written; `prefill` until STATE arrives (the prefill server's queue and every
// chunk but the last, and the last chunk's first layer); `stream` STATE to END (the layers as the last chunk
// computes them, then the logits); `import` from the state held to the first token handed out (the decode
// engine's next round, the copy into the lease, the first sample).
// prefill: `handshake` from the connection accepted to the prompt submitted; `queue` to the prompt's first step
// (the step in progress, other prompts first); `compute` the prompt's steps (the engine's own clock); `tail` from
// the prefill's end to the last byte written.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "server/backend.h"
#include "server/metrics.h"

namespace glint::server {

enum class DecodePhase : size_t { kLease, kConnect, kHandshake, kSend, kPrefill, kStream, kImport };
inline constexpr std::array<const char*, 7> kDecodePhaseNames = {"lease",   "connect", "handshake", "send",
                                                                 "prefill", "stream",  "import"};
enum class PrefillPhase : size_t { kHandshake, kQueue, kCompute, kTail };
inline constexpr std::array<const char*, 4> kPrefillPhaseNames = {"handshake", "queue", "compute", "tail"};

// Laps of the steady clock: each Lap gives the time since the previous one (or the start) to a phase.
class PhaseLaps {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PhaseLaps(size_t phases) : nanoseconds_(phases, 0), start_(Clock::now()), last_(start_) {}
  template <typename Phase>
  void Lap(Phase phase) {
    LapAt(static_cast<size_t>(phase), Clock::now());
  }
  void LapAt(size_t phase, Clock::time_point now);
  // Moves `nanoseconds` of `from`'s time to `to` (a lap that another clock splits, e.g. the engine's).
  void Split(size_t from, size_t to, int64_t nanoseconds);
  int64_t nanoseconds(size_t phase) const { return nanoseconds_.at(phase); }
  int64_t total_nanoseconds() const;  // start → the last lap: the sum of the phases
  // "lease 0.12 ms, connect 0.05 ms, ..., total 41.3 ms".
  std::string Describe(std::span<const char* const> names) const;

 private:
  std::vector<int64_t> nanoseconds_;
  Clock::time_point start_, last_;
};

// A histogram of seconds per phase, and one of the total. Thread-safe.
class PhaseHistograms {
 public:
  explicit PhaseHistograms(std::span<const char* const> names);
  void Observe(const PhaseLaps& laps);
  // (phase, figures) for each phase, then ("total", figures): what BackendMetrics carries to /metrics.
  std::vector<std::pair<std::string, HistogramFigures>> Figures() const;

 private:
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Histogram>> phases_;  // [names_ + 1]: the total last
};

}  // namespace glint::server
