// AVX-512 VNNI int8 kernels (gemm_i8.h). Functions carry the target attribute themselves (no per-file flags), so
// nothing compiled here can leak AVX-512 instructions into code that runs on other CPUs.
//
// Inner step: one 64-byte load holds 16 rows × 4 k of biased weights; `vpdpbusd` multiplies them (unsigned) by a
// 4-byte broadcast of one token's activation codes (signed) and adds each row's 4 products to its int32 lane.
// A tile of RB row blocks × NT tokens keeps RB·NT int32 accumulators in registers (≤ 24 of 32) and reuses each
// weight load NT times and each broadcast RB times. After each K-group the int32 sums become fp32:
// facc += float(acc − 128·Σx) · (s_w · s_x).
// GCC 12 reports its own AVX-512 intrinsics (the _mm*_undefined_* idiom) as maybe-uninitialized: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/gemm_i8.h"

#define GLINT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

namespace glint::internal {
namespace {

GLINT_TARGET_AVX512 void QuantizeAvx512(const float* x, int64_t x_stride, int64_t tokens, int64_t cols,
                                        int64_t group, int64_t padded_cols, int8_t* codes, float* scales,
                                        int32_t* bias_correction) {
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

struct TileArgs {
  const uint8_t* codes;        // row block b0's codes; block b0 + i starts block_bytes later
  int64_t block_bytes;
  const float* w_scales;       // row block b0's scales [groups][16]; block b0 + i starts block_scales later
  int64_t block_scales;
  const int8_t* x;             // token t0's codes; token t0 + j starts x_stride later
  int64_t x_stride;
  const float* x_scales;       // token t0's [groups]
  const int32_t* x_correction; // token t0's [groups]
  int64_t groups;
  int64_t group;
};

GLINT_TARGET_AVX512 inline __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// One K-group of an RB × NT tile: the int32 sums over the group's k (vpdpbusd), then either the fp32 epilogue
// y += float(sum − 128·Σx) · (s_w · s_x) into y (masked to the rows that exist; the first group stores), or, for
// tests, the corrected int32 sums into sums [RB][NT][16].
//
// Register allocation: GCC 12 keeps the RB·NT accumulators in registers only when this is its own function (no
// enclosing loop over groups) and an empty asm pins them before the epilogue; otherwise it stores every accumulator
// to the stack on every step of the K loop, halving throughput (checked with objdump: no stack traffic in the loop).
template <int RB, int NT, bool kSums>
GLINT_TARGET_AVX512 __attribute__((noinline)) void Group(const TileArgs& a, int64_t g, float* y, int64_t y_stride,
                                                           int last_block_rows, int32_t* sums) {
  __m512i acc[RB][NT];
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_si512();
  }
  const uint8_t* codes = a.codes;
  const int8_t* x = a.x;
  const int64_t block_bytes = a.block_bytes, x_stride = a.x_stride;
  const int64_t k4_begin = g * a.group / 4, k4_end = k4_begin + a.group / 4;
  for (int64_t k4 = k4_begin; k4 < k4_end; ++k4) {
    __m512i weights[RB];
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) weights[i] = _mm512_loadu_si512(codes + i * block_bytes + k4 * 64);
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      const __m512i activation = Broadcast4(x + j * x_stride + 4 * k4);
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], weights[i], activation);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) asm volatile("" : "+v"(acc[i][j]));
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
    const __mmask16 rows = i == RB - 1 ? __mmask16((1u << last_block_rows) - 1) : __mmask16(0xffff);
    const __m512 w_scale = _mm512_loadu_ps(a.w_scales + i * a.block_scales + g * 16);
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      const __m512i corrected = _mm512_sub_epi32(acc[i][j], _mm512_set1_epi32(a.x_correction[j * a.groups + g]));
      if constexpr (kSums) {
        _mm512_store_si512(sums + (i * NT + j) * 16, corrected);
      } else {
        float* out = y + j * y_stride + i * 16;
        const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(a.x_scales[j * a.groups + g]));
        const __m512 previous = g == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(rows, out);
        _mm512_mask_storeu_ps(out, rows, _mm512_fmadd_ps(_mm512_cvtepi32_ps(corrected), scale, previous));
      }
    }
  }
}

template <int RB, int NT>
GLINT_TARGET_AVX512 void Tile(const TileArgs& a, float* y, int64_t y_stride, int last_block_rows) {
  for (int64_t g = 0; g < a.groups; ++g) Group<RB, NT, false>(a, g, y, y_stride, last_block_rows, nullptr);
}

