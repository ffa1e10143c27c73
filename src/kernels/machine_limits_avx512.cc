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
  return _mm512_reduce_add_epi32(total);
}

}  // namespace glint::internal
