// AVX-512 bf16 kernel (gemm_bf16.h). One 64-byte line = 16 rows × 2 k; as 16 uint32 lanes, `<< 16` gives the
// fp32 weights at k and `& 0xffff0000` those at k + 1, each multiplied by a broadcast activation. Tiles of
// RB row blocks × NT tokens keep RB·NT fp32 accumulators in registers; each tile is its own function
// (initialise, loop, store) so GCC 12 keeps them there (see gemm_i8_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593
#include <immintrin.h>

#include <algorithm>

#include "kernels/gemm_bf16.h"

#define GLINT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

namespace glint::internal {
namespace {

template <int RB, int NT>
GLINT_TARGET_AVX512 __attribute__((noinline)) void Tile(const uint16_t* w, int64_t block_values, const float* x,
                                                        int64_t x_stride, int64_t cols, float* y, int64_t y_stride,
                                                        int last_block_rows) {
  __m512 acc[RB][NT];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const int64_t pairs = cols / 2;
  for (int64_t k2 = 0; k2 < pairs; ++k2) {
    __m512 even[RB], odd[RB];
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      const __m512i v = _mm512_loadu_si512(w + i * block_values + k2 * 32);
      even[i] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      odd[i] = _mm512_castsi512_ps(_mm512_and_si512(v, high_half));
    }
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      const __m512 x0 = _mm512_set1_ps(x[j * x_stride + 2 * k2]);
      const __m512 x1 = _mm512_set1_ps(x[j * x_stride + 2 * k2 + 1]);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) acc[i][j] = _mm512_fmadd_ps(odd[i], x1, _mm512_fmadd_ps(even[i], x0, acc[i][j]));
    }
  }
  if (cols % 2) {  // the last column pairs with padding: its partner activation is never read
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) {
      const __m512 even =
          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(w + i * block_values + pairs * 32), 16));
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j)
        acc[i][j] = _mm512_fmadd_ps(even, _mm512_set1_ps(x[j * x_stride + 2 * pairs]), acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
    const __mmask16 rows = i == RB - 1 ? __mmask16((1u << last_block_rows) - 1) : __mmask16(0xffff);
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) _mm512_mask_storeu_ps(y + j * y_stride + i * 16, rows, acc[i][j]);
  }
}

using TileFn = void (*)(const uint16_t*, int64_t, const float*, int64_t, int64_t, float*, int64_t, int);
constexpr int kMaxTokens = 4;
constexpr TileFn kTiles[3][kMaxTokens] = {
    {Tile<1, 1>, Tile<1, 2>, Tile<1, 3>, Tile<1, 4>},
    {Tile<2, 1>, Tile<2, 2>, Tile<2, 3>, Tile<2, 4>},
    {Tile<4, 1>, Tile<4, 2>, Tile<4, 3>, Tile<4, 4>},
};

void GemmAvx512(const Bf16MatrixView& w, const float* x, int64_t x_stride, int64_t tokens, int64_t block_begin,
                int64_t block_end, float* y, int64_t y_stride) {
  for (int64_t b = block_begin; b < block_end;) {
    const int64_t remaining = block_end - b;
    const int rb = remaining >= 4 ? 4 : remaining >= 2 ? 2 : 1;
    const int64_t last_row = std::min(w.layout.rows, (b + rb) * 16);
    const int last_block_rows = static_cast<int>(last_row - (b + rb - 1) * 16);
    for (int64_t t = 0; t < tokens; t += kMaxTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxTokens, tokens - t));
      kTiles[rb == 4 ? 2 : rb - 1][nt - 1](w.BlockValues(b), w.layout.block_values(), x + t * x_stride, x_stride,
                                           w.layout.cols, y + t * y_stride + b * 16, y_stride, last_block_rows);
    }
    b += rb;
  }
}

}  // namespace

const Bf16Kernels& Bf16KernelsAvx512() {
  static const Bf16Kernels kernels{GemmAvx512};
  return kernels;
}

}  // namespace glint::internal
