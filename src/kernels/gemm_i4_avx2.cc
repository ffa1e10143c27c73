// AVX2 int4 kernels (gemm_i4.h): the int8 AVX2 tiles (gemm_tile_avx2.h) with an inner step that unpacks nibbles.
// Unlike int8 (which needs the sign trick), biased nibbles ≤ 15 can be vpmaddubsw's unsigned operand directly:
// a pair sum is ≤ 2 · 15 · 127 = 3810, and the low- and high-nibble steps added in int16 are ≤ 7620 < 32767, so one
// vpmaddwd per two steps widens them exactly to int32. The bias is removed per group: Σ (w + 8)·x − 8·Σx.
#include "kernels/gemm_i4.h"
#include "kernels/gemm_tile_avx2.h"

namespace glint::internal {
namespace {

struct Int4Codes {
  template <int NT>
  GLINT_INLINE_AVX2 static void GroupTile(const uint8_t* codes, const int8_t* x, int64_t x_stride, int64_t k_begin,
                                          int64_t k_end, __m256i (&acc)[2][NT]) {
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) acc[h][j] = _mm256_setzero_si256();
    }
    const __m256i nibble = _mm256_set1_epi8(0x0f);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t k8 = k_begin / 8; k8 < k_end / 8; ++k8) {
      __m256i low[2], high[2];  // [rows 0–7, rows 8–15]
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + k8 * 64 + h * 32));
        low[h] = _mm256_and_si256(packed, nibble);
        high[h] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
      }
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) {
        const __m256i a_low = avx2_tiles::Broadcast4(x + j * x_stride + 8 * k8);
        const __m256i a_high = avx2_tiles::Broadcast4(x + j * x_stride + 8 * k8 + 4);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m256i pairs =
              _mm256_add_epi16(_mm256_maddubs_epi16(low[h], a_low), _mm256_maddubs_epi16(high[h], a_high));
          acc[h][j] = _mm256_add_epi32(acc[h][j], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
  }
  static int32_t Correction(int32_t int8_correction) { return int8_correction / 16; }  // 8·Σx
};

}  // namespace

const Int4Kernels& Int4KernelsAvx2() {
  static const Int4Kernels kernels{avx2_tiles::Gemm<Int4Codes, Int4MatrixView>,
                                   avx2_tiles::GroupSums<Int4Codes, Int4MatrixView>};
  return kernels;
}

}  // namespace glint::internal
