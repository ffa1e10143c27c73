// Prompt and output lengths of the random workload, and the two conventions for --range-ratio in use today.
//
//   InferenceX (SemiAnalysis, and vLLM's benchmark_serving.py before 2025): L in [⌊r·L⌋, L]; r in [0, 1];
//     r = 1 means fixed lengths, r = 0.8 means "uniform in [0.8·L, L]".
//   vLLM `vllm bench serve --random-range-ratio`: L in [⌊L·(1 − r)⌋, ⌈L·(1 + r)⌉]; r in [0, 1); r = 0 means fixed.
//     The bounds are computed in double precision as vLLM's Python does, so L = 100, r = 0.1 gives [90, 111]
//     (100·1.1 = 110.00000000000001 rounds up).
// Both draw integers uniformly from the inclusive range. glint clamps the lower end to 1 token for inputs and
// outputs (a 0-token prompt or reply measures nothing).
#pragma once

#include <cstdint>
#include <random>
#include <string_view>

#include "base/status.h"

namespace glint::bench {

enum class RangeConvention { kInferenceX, kVllm };

Result<RangeConvention> ParseRangeConvention(std::string_view name);  // "inferencex" or "vllm"
std::string_view RangeConventionName(RangeConvention convention);
// The ratio that means "fixed lengths" in each convention: 1 for InferenceX, 0 for vLLM.
double FixedLengthRatio(RangeConvention convention);

struct LengthRange {
  int64_t min = 0;  // inclusive
  int64_t max = 0;  // inclusive
};

// Errors name the convention and its valid ratio interval when `ratio` is outside it, or when nominal < 1.
Result<LengthRange> ComputeLengthRange(int64_t nominal, double ratio, RangeConvention convention);

// Deterministic random numbers for workload generation (same seed, same binary → same prompts and lengths).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t Next() { return engine_(); }
  // Uniform integer in [low, high] by rejection sampling (no modulo bias; std::uniform_int_distribution is not
  // specified bit-for-bit across standard libraries).
  int64_t UniformInt(int64_t low, int64_t high);
  int64_t Sample(const LengthRange& range) { return UniformInt(range.min, range.max); }

 private:
  std::mt19937_64 engine_;
};

// Mixes two values into a seed (splitmix64 finaliser), so each concurrency level gets its own prompt stream.
uint64_t MixSeed(uint64_t seed, uint64_t stream);

}  // namespace glint::bench
