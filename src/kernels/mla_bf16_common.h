// What the bf16 attention kernels (mla_ops_bf16.cc, mla_ops_amx.cc) share: fp32 → bf16 rows with AVX512-BF16 and
// the size of their scratch sections. Include only from translation units whose callers of ToBf16 carry
// GLINT_TARGET_BF16 (or a superset of it).
#pragma once

#include <immintrin.h>

#include <cstdint>

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

}  // namespace glint::mla
