// AVX-512 VNNI int8 kernels (gemm_i8.h). Functions carry the target attribute themselves (no per-file flags), so
// nothing compiled here can leak AVX-512 instructions into code that runs on other CPUs.
//
// The tiles, the register allocation and the fp32 epilogue are gemm_tile_avx512.h, shared with the int4 kernels;
// this file holds the activation quantizer and the int8 inner step (Int8Codes).
// GCC 12 reports its own AVX-512 intrinsics (the _mm*_undefined_* idiom) as maybe-uninitialized: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/gemm_i8.h"
#include "kernels/gemm_tile_avx512.h"

namespace glint::internal {
namespace {

GLINT_TARGET_AVX512 void QuantizeAvx512(const float* x, int64_t x_stride, int64_t tokens, int64_t cols, int64_t group,
                                        int64_t padded_cols, int8_t* codes, float* scales, int32_t* bias_correction) {
  const int64_t groups = padded_cols / group;
  const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 infinity = _mm512_set1_ps(__builtin_inff());
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = x + t * x_stride;
    int8_t* out = codes + t * padded_cols;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, end = std::min(cols, begin + group);
      __m512 vmax = _mm512_setzero_ps();
      __mmask16 nonfinite = 0;
      for (int64_t c = begin; c < end; c += 16) {
        const __mmask16 valid = end - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (end - c)) - 1);
        const __m512 magnitude = _mm512_and_ps(_mm512_maskz_loadu_ps(valid, row + c), sign_mask);
        nonfinite |= _mm512_cmp_ps_mask(magnitude, infinity, _CMP_NLT_UQ);  // NaN or ±inf
        vmax = _mm512_max_ps(vmax, magnitude);
      }
      if (nonfinite) {  // int8 cannot carry it: the group's scale is NaN, so every output it touches is NaN
        std::memset(out + begin, 0, static_cast<size_t>(group));
        scales[t * groups + g] = __builtin_nanf("");
        bias_correction[t * groups + g] = 0;
        continue;
      }
      const float amax = _mm512_reduce_max_ps(vmax);
      const __m512 inverse = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      __m512i sum = _mm512_setzero_si512();
      for (int64_t c = begin; c < begin + group; c += 16) {
        const __mmask16 valid = c >= end        ? __mmask16(0)
                                : end - c >= 16 ? __mmask16(0xffff)
                                                : __mmask16((1u << (end - c)) - 1);
        // cvtps rounds to nearest even (MXCSR default), as std::nearbyint in the scalar reference.
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(valid, row + c), inverse));
        q = _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
        sum = _mm512_add_epi32(sum, q);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c), _mm512_cvtepi32_epi8(q));
      }
      scales[t * groups + g] = amax / 127.0f;
      bias_correction[t * groups + g] = 128 * _mm512_reduce_add_epi32(sum);
    }
  }
}

// Biased int8 codes (int8_matrix.h): one 64-byte load per 4-k step is the vpdpbusd operand.
struct Int8Codes {
  template <int RB, int NT>
  GLINT_INLINE_AVX512 static void Accumulate(__m512i (&acc)[RB][NT], const uint8_t* codes, int64_t block_bytes,
                                             const int8_t* x, int64_t x_stride, int64_t k_begin, int64_t k_end) {
    for (int64_t k4 = k_begin / 4; k4 < k_end / 4; ++k4) {
      __m512i weights[RB];
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) weights[i] = _mm512_loadu_si512(codes + i * block_bytes + k4 * 64);
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) {
        const __m512i activation = avx512_tiles::Broadcast4(x + j * x_stride + 4 * k4);
#pragma GCC unroll 8
        for (int i = 0; i < RB; ++i) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], weights[i], activation);
      }
    }
  }
  static int32_t Correction(int32_t int8_correction) { return int8_correction; }  // 128·Σx
};

}  // namespace

const Int8Kernels& Int8KernelsAvx512() {
  static const Int8Kernels kernels{QuantizeAvx512, avx512_tiles::Gemm<Int8Codes, Int8MatrixView>,
                                   avx512_tiles::GroupSums<Int8Codes, Int8MatrixView>};
  return kernels;
}

}  // namespace glint::internal
