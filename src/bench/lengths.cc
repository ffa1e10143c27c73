#include "bench/lengths.h"

#include <cmath>

namespace glint::bench {

Result<RangeConvention> ParseRangeConvention(std::string_view name) {
  if (name == "inferencex") return RangeConvention::kInferenceX;
  if (name == "vllm") return RangeConvention::kVllm;
  return InvalidArgument("unknown range convention '", name, "': expected 'inferencex' ([r·L, L]) or 'vllm' ",
                         "([L(1−r), L(1+r)])");
}

std::string_view RangeConventionName(RangeConvention convention) {
  return convention == RangeConvention::kInferenceX ? "inferencex" : "vllm";
}

double FixedLengthRatio(RangeConvention convention) { return convention == RangeConvention::kInferenceX ? 1.0 : 0.0; }

Result<LengthRange> ComputeLengthRange(int64_t nominal, double ratio, RangeConvention convention) {
  if (nominal < 1) return InvalidArgument("length ", nominal, " must be at least 1 token");
  LengthRange range;
  const double length = static_cast<double>(nominal);
  if (convention == RangeConvention::kInferenceX) {
    if (!(ratio >= 0.0 && ratio <= 1.0)) {
      return InvalidArgument("range ratio ", ratio, " is outside [0, 1] for the inferencex convention ",
                             "(lengths in [r·L, L]; r = 1 means fixed)");
    }
    range.min = static_cast<int64_t>(std::floor(length * ratio));
    range.max = nominal;
  } else {
    if (!(ratio >= 0.0 && ratio < 1.0)) {
      return InvalidArgument("range ratio ", ratio, " is outside [0, 1) for the vllm convention ",
                             "(lengths in [L(1−r), L(1+r)]; r = 0 means fixed)");
    }
    range.min = static_cast<int64_t>(std::floor(length * (1.0 - ratio)));
    range.max = static_cast<int64_t>(std::ceil(length * (1.0 + ratio)));
  }
  if (range.min < 1) range.min = 1;
  return range;
}

int64_t Rng::UniformInt(int64_t low, int64_t high) {
  GLINT_CHECK(low <= high) << low << " > " << high;
  const uint64_t span = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  if (span == UINT64_MAX) return static_cast<int64_t>(Next());
  const uint64_t buckets = span + 1;
  // Accept draws below the largest multiple of `buckets` that fits in 2^64, so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % buckets + 1) % buckets;
  uint64_t draw = Next();
  while (draw > limit) draw = Next();
  return low + static_cast<int64_t>(draw % buckets);
}

uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace glint::bench
