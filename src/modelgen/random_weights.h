// Deterministic random weights for tiny checkpoints, bit-identical on every platform and compiler.
//
// Each tensor has its own stream (seed and name hashed together), and element k of a stream is a pure function of
// (stream, k): splitmix64 is counter-based (Steele, Lea & Flood 2014: x_k = Mix(s + (k+1)·γ)), so a tensor can be
// generated in any order and in bands, as the multi-GB bench preset needs. Normal-like samples use no libm: the
// sum of four 16-bit uniforms (Irwin–Hall, n = 4), centred and scaled to unit variance, is computed exactly up to
// one final multiplication, so the same seed gives the same bytes everywhere. (Box–Muller would need log and cos,
// whose last bit differs between C libraries.) The distribution is a smooth bell bounded at ±2√3 ≈ ±3.46.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "io/checkpoint_schema.h"
#include "io/config.h"

namespace glint {

inline uint64_t SplitMix64Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline constexpr uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ull;

// Element `index` of the stream `stream`.
inline uint64_t SplitMix64At(uint64_t stream, uint64_t index) {
  return SplitMix64Mix(stream + (index + 1) * kSplitMix64Gamma);
}

// Zero mean, unit variance, |x| ≤ 2√3; see the file comment.
inline float UnitBellFromBits(uint64_t bits) {
  const int32_t sum =
      static_cast<int32_t>((bits & 0xffff) + ((bits >> 16) & 0xffff) + ((bits >> 32) & 0xffff) + (bits >> 48));
  // Σ (b_i + 0.5) / 65536 − 2 = (sum + 2 − 131072) / 65536: an exact integer over a power of two.
  const float centred = static_cast<float>(sum + 2 - 131072) * (1.0f / 65536.0f);
  return centred * 1.7320508075688772f;  // × √3: the sum of 4 uniforms has variance 4/12
}

// The stream of one tensor: FNV-1a of its name, mixed with the seed.
uint64_t TensorStream(uint64_t seed, std::string_view name);

// How a tensor is initialised: value = mean + stddev · bell. Magnitudes follow the golden fixtures
// (tests/data/golden/README.md and their model.safetensors): linear weights N(0, 1/in), norms ≈ 1, small mHC
// coefficients, KDA decay parameters in the release's range, small router bias.
struct InitRule {
  float mean = 0.0f;
  float stddev = 0.0f;
};
Result<InitRule> InitRuleFor(const TensorSpec& spec, const ModelConfig& config);

// Writes the intended (pre-rounding) values of flat elements [begin, end) of `spec` into out[0, end − begin).
void FillTensorValues(InitRule rule, uint64_t stream, int64_t begin, int64_t end, float* out);

}  // namespace glint
