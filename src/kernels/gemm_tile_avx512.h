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
  // Weights to fetch into L2 during this tile, for a later one (null: none): group g fetches
  // [prefetch + g · prefetch_bytes, + prefetch_bytes). See ForEachTile.
  const uint8_t* prefetch = nullptr;
  int64_t prefetch_bytes = 0;
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
  if (a.prefetch != nullptr) {
    const uint8_t* slice = a.prefetch + g * a.prefetch_bytes;
    for (int64_t offset = 0; offset < a.prefetch_bytes; offset += 64) _mm_prefetch(slice + offset, _MM_HINT_T1);
  }
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

// Most tokens whose tiles prefetch the next row blocks' weights (see ForEachTile).
inline constexpr int64_t kMaxPrefetchTokens = 32;

// Walks the (row block, token) tiles of [block_begin, block_end) × all tokens: row blocks outer (their weights stay
// in cache while the token tiles pass), 4 row blocks at a time when possible. View: Int8MatrixView or
// Int4MatrixView (BlockCodes, BlockScales, layout.block_code_bytes()).
//
// With 7-32 tokens (batched decode, MTP verification) each weight byte feeds only a few token tiles, and left to the
// hardware the weights would stream from DRAM during the first token tile only (4 × 64 B per 24 products: more than
// a core's share of the bandwidth) and sit in L2 for the others. So every tile of a row group also prefetches an
// equal slice of the next row group's weights into L2 (its groups a slice each): the stream stays even across all
// the tiles, and the next group's first tile finds its weights in L2 (two groups of 4 × 16 rows × K bytes, 512 KiB
// at K = 4,096, fit the L2). Prefill-sized token counts reuse each weight enough times not to need it.
template <typename View, typename Visit>
GLINT_TARGET_AVX512 void ForEachTile(const View& w, const QuantizedActivations& x, int64_t block_begin,
                                     int64_t block_end, Visit&& visit) {
  const int64_t groups = x.groups();
  const int64_t token_tiles = (x.tokens + kMaxTileTokens - 1) / kMaxTileTokens;
  const bool prefetch = token_tiles > 1 && x.tokens <= kMaxPrefetchTokens;
  for (int64_t b = block_begin; b < block_end;) {
    const int64_t remaining = block_end - b;
    const int rb = remaining >= 4 ? 4 : remaining >= 2 ? 2 : 1;
    const int64_t next_remaining = remaining - rb;
    const int64_t next_rb = next_remaining >= 4 ? 4 : next_remaining;
    // The next row group's codes are contiguous (blocks follow each other), cut into token_tiles × groups slices.
    const int64_t slice_bytes =
        prefetch ? (next_rb * w.layout.block_code_bytes() + token_tiles * groups - 1) / (token_tiles * groups) : 0;
    for (int64_t t = 0; t < x.tokens; t += kMaxTileTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxTileTokens, x.tokens - t));
      TileArgs a{w.BlockCodes(b),
                 w.layout.block_code_bytes(),
                 w.BlockScales(b),
                 groups * 16,
                 x.codes + t * x.padded_cols,
                 x.padded_cols,
                 x.scales + t * groups,
                 x.bias_correction + t * groups,
                 groups,
                 x.group};
      if (slice_bytes > 0) {
        a.prefetch = w.BlockCodes(b + rb) + (t / kMaxTileTokens) * groups * slice_bytes;
        a.prefetch_bytes = slice_bytes;
      }
      visit(a, b, rb, t, nt);
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