template <int RB, int NT>
GLINT_TARGET_AVX512 void SumsTile(const TileArgs& a, int32_t* sums, int64_t token_stride) {
  alignas(64) int32_t group_sums[RB * NT * 16];
  for (int64_t g = 0; g < a.groups; ++g) {
    Group<RB, NT, true>(a, g, nullptr, 0, 16, group_sums);
    for (int i = 0; i < RB; ++i) {
      for (int j = 0; j < NT; ++j) {
        for (int lane = 0; lane < 16; ++lane) {
          sums[j * token_stride + ((i * 16 + lane) * a.groups) + g] = group_sums[(i * NT + j) * 16 + lane];
        }
      }
    }
  }
}

// Calls f.template operator()<RB, NT>() for the tile shape; NT ∈ [1, 6].
template <int RB, typename F>
GLINT_TARGET_AVX512 void WithTokens(int nt, F&& f) {
  switch (nt) {
    case 1: f.template operator()<RB, 1>(); break;
    case 2: f.template operator()<RB, 2>(); break;
    case 3: f.template operator()<RB, 3>(); break;
    case 4: f.template operator()<RB, 4>(); break;
    case 5: f.template operator()<RB, 5>(); break;
    default: f.template operator()<RB, 6>(); break;
  }
}

constexpr int kMaxTileTokens = 6;

// Walks the (row block, token) tiles of [block_begin, block_end) × all tokens: row blocks outer (their weights stay
// in cache while the token tiles pass), 4 row blocks at a time when possible.
template <typename Visit>
GLINT_TARGET_AVX512 void ForEachTile(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                                     int64_t block_end, Visit&& visit) {
  const int64_t groups = x.groups();
  for (int64_t b = block_begin; b < block_end;) {
    const int64_t remaining = block_end - b;
    const int rb = remaining >= 4 ? 4 : remaining >= 2 ? 2 : 1;
    for (int64_t t = 0; t < x.tokens; t += kMaxTileTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxTileTokens, x.tokens - t));
      TileArgs a{w.BlockCodes(b),   w.layout.block_code_bytes(), w.BlockScales(b), groups * 16,
                 x.codes + t * x.padded_cols, x.padded_cols, x.scales + t * groups, x.bias_correction + t * groups,
                 groups,            x.group};
      visit(a, b, rb, t, nt);
    }
    b += rb;
  }
}

GLINT_TARGET_AVX512 void GemmAvx512(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                                    int64_t block_end, float* y, int64_t y_stride) {
  ForEachTile(w, x, block_begin, block_end, [&](const TileArgs& a, int64_t b, int rb, int64_t t, int nt) {
    const int64_t last_row = std::min(w.layout.rows, (b + rb) * 16);
    const int last_block_rows = static_cast<int>(last_row - (b + rb - 1) * 16);
    float* out = y + t * y_stride + b * 16;
    auto run = [&]<int RB, int NT>() { Tile<RB, NT>(a, out, y_stride, last_block_rows); };
    if (rb == 4) {
      WithTokens<4>(nt, run);
    } else if (rb == 2) {
      WithTokens<2>(nt, run);
    } else {
      WithTokens<1>(nt, run);
    }
  });
}

GLINT_TARGET_AVX512 void GroupSumsAvx512(const Int8MatrixView& w, const QuantizedActivations& x,
                                         int64_t block_begin, int64_t block_end, int32_t* sums) {
  const int64_t groups = x.groups(), rows = (block_end - block_begin) * 16;
  ForEachTile(w, x, block_begin, block_end, [&](const TileArgs& a, int64_t b, int rb, int64_t t, int nt) {
    int32_t* out = sums + (t * rows + (b - block_begin) * 16) * groups;
    auto run = [&]<int RB, int NT>() { SumsTile<RB, NT>(a, out, rows * groups); };
    if (rb == 4) {
      WithTokens<4>(nt, run);
    } else if (rb == 2) {
      WithTokens<2>(nt, run);
    } else {
      WithTokens<1>(nt, run);
    }
  });
}

}  // namespace

const Int8Kernels& Int8KernelsAvx512() {
  static const Int8Kernels kernels{QuantizeAvx512, GemmAvx512, GroupSumsAvx512};
  return kernels;
}

}  // namespace glint::internal
