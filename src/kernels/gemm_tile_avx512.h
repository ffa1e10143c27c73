// The AVX-512 VNNI tile machinery shared by the int8 (gemm_i8_avx512.cc) and int4 (gemm_i4_avx512.cc) weight
// kernels. Include it only from translation units compiled for AVX-512 dispatch: every function carries the
// target attribute itself, so nothing here leaks AVX-512 instructions into code that runs on other CPUs.
//
// Inner step: one 64-byte operand holds 16 rows × 4 k of biased unsigned weights; `vpdpbusd` multiplies it by a
// 4-byte broadcast of one token's activation codes (signed) and adds each row's 4 products to its int32 lane.
// A tile of RB row blocks × NT tokens keeps RB·NT int32 accumulators in registers (≤ 24 of 32) and reuses each
// weight operand NT times and each broadcast RB times. After each K-group the int32 sums become fp32:
// facc += float(acc − bias·Σx) · (s_w · s_x).
//
// The weight format is a policy `Codes` with:
//   template <int RB, int NT> static void Accumulate(acc, codes, block_bytes, x, x_stride, k_begin, k_end)
//       adds Σ_{k ∈ [k_begin, k_end)} biased w · x for RB row blocks (block i at codes + i·block_bytes) and NT
//       tokens (token j at x + j·x_stride) into acc[i][j];
//   static int32_t Correction(int32_t int8_correction)
//       the weights' bias times Σx, from the quantizer's 128·Σx.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/gemm_i8.h"

#define GLINT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define GLINT_INLINE_AVX512 GLINT_TARGET_AVX512 inline __attribute__((always_inline))

namespace glint::internal::avx512_tiles {

struct TileArgs {
  const uint8_t* codes;  // row block b0's codes; block b0 + i starts block_bytes later
  int64_t block_bytes;
  const float* w_scales;  // row block b0's scales [groups][16]; block b0 + i starts block_scales later
  int64_t block_scales;
  const int8_t* x;  // token t0's codes; token t0 + j starts x_stride later
  int64_t x_stride;
  const float* x_scales;        // token t0's [groups]
  const int32_t* x_correction;  // token t0's [groups]
  int64_t groups;
  int64_t group;
};

GLINT_INLINE_AVX512 __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// One K-group of an RB × NT tile: the int32 sums over the group's k, then either the fp32 epilogue
// y += float(sum − correction) · (s_w · s_x) into y (masked to the rows that exist; the first group stores), or,
// for tests, the corrected int32 sums into sums [RB][NT][16].
//
// Register allocation: GCC 12 keeps the RB·NT accumulators in registers only when this is its own function (no
// enclosing loop over groups) and an empty asm pins them before the epilogue; otherwise it stores every accumulator
// to the stack on every step of the K loop, halving throughput (checked with objdump: no stack traffic in the loop).
template <typename Codes, int RB, int NT, bool kSums>
GLINT_TARGET_AVX512 __attribute__((noinline)) void Group(const TileArgs& a, int64_t g, float* y, int64_t y_stride,
                                                         int last_block_rows, int32_t* sums) {
  // Locals for what the epilogue reads: its stores to y may alias `a`, and GCC would reload each field after every
  // store.
  const float* x_scales = a.x_scales + g;
  const int32_t* x_correction = a.x_correction + g;
  const float* w_scales = a.w_scales + g * 16;
  const int64_t groups = a.groups, block_scales = a.block_scales;
  // Each accumulator starts at −correction (the weights' bias times its token's Σx): the same int32 sums as
  // subtracting afterwards, one vector operation fewer per accumulator and group on the ports vpdpbusd needs
  // (≈ 3% of a 512-token product on a Xeon, docs/fast-path.md).
  __m512i acc[RB][NT];
#pragma GCC unroll 8
  for (int j = 0; j < NT; ++j) {
    const __m512i start = _mm512_set1_epi32(-Codes::Correction(x_correction[j * groups]));
#pragma GCC unroll 8
    for (int i = 0; i < RB; ++i) acc[i][j] = start;
  }
  Codes::template Accumulate<RB, NT>(acc, a.codes, a.block_bytes, a.x, a.x_stride, g * a.group, (g + 1) * a.group);
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) asm volatile("" : "+v"(acc[i][j]));
  }
#pragma GCC unroll 8
  for (int i = 0; i < RB; ++i) {
    const __mmask16 rows = i == RB - 1 ? __mmask16((1u << last_block_rows) - 1) : __mmask16(0xffff);
    const __m512 w_scale = _mm512_loadu_ps(w_scales + i * block_scales);
#pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      if constexpr (kSums) {
        _mm512_store_si512(sums + (i * NT + j) * 16, acc[i][j]);
      } else {
        float* out = y + j * y_stride + i * 16;
        const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(x_scales[j * groups]));
        const __m512 previous = g == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(rows, out);
        _mm512_mask_storeu_ps(out, rows, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][j]), scale, previous));
      }
    }
  }
}

template <typename Codes, int RB, int NT>
GLINT_TARGET_AVX512 void Tile(const TileArgs& a, float* y, int64_t y_stride, int last_block_rows) {
  for (int64_t g = 0; g < a.groups; ++g) Group<Codes, RB, NT, false>(a, g, y, y_stride, last_block_rows, nullptr);
}

