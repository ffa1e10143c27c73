// AVX-512 VNNI int4 kernels (gemm_i4.h): the int8 tiles (gemm_tile_avx512.h) with an inner step that unpacks
// nibbles. One 64-byte load holds two 4-k steps of 16 rows (low nibbles: k 8p…8p+3, high: 8p+4…8p+7); each step is
// the int8 kernels' vpdpbusd operand after `& 0x0f` (low) or `>> 4 & 0x0f` (high), weights biased by +8.
// The load is repeated for the high step instead of keeping both unpacked halves: RB = 4 row blocks × 6 tokens
// already hold 24 of the 32 registers, and a second load from L1 is cheaper than spilling accumulators.
// GCC 12 reports its own AVX-512 intrinsics (the _mm*_undefined_* idiom) as maybe-uninitialized: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/gemm_i4.h"
#include "kernels/gemm_tile_avx512.h"

namespace glint::internal {
namespace {

struct Int4Codes {
  template <int RB, int NT>
  GLINT_INLINE_AVX512 static void Accumulate(__m512i (&acc)[RB][NT], const uint8_t* codes, int64_t block_bytes,
                                             const int8_t* x, int64_t x_stride, int64_t k_begin, int64_t k_end) {
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    for (int64_t k8 = k_begin / 8; k8 < k_end / 8; ++k8) {
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        __m512i weights[RB];
#pragma GCC unroll 8
        for (int i = 0; i < RB; ++i) {
          const __m512i packed = _mm512_loadu_si512(codes + i * block_bytes + k8 * 64);
          weights[i] = _mm512_and_si512(half == 0 ? packed : _mm512_srli_epi16(packed, 4), nibble);
        }
#pragma GCC unroll 8
        for (int j = 0; j < NT; ++j) {
          const __m512i activation = avx512_tiles::Broadcast4(x + j * x_stride + 8 * k8 + 4 * half);
#pragma GCC unroll 8
          for (int i = 0; i < RB; ++i) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], weights[i], activation);
        }
      }
    }
  }
  // Σ (w + 8)·x − 8·Σx; the quantizer stores 128·Σx, a multiple of 16.
  static int32_t Correction(int32_t int8_correction) { return int8_correction / 16; }
};

}  // namespace

const Int4Kernels& Int4KernelsAvx512() {
  static const Int4Kernels kernels{avx512_tiles::Gemm<Int4Codes, Int4MatrixView>,
                                   avx512_tiles::GroupSums<Int4Codes, Int4MatrixView>};
  return kernels;
}

}  // namespace glint::internal
