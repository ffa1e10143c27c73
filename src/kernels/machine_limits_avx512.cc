// The VNNI peak loop (machine_limits.h). 24 independent accumulators cover vpdpbusd's latency × throughput on
// current cores (Zen 4: 1 zmm per cycle, ~4 cycles latency; Sapphire Rapids: 2 per cycle, 5 cycles).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, see gemm_i8_avx512.cc
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "kernels/machine_limits.h"

namespace glint::internal {

__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t VnniLoop(int64_t iterations) {
  __m512i acc[kVnniPerIteration];
#pragma GCC unroll 24
  for (int i = 0; i < kVnniPerIteration; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-1);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kVnniPerIteration; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
      // An empty asm that "uses" the accumulators keeps the compiler from folding the loop into a multiplication.
#pragma GCC unroll 24
    for (int i = 0; i < kVnniPerIteration; ++i) asm volatile("" : "+v"(acc[i]));
  }
  __m512i total = acc[0];
#pragma GCC unroll 24
  for (int i = 1; i < kVnniPerIteration; ++i) total = _mm512_add_epi32(total, acc[i]);
  // The accumulators wrap around after enough iterations (the value only has to depend on the work). Sum the lanes
  // as uint32, where wrapping is defined: _mm512_reduce_add_epi32 adds them as int, which UBSan reports.
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, total);
  uint32_t sum = 0;
  for (uint32_t lane : lanes) sum += lane;
  return static_cast<int64_t>(sum);
}

// Σ of 64-bit lanes over [data, data + n) read as 4 side-by-side streams with 64-byte loads (n a multiple of 32).
__attribute__((target("avx512f"))) uint64_t ReadSum(const uint64_t* data, int64_t n) {
  const int64_t quarter = n / 4;
  const uint64_t *a = data, *b = a + quarter, *c = b + quarter, *d = c + quarter;
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 8 <= quarter; i += 8) {
    s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(a + i));
    s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(b + i));
    s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(c + i));
    s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(d + i));
  }
  return _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
}

// a[i] = b[i] + s · c[i] with 64-byte loads and stores (n a multiple of 16).
__attribute__((target("avx512f"))) void Triad(float* a, const float* b, const float* c, float s, int64_t n) {
  const __m512 scale = _mm512_set1_ps(s);
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(a + i, _mm512_fmadd_ps(scale, _mm512_loadu_ps(c + i), _mm512_loadu_ps(b + i)));
  }
}

}  // namespace glint::internal
