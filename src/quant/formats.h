// Number formats of the checkpoint and their exact conversions to and from fp32.
//
// fp8 e4m3fn (OCP "E4M3FN", torch.float8_e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities;
// S.1111.111 is NaN; max finite 448 = 1.75·2^8; subnormals m/8·2^-6. Every code converts exactly to fp32.
// bf16: the top 16 bits of an IEEE fp32. fp32 → bf16 rounds to nearest, ties to even; NaN stays NaN (quiet).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace glint {

using bf16_bits = uint16_t;

inline float Bf16ToFloat(bf16_bits bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

inline bf16_bits FloatToBf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_bits>((bits >> 16) | 0x0040u);  // quiet NaN
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. Overflow carries into the
  // exponent and rounds to infinity exactly as IEEE requires.
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_bits>((bits + rounding) >> 16);
}

// Rounds an fp32 to the nearest bf16 value and back (the rounding points of the HF bf16 model).
inline float RoundToBf16(float value) { return Bf16ToFloat(FloatToBf16(value)); }

// Decodes one IEEE binary16 (F16 tensors of a checkpoint). Exact: every fp16 value is an fp32 value.
inline float Fp16ToFloat(uint16_t bits) {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: m · 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));         // re-bias 15 → 127
}

// Decodes one e4m3fn byte. Exact; NaN codes (0x7f, 0xff) give NaN.
inline float Fp8E4m3ToFloat(uint8_t code) {
  const uint32_t sign = (code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7fc00000u);
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // m/8 · 2^-6
  } else {
    // Re-bias 7 → 127 and widen the mantissa 3 → 23 bits.
    magnitude = std::bit_cast<float>(((exponent + 120u) << 23) | (mantissa << 20));
  }
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
}

// Encodes an fp32 as e4m3fn, round to nearest even, saturating to ±448 (as torch's cast with saturation does
// when producing FP8 checkpoints; values beyond 448 never occur in a block scaled by amax/448). NaN → 0x7f.
uint8_t FloatToFp8E4m3(float value);

// A lookup table of all 256 decoded codes, for hot loops.
const float* Fp8E4m3Table();

}  // namespace glint
