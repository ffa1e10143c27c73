// What the bf16 attention kernels (mla_ops_bf16.cc, mla_ops_amx.cc) share: fp32 → bf16 rows with AVX512-BF16, the two
// pair layouts their products take (q̃ transposed in pairs of the rank, latent rows interleaved in pairs of
// positions) and the size of their scratch sections. Include only from translation units whose callers of ToBf16 carry
// GLINT_TARGET_BF16 (or a superset of it).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/transpose_avx512.h"

#define GLINT_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

namespace glint::mla {

// Floats of a scratch section of `bytes` that keeps the next section on a 64-byte boundary.
inline int64_t Floats64(int64_t bytes) { return (bytes + 63) / 64 * 16; }

// n fp32 values → n bf16 (round to nearest even, as vcvtne2ps2bf16), then zeros up to `padded`.
GLINT_TARGET_BF16 inline void ToBf16(const float* from, int64_t n, int64_t padded, uint16_t* to) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(from + i + 16), _mm512_loadu_ps(from + i));
    _mm512_storeu_si512(to + i, reinterpret_cast<__m512i>(v));
  }
  const auto first = [](int64_t k) { return static_cast<__mmask16>(k >= 16 ? 0xffff : k > 0 ? (1u << k) - 1 : 0); };
  for (; i < padded; i += 16) {  // masked: loads stop at n (zeros after), stores at padded
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(first(n - i), from + i));
    _mm256_mask_storeu_epi16(to + i, first(padded - i), reinterpret_cast<__m256i>(v));
  }
}

// qt[k][h] = (q[h][2k], q[h][2k + 1]) as one 32-bit word, for heads h < hp and pairs k < rank32 / 2: q [hp][rank32]
// bf16 (hp and rank32 / 2 multiples of 16), transposed as 32-bit words in 16 × 16 blocks of registers.
GLINT_TARGET_BF16 inline void TransposeRankPairs(const uint16_t* q, int64_t hp, int64_t rank32, uint32_t* qt) {
  const uint32_t* words = reinterpret_cast<const uint32_t*>(q);
  const int64_t pairs = rank32 / 2;
  for (int64_t h0 = 0; h0 < hp; h0 += 16) {
    for (int64_t k0 = 0; k0 < pairs; k0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(words + (h0 + i) * pairs + k0);
      internal::Transpose16x16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(qt + (k0 + i) * hp + h0, r[i]);
    }
  }
}

// out[r] = (even[r], odd[r]) as one 32-bit word for r < rank32 (a multiple of 32): two latent rows interleaved into
// pairs of positions, in rank order.
GLINT_TARGET_BF16 inline void InterleavePositions(const uint16_t* even, const uint16_t* odd, int64_t rank32,
                                                  uint32_t* out) {
  // 16-bit lanes 2k and 2k + 1 of the result take even[k] and odd[k] (index 32 + k: the second operand).
  const __m512i first =
      _mm512_setr_epi32(0x00200000, 0x00210001, 0x00220002, 0x00230003, 0x00240004, 0x00250005, 0x00260006, 0x00270007,
                        0x00280008, 0x00290009, 0x002a000a, 0x002b000b, 0x002c000c, 0x002d000d, 0x002e000e, 0x002f000f);
  const __m512i second = _mm512_add_epi16(first, _mm512_set1_epi16(16));
  for (int64_t r = 0; r < rank32; r += 32) {
    const __m512i a = _mm512_loadu_si512(even + r), b = _mm512_loadu_si512(odd + r);
    _mm512_storeu_si512(out + r, _mm512_permutex2var_epi16(a, first, b));
    _mm512_storeu_si512(out + r + 16, _mm512_permutex2var_epi16(a, second, b));
  }
}

}  // namespace glint::mla
