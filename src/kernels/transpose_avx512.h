// A 16 × 16 transpose of 32-bit lanes in AVX-512 registers, shared by the kernels that turn 16 accumulators into 16
// lanes (the indexer's int8 scores on VNNI and AMX) or rows into columns (the KDA chunk's Gram keys). Include it
// only from code compiled for AVX-512 dispatch: the function carries its target attribute, and callers with a wider
// target (VNNI, AMX, Highway's AVX-512 targets) inline it.
#pragma once

#include <immintrin.h>

namespace glint::internal {

// r[i] = row i on entry, column i on return: unpack 32-bit, unpack 64-bit, then a 4 × 4 transpose of the 128-bit
// chunks in two rounds of shuffle_i32x4 (64 shuffles for 256 values).
__attribute__((target("avx512f"))) inline __attribute__((always_inline)) void Transpose16x16(__m512i (&r)[16]) {
  __m512i t[16], u[16];
  for (int p = 0; p < 16; p += 2) {
    t[p] = _mm512_unpacklo_epi32(r[p], r[p + 1]);      // chunk k: r_p[4k], r_p+1[4k], r_p[4k+1], r_p+1[4k+1]
    t[p + 1] = _mm512_unpackhi_epi32(r[p], r[p + 1]);  // the same for 4k+2, 4k+3
  }
  for (int g = 0; g < 4; ++g) {  // u[4g + i], chunk k: rows 4g..4g+3 at column 4k + i
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int i = 0; i < 4; ++i) {  // column 4k + i gathers chunk k of u[i], u[4 + i], u[8 + i], u[12 + i]
    const __m512i x0 = _mm512_shuffle_i32x4(u[i], u[4 + i], 0x44);  // A0 A1 B0 B1
    const __m512i x1 = _mm512_shuffle_i32x4(u[i], u[4 + i], 0xee);  // A2 A3 B2 B3
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + i], u[12 + i], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + i], u[12 + i], 0xee);
    r[i] = _mm512_shuffle_i32x4(x0, y0, 0x88);       // A0 B0 C0 D0
    r[4 + i] = _mm512_shuffle_i32x4(x0, y0, 0xdd);   // A1 B1 C1 D1
    r[8 + i] = _mm512_shuffle_i32x4(x1, y1, 0x88);   // A2 B2 C2 D2
    r[12 + i] = _mm512_shuffle_i32x4(x1, y1, 0xdd);  // A3 B3 C3 D3
  }
}

}  // namespace glint::internal
