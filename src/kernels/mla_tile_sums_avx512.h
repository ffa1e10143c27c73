// The 4 × 4 score tile's horizontal sums on AVX-512, for the bf16 attention kernel (mla_ops_bf16.cc; the fp32 kernel
// keeps its heads in the lanes and needs none). Include only where AVX-512 code may be compiled: the function carries
// its target attribute.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

namespace glint::mla {

#define GLINT_TILE_SUMS_INLINE __attribute__((target("avx512f"))) inline __attribute__((always_inline))

// [x, y] → [x lanes k + k+8, y lanes k + k+8] (8 lanes each)
GLINT_TILE_SUMS_INLINE __m512 TileSumsHalves(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
}
// two halves results → 4 blocks: each 8-lane sum folded to 4 lanes (k + k+4)
GLINT_TILE_SUMS_INLINE __m512 TileSumsQuarters(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}
// in every block: [x0 + x2, x1 + x3, y0 + y2, y1 + y3], then [x0 + x1, x2 + x3, y0 + y1, y2 + y3]
GLINT_TILE_SUMS_INLINE __m512 TileSumsPairs(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x44), _mm512_shuffle_ps(x, y, 0xEE));
}
GLINT_TILE_SUMS_INLINE __m512 TileSumsSingles(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_ps(x, y, 0x88), _mm512_shuffle_ps(x, y, 0xDD));
}

// The 16 lane sums of a score tile's accumulators a{head}{position}, as one vector: block h (4 lanes) holds head h's
// sums of positions 0–3. SumOfLanes of a 512-bit vector is GCC's _mm512_reduce_add_ps, which adds lane k + 8 to lane
// k, then k + 4, k + 2 and k + 1 of the result; this tree adds the same pairs for 16 vectors at once (15 additions,
// 30 shuffles instead of 16 × 8 instructions), so every sum is bit-identical. perf put 22 % of the score phase after
// its loop (64 heads, 256 positions, rank 512) with 16 SumOfLanes.
GLINT_TILE_SUMS_INLINE __m512 TileSums512(__m512 a00, __m512 a01, __m512 a02, __m512 a03, __m512 a10, __m512 a11,
                                          __m512 a12, __m512 a13, __m512 a20, __m512 a21, __m512 a22, __m512 a23,
                                          __m512 a30, __m512 a31, __m512 a32, __m512 a33) {
  // Position j of the 4 heads, one head per block.
  const __m512 p0 = TileSumsQuarters(TileSumsHalves(a00, a10), TileSumsHalves(a20, a30));
  const __m512 p1 = TileSumsQuarters(TileSumsHalves(a01, a11), TileSumsHalves(a21, a31));
  const __m512 p2 = TileSumsQuarters(TileSumsHalves(a02, a12), TileSumsHalves(a22, a32));
  const __m512 p3 = TileSumsQuarters(TileSumsHalves(a03, a13), TileSumsHalves(a23, a33));
  return TileSumsSingles(TileSumsPairs(p0, p1), TileSumsPairs(p2, p3));
}

#undef GLINT_TILE_SUMS_INLINE

}  // namespace glint::mla
#endif
