// The AVX2 tile machinery shared by the int8 (gemm_i8_avx2.cc) and int4 (gemm_i4_avx2.cc) weight kernels. Include
// it only from translation units compiled for AVX2 dispatch: every function carries the target attribute itself.
//
// A tile is one row block (two halves of 8 rows, one __m256i of int32 sums each) × NT ≤ 4 tokens. After each
// K-group the int32 sums become fp32: facc += float(acc − correction) · (s_w · s_x).
//
// The weight format is a policy `Codes` with:
//   template <int NT> static void GroupTile(codes, x, x_stride, k_begin, k_end, acc)
//       sets acc[h][j] to the int32 sums over k ∈ [k_begin, k_end) of rows 8h…8h+7 and token j;
//   static int32_t Correction(int32_t int8_correction)
//       what to subtract from those sums, from the quantizer's 128·Σx (0 when GroupTile un-biases the weights).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/gemm_i8.h"

#define GLINT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define GLINT_INLINE_AVX2 GLINT_TARGET_AVX2 inline __attribute__((always_inline))

namespace glint::internal::avx2_tiles {

inline constexpr int kMaxTileTokens = 4;

GLINT_INLINE_AVX2 __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

struct TileArgs {
  const uint8_t* codes;   // this row block's codes
  const float* w_scales;  // this row block's scales [groups][16]
  const int8_t* x;        // token t0's codes
  int64_t x_stride;
  const float* x_scales;        // token t0's [groups]
  const int32_t* x_correction;  // token t0's [groups]
  int64_t groups, group;
};

template <typename Codes, int NT>
GLINT_TARGET_AVX2 void Tile(const TileArgs& a, float* y, int64_t y_stride, int valid_rows) {
  __m256 facc[2][NT];
#pragma GCC unroll 8
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) facc[h][j] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < a.groups; ++g) {
    __m256i acc[2][NT];
    Codes::template GroupTile<NT>(a.codes, a.x, a.x_stride, g * a.group, (g + 1) * a.group, acc);
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      const __m256 w_scale = _mm256_loadu_ps(a.w_scales + g * 16 + h * 8);
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) {
        const __m256 scale = _mm256_mul_ps(w_scale, _mm256_set1_ps(a.x_scales[j * a.groups + g]));
        const __m256i corrected =
            _mm256_sub_epi32(acc[h][j], _mm256_set1_epi32(Codes::Correction(a.x_correction[j * a.groups + g])));
        facc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corrected), scale, facc[h][j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < NT; ++j) {
    alignas(32) float lanes[16];
    _mm256_store_ps(lanes, facc[0][j]);
    _mm256_store_ps(lanes + 8, facc[1][j]);
    std::memcpy(y + j * y_stride, lanes, static_cast<size_t>(valid_rows) * sizeof(float));
  }
}

template <typename Codes, int NT>
GLINT_TARGET_AVX2 void SumsTile(const TileArgs& a, int32_t* sums, int64_t token_stride) {
  for (int64_t g = 0; g < a.groups; ++g) {
    __m256i acc[2][NT];
    Codes::template GroupTile<NT>(a.codes, a.x, a.x_stride, g * a.group, (g + 1) * a.group, acc);
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      const __m256i correction = _mm256_set1_epi32(Codes::Correction(a.x_correction[j * a.groups + g]));
      alignas(32) int32_t lanes[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_sub_epi32(acc[0][j], correction));
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8), _mm256_sub_epi32(acc[1][j], correction));
      for (int lane = 0; lane < 16; ++lane) sums[j * token_stride + lane * a.groups + g] = lanes[lane];
    }
  }
}

template <typename F>
void WithTokens(int nt, F&& f) {
  switch (nt) {
    case 1:
      f.template operator()<1>();
      break;
    case 2:
      f.template operator()<2>();
      break;
    case 3:
      f.template operator()<3>();
      break;
    default:
      f.template operator()<4>();
      break;
  }
}

// The `gemm` and `group_sums` entries of a kernel table (gemm_i8.h) for a weight format. View: Int8MatrixView or
// Int4MatrixView.
template <typename Codes, typename View>
void Gemm(const View& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end, float* y,
          int64_t y_stride) {
  const int64_t groups = x.groups();
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int valid_rows = static_cast<int>(std::min<int64_t>(16, w.layout.rows - b * 16));
    for (int64_t t = 0; t < x.tokens; t += kMaxTileTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxTileTokens, x.tokens - t));
      const TileArgs a{w.BlockCodes(b),
                       w.BlockScales(b),
                       x.codes + t * x.padded_cols,
                       x.padded_cols,
                       x.scales + t * groups,
                       x.bias_correction + t * groups,
                       groups,
                       x.group};
      float* out = y + t * y_stride + b * 16;
      WithTokens(nt, [&]<int NT>() { Tile<Codes, NT>(a, out, y_stride, valid_rows); });
    }
  }
}

template <typename Codes, typename View>
void GroupSums(const View& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end, int32_t* sums) {
  const int64_t groups = x.groups(), rows = (block_end - block_begin) * 16;
  for (int64_t b = block_begin; b < block_end; ++b) {
    for (int64_t t = 0; t < x.tokens; t += kMaxTileTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxTileTokens, x.tokens - t));
      const TileArgs a{w.BlockCodes(b),
                       w.BlockScales(b),
                       x.codes + t * x.padded_cols,
                       x.padded_cols,
                       x.scales + t * groups,
                       x.bias_correction + t * groups,
                       groups,
                       x.group};
      int32_t* out = sums + (t * rows + (b - block_begin) * 16) * groups;
      WithTokens(nt, [&]<int NT>() { SumsTile<Codes, NT>(a, out, rows * groups); });
    }
  }
}

}  // namespace glint::internal::avx2_tiles
