// AVX2 int8 kernels (gemm_i8.h) for CPUs without AVX-512 VNNI. Functions carry the target attribute themselves.
//
// Without vpdpbusd the product goes through vpmaddubsw (unsigned × signed bytes → pairwise int16 sums, saturating)
// and vpmaddwd (int16 pairs → int32). Biased weights (≤ 255) times codes (≤ 127) could saturate the int16 pair
// sum (2 · 255 · 127 > 32767), so this level un-biases the weights and uses the sign trick: Σ w·x = Σ |x| · (w·sign x),
// where |x| ≤ 127 and |w| ≤ 127 keep every pair sum ≤ 2 · 127 · 127 = 32258: exact, and no bias correction.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/gemm_i8.h"
#include "kernels/gemm_tile_avx2.h"

namespace glint::internal {
namespace {

GLINT_TARGET_AVX2 inline float ReduceMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

GLINT_TARGET_AVX2 inline int32_t ReduceAdd(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Loads n < 8 floats (or 8) without reading past them.
GLINT_TARGET_AVX2 inline __m256 LoadPartial(const float* p, int64_t n) {
  if (n >= 8) return _mm256_loadu_ps(p);
  alignas(32) float tmp[8] = {};
  std::memcpy(tmp, p, static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(float));
  return _mm256_load_ps(tmp);
}

GLINT_TARGET_AVX2 void QuantizeAvx2(const float* x, int64_t x_stride, int64_t tokens, int64_t cols, int64_t group,
                                    int64_t padded_cols, int8_t* codes, float* scales, int32_t* bias_correction) {
  const int64_t groups = padded_cols / group;
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 infinity = _mm256_set1_ps(__builtin_inff());
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = x + t * x_stride;
    int8_t* out = codes + t * padded_cols;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, end = std::min(cols, begin + group);
      __m256 vmax = _mm256_setzero_ps();
      int nonfinite = 0;
      for (int64_t c = begin; c < end; c += 8) {
        const __m256 magnitude = _mm256_and_ps(LoadPartial(row + c, end - c), sign_mask);
        nonfinite |= _mm256_movemask_ps(_mm256_cmp_ps(magnitude, infinity, _CMP_NLT_UQ));
        vmax = _mm256_max_ps(vmax, magnitude);
      }
      if (nonfinite) {
        std::memset(out + begin, 0, static_cast<size_t>(group));
        scales[t * groups + g] = __builtin_nanf("");
        bias_correction[t * groups + g] = 0;
        continue;
      }
      const float amax = ReduceMax(vmax);
      const __m256 inverse = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      __m256i sum = _mm256_setzero_si256();
      for (int64_t c = begin; c < begin + group; c += 8) {
        __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(LoadPartial(row + c, end - c), inverse));
        q = _mm256_max_epi32(_mm256_min_epi32(q, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
        sum = _mm256_add_epi32(sum, q);
        // int32 → int8: values are within [−127, 127], so the saturating packs are exact.
        const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        const __m128i q8 = _mm_packs_epi16(q16, q16);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c), q8);
      }
      scales[t * groups + g] = amax / 127.0f;
      bias_correction[t * groups + g] = 128 * ReduceAdd(sum);
    }
  }
}

// Int8 weights un-biased and multiplied with the sign trick (see the top of the file): exact, so no correction.
struct Int8SignedCodes {
  template <int NT>
  GLINT_INLINE_AVX2 static void GroupTile(const uint8_t* codes, const int8_t* x, int64_t x_stride, int64_t k_begin,
                                          int64_t k_end, __m256i (&acc)[2][NT]) {
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) acc[h][j] = _mm256_setzero_si256();
    }
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t k4 = k_begin / 4; k4 < k_end / 4; ++k4) {
      // (w + 128) xor 0x80 = w as a signed byte.
      const __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + k4 * 64)), bias);
      const __m256i w1 =
          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + k4 * 64 + 32)), bias);
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) {
        const __m256i activation = avx2_tiles::Broadcast4(x + j * x_stride + 4 * k4);
        const __m256i magnitude = _mm256_abs_epi8(activation);
        const __m256i p0 = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w0, activation));
        const __m256i p1 = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w1, activation));
        acc[0][j] = _mm256_add_epi32(acc[0][j], _mm256_madd_epi16(p0, ones));
        acc[1][j] = _mm256_add_epi32(acc[1][j], _mm256_madd_epi16(p1, ones));
      }
    }
  }
  static int32_t Correction(int32_t) { return 0; }
};

}  // namespace

const Int8Kernels& Int8KernelsAvx2() {
  static const Int8Kernels kernels{QuantizeAvx2, avx2_tiles::Gemm<Int8SignedCodes, Int8MatrixView>,
                                   avx2_tiles::GroupSums<Int8SignedCodes, Int8MatrixView>};
  return kernels;
}

}  // namespace glint::internal
