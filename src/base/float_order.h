// Floats as unsigned integers in the same order, for integer sorts and keys (the indexer's top-pool keys, the
// sampler's radix sort of the vocabulary).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace glint {

// An unsigned integer of `value` in the order of `<` on floats: larger value = larger integer; −0 and +0 map to the
// same integer; every NaN maps to 0, below every number (−inf included). Numbers never map to 0.
inline uint32_t OrderedFloatBits(float value) {
  if (std::isnan(value)) return 0;
  if (value == 0.0f) value = 0.0f;  // −0 and +0 compare equal
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  // Positive floats order as their bits; negative ones reversed.
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// The inverse of OrderedFloatBits on its image but 0 (a NaN's): +0 for the zeros.
inline float FloatOfOrderedBits(uint32_t ordered) {
  return std::bit_cast<float>((ordered & 0x80000000u) ? ordered & 0x7fffffffu : ~ordered);
}

}  // namespace glint