template <typename Codes, int RB, int NT>
GLINT_TARGET_AVX512 void SumsTile(const TileArgs& a, int32_t* sums, int64_t token_stride) {
  alignas(64) int32_t group_sums[RB * NT * 16];
  for (int64_t g = 0; g < a.groups; ++g) {
    Group<Codes, RB, NT, true>(a, g, nullptr, 0, 16, group_sums);
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
    case 1:
      f.template operator()<RB, 1>();
      break;
    case 2:
      f.template operator()<RB, 2>();
      break;
    case 3:
      f.template operator()<RB, 3>();
      break;
    case 4:
      f.template operator()<RB, 4>();
      break;
    case 5:
      f.template operator()<RB, 5>();
      break;
    default:
      f.template operator()<RB, 6>();
      break;
  }
}

template <typename F>
GLINT_TARGET_AVX512 void WithShape(int rb, int nt, F&& f) {
  if (rb == 4) {
    WithTokens<4>(nt, f);
  } else if (rb == 2) {
    WithTokens<2>(nt, f);
  } else {
    WithTokens<1>(nt, f);
  }
}

inline constexpr int kMaxTileTokens = 6;

// From this many tokens a row group's first token tile is a one-token tile (see ForEachTile).
inline constexpr int64_t kLeadTileMinTokens = 5;

// The token count of the tile that starts at token t of `tokens`: with kLeadTileMinTokens or more tokens the first
// tile takes one token, and the others split the rest as evenly as tiles of at most kMaxTileTokens allow (16 tokens:
// 1, 5, 5, 5; fewer than kLeadTileMinTokens: one tile).
inline int TileTokens(int64_t tokens, int64_t t) {
  if (t == 0 && tokens >= kLeadTileMinTokens) return 1;
  const int64_t rest = tokens - t, tiles = (rest + kMaxTileTokens - 1) / kMaxTileTokens;
  return static_cast<int>((rest + tiles - 1) / tiles);
}

// Walks the (row block, token) tiles of [block_begin, block_end) × all tokens: row blocks outer (their weights stay
// in L2 while the token tiles pass), 4 row blocks at a time when possible. View: Int8MatrixView or Int4MatrixView
// (BlockCodes, BlockScales, layout.block_code_bytes()).
//
// The first token tile of a row group reads its weights from DRAM, the others from L2. A tile of several tokens
// streams those weights at well under the memory's speed — streaming and arithmetic add rather than overlap in a
// tile (docs/performance.md, "Batched decode: the bound by part") — so with kLeadTileMinTokens tokens or more the
// first tile takes a single token: it streams the row group at about the speed of a one-token product, and the other
// tokens' tiles then run at the in-cache rate. Interleaved A/B (2 threads, Zen 5, weights from DRAM): 24,576 × 4,096
// at 16 tokens 36 → 40 % and 42 → 48 % of the VNNI peak, lm_head's 154,880 × 4,096 37 → 44 %, 6–8 tokens +20 %,
// 64–512 tokens +1–4 %; at 3–4 tokens the second pass over the weights costs more than it saves (−8 to −13 %),
// hence the threshold. It replaced a prefetch of the next row group into L2 spread over the tiles (7–32 tokens),
// which the one-token tile beat at every count it covered.
template <typename View, typename Visit>
GLINT_TARGET_AVX512 void ForEachTile(const View& w, const QuantizedActivations& x, int64_t block_begin,
                                     int64_t block_end, Visit&& visit) {
  const int64_t groups = x.groups();
  for (int64_t b = block_begin; b < block_end;) {
    const int64_t remaining = block_end - b;
    const int rb = remaining >= 4 ? 4 : remaining >= 2 ? 2 : 1;
    for (int64_t t = 0; t < x.tokens;) {
      const int nt = TileTokens(x.tokens, t);
      const TileArgs a{w.BlockCodes(b),
                       w.layout.block_code_bytes(),
                       w.BlockScales(b),
                       groups * 16,
                       x.codes + t * x.padded_cols,
                       x.padded_cols,
                       x.scales + t * groups,
                       x.bias_correction + t * groups,
                       groups,
                       x.group};
      visit(a, b, rb, t, nt);
      t += nt;
    }
    b += rb;
  }
}

// The `gemm` and `group_sums` entries of a kernel table (gemm_i8.h) for a weight format.
template <typename Codes, typename View>
GLINT_TARGET_AVX512 void Gemm(const View& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                              float* y, int64_t y_stride) {
  ForEachTile(w, x, block_begin, block_end, [&](const TileArgs& a, int64_t b, int rb, int64_t t, int nt) {
    const int64_t last_row = std::min(w.layout.rows, (b + rb) * 16);
    const int last_block_rows = static_cast<int>(last_row - (b + rb - 1) * 16);
    float* out = y + t * y_stride + b * 16;
    WithShape(rb, nt, [&]<int RB, int NT>() { Tile<Codes, RB, NT>(a, out, y_stride, last_block_rows); });
  });
}

template <typename Codes, typename View>
GLINT_TARGET_AVX512 void GroupSums(const View& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                                   int32_t* sums) {
  const int64_t groups = x.groups(), rows = (block_end - block_begin) * 16;
  ForEachTile(w, x, block_begin, block_end, [&](const TileArgs& a, int64_t b, int rb, int64_t t, int nt) {
    int32_t* out = sums + (t * rows + (b - block_begin) * 16) * groups;
    WithShape(rb, nt, [&]<int RB, int NT>() { SumsTile<Codes, RB, NT>(a, out, rows * groups); });
  });
}

}  // namespace glint::internal::avx512_tiles
