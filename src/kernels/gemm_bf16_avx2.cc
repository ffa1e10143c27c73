// AVX2 bf16 kernel (gemm_bf16.h): the AVX-512 kernel's scheme on 8-lane registers, one row block (two halves of
// 8 rows) × up to 4 tokens per tile.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/gemm_bf16.h"

#define GLINT_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace glint::internal {
namespace {

template <int NT>
GLINT_TARGET_AVX2 __attribute__((noinline)) void Tile(const uint16_t* w, const float* x, int64_t x_stride, int64_t cols,
                                                      float* y, int64_t y_stride, int valid_rows) {
  __m256 acc[2][NT];
#pragma GCC unroll 8
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) acc[h][j] = _mm256_setzero_ps();
  }
  const __m256i high_half = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const int64_t pairs = (cols + 1) / 2;
  for (int64_t k2 = 0; k2 < pairs; ++k2) {
    const bool has_odd = 2 * k2 + 1 < cols;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k2 * 32 + h * 16));
      const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(v, high_half));
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) {
        acc[h][j] = _mm256_fmadd_ps(even, _mm256_set1_ps(x[j * x_stride + 2 * k2]), acc[h][j]);
        if (has_odd) acc[h][j] = _mm256_fmadd_ps(odd, _mm256_set1_ps(x[j * x_stride + 2 * k2 + 1]), acc[h][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NT; ++j) {
    alignas(32) float lanes[16];
    _mm256_store_ps(lanes, acc[0][j]);
    _mm256_store_ps(lanes + 8, acc[1][j]);
    std::memcpy(y + j * y_stride, lanes, static_cast<size_t>(valid_rows) * sizeof(float));
  }
}

using TileFn = void (*)(const uint16_t*, const float*, int64_t, int64_t, float*, int64_t, int);
constexpr TileFn kTiles[4] = {Tile<1>, Tile<2>, Tile<3>, Tile<4>};

void GemmAvx2(const Bf16MatrixView& w, const float* x, int64_t x_stride, int64_t tokens, int64_t block_begin,
              int64_t block_end, float* y, int64_t y_stride) {
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int valid_rows = static_cast<int>(std::min<int64_t>(16, w.layout.rows - b * 16));
    for (int64_t t = 0; t < tokens; t += 4) {
      const int nt = static_cast<int>(std::min<int64_t>(4, tokens - t));
      kTiles[nt - 1](w.BlockValues(b), x + t * x_stride, x_stride, w.layout.cols, y + t * y_stride + b * 16, y_stride,
                     valid_rows);
    }
  }
}

}  // namespace

const Bf16Kernels& Bf16KernelsAvx2() {
  static const Bf16Kernels kernels{GemmAvx2};
  return kernels;
}

}  // namespace glint::internal
