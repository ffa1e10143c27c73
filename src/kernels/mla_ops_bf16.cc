// mla::AttendBf16 (mla_ops.h): absorbed MLA attention with AVX512-BF16 dot products. Every function carries its
// target attribute, so nothing here runs unless AttendBf16Supported().
//
// vdpbf16ps adds to each fp32 lane j the products of bf16 pairs 2j and 2j + 1 of its two operands: 32 products per
// instruction against vfmadd's 16, at the same throughput (Zen 5: 460 against 230 GFLOPS on one core, measured). The
// scores q̃_h · c_i pair neighbouring elements of the rank, so q̃ and the latents stay row-major; the output
// Σ_i p_i c_i pairs neighbouring positions, so each step interleaves two latent rows (vpunpck{l,h}wd) and multiplies
// them by a broadcast pair (p_i, p_i+1). The unpacks interleave within 128-bit blocks, so the output accumulators
// hold the rank in a fixed permuted order, undone once when the sums are stored (Unscramble).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, see gemm_i8_avx512.cc
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/status.h"
#include "kernels/isa.h"
#include "kernels/mla_bf16_common.h"
#include "kernels/mla_ops.h"
#include "kernels/mla_tile_sums_avx512.h"

#define GLINT_INLINE_BF16 GLINT_TARGET_BF16 inline __attribute__((always_inline))

namespace glint::mla {
namespace {

constexpr int64_t kRankStep = 32;         // bf16 values per 512-bit operand: the rank is padded to a multiple
constexpr int64_t kTile = 4;              // score tile: 4 heads × 4 positions
constexpr int64_t kOutHeads = 8;          // output tile: 8 heads × 32 rank values (two accumulators each)
constexpr int64_t kL2Bytes = 256 * 1024;  // a block of bf16 latent rows that stays in L2 (as AttendBlockRows)
constexpr int64_t kL1Bytes = 16 * 1024;   // a group of rows that stays in L1 across the score tiles

int64_t PaddedRank(int64_t rank) { return (rank + kRankStep - 1) / kRankStep * kRankStep; }
int64_t EvenCount(int64_t count) { return (count + 1) / 2 * 2; }

// s[a][j] = scale · q[a] · rows[j] for 4 heads × 4 positions over the padded rank.
GLINT_INLINE_BF16 void ScoreTile(const uint16_t* const* q, const uint16_t* const* rows, int64_t rank32, float scale,
                                 float* const* s) {
  __m512 acc[kTile][kTile];
  for (auto& row : acc) {
    for (__m512& a : row) a = _mm512_setzero_ps();
  }
  for (int64_t r = 0; r < rank32; r += kRankStep) {
    __m512bh c[kTile];
#pragma GCC unroll 4
    for (int j = 0; j < kTile; ++j) c[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(rows[j] + r));
#pragma GCC unroll 4
    for (int a = 0; a < kTile; ++a) {
      const __m512bh qv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(q[a] + r));
#pragma GCC unroll 4
      for (int j = 0; j < kTile; ++j) acc[a][j] = _mm512_dpbf16_ps(acc[a][j], qv, c[j]);
    }
  }
  const __m512 sums =
      _mm512_mul_ps(TileSums512(acc[0][0], acc[0][1], acc[0][2], acc[0][3], acc[1][0], acc[1][1], acc[1][2], acc[1][3],
                                acc[2][0], acc[2][1], acc[2][2], acc[2][3], acc[3][0], acc[3][1], acc[3][2], acc[3][3]),
                    _mm512_set1_ps(scale));
  _mm_storeu_ps(s[0], _mm512_castps512_ps128(sums));
  _mm_storeu_ps(s[1], _mm512_extractf32x4_ps(sums, 1));
  _mm_storeu_ps(s[2], _mm512_extractf32x4_ps(sums, 2));
  _mm_storeu_ps(s[3], _mm512_extractf32x4_ps(sums, 3));
}

// scores [heads, count]; rows: count + kTile pointers to rank32 bf16 values (those past count point at zeros, so a
// partial tile reads defined values; its extra results are dropped). Groups of rows that fit L1 pass every head tile
// before the next.
GLINT_TARGET_BF16 void Scores(const uint16_t* q, int64_t heads, int64_t rank32, const uint16_t* const* row,
                              int64_t count, float scale, float* scores) {
  const int64_t group = std::max(kTile, kL1Bytes / (rank32 * 2) / kTile * kTile);
  float spare[kTile * kTile];
  for (int64_t begin = 0; begin < count; begin += group) {
    const int64_t end = std::min(count, begin + group);
    for (int64_t h = 0; h < heads; h += kTile) {
      const uint16_t* qa[kTile];
      for (int64_t a = 0; a < kTile; ++a) qa[a] = q + std::min(h + a, heads - 1) * rank32;
      for (int64_t i = begin; i < end; i += kTile) {
        const int64_t size = std::min(kTile, count - i);
        float* s[kTile];
        for (int64_t a = 0; a < kTile; ++a) {
          s[a] = h + a < heads && size == kTile ? scores + (h + a) * count + i : spare + a * kTile;
        }
        ScoreTile(qa, row + i, rank32, scale, s);
        if (size == kTile) continue;
        for (int64_t a = 0; a < std::min(kTile, heads - h); ++a) {
          for (int64_t j = 0; j < size; ++j) scores[(h + a) * count + i + j] = spare[a * kTile + j];
        }
      }
    }
  }
}

// The output accumulators' lanes: `lo` holds rank values 0–3, 8–11, 16–19, 24–27 of a 32-value slice (block b of
// 4 lanes = values 8b … 8b + 3), `hi` values 4–7, 12–15, … (vpunpck{l,h}wd interleave each 128-bit block's halves).
// Natural order: first = [lo.b0, hi.b0, lo.b1, hi.b1], second = [lo.b2, hi.b2, lo.b3, hi.b3].
GLINT_INLINE_BF16 void Unscramble(__m512 lo, __m512 hi, float* out) {
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  _mm512_storeu_ps(out, _mm512_permutex2var_ps(lo, first, hi));
  _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(lo, second, hi));
}

// acc[a] (8 heads, 32 rank values at r, permuted) = (resume ? acc[a] : 0) + Σ over the position pairs of
// [begin, end) of (p_i, p_i+1) · (c_i, c_i+1). p: [heads][even count] bf16; row: pointers to the rows (row count
// points at zeros when count is odd).
GLINT_TARGET_BF16 void OutputTile(const uint16_t* const* p, const uint16_t* const* row, int64_t begin, int64_t end,
                                  int64_t r, bool resume, float* const* acc) {
  __m512 lo[kOutHeads], hi[kOutHeads];
#pragma GCC unroll 8
  for (int a = 0; a < kOutHeads; ++a) {
    lo[a] = resume ? _mm512_loadu_ps(acc[a]) : _mm512_setzero_ps();
    hi[a] = resume ? _mm512_loadu_ps(acc[a] + 16) : _mm512_setzero_ps();
  }
  for (int64_t i = begin; i < end; i += 2) {
    const __m512i c0 = _mm512_loadu_si512(row[i] + r), c1 = _mm512_loadu_si512(row[i + 1] + r);
    const __m512bh pairs_lo = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi16(c0, c1));
    const __m512bh pairs_hi = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi16(c0, c1));
#pragma GCC unroll 8
    for (int a = 0; a < kOutHeads; ++a) {
      int32_t pair;
      std::memcpy(&pair, p[a] + i, 4);
      const __m512bh pv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      lo[a] = _mm512_dpbf16_ps(lo[a], pairs_lo, pv);
      hi[a] = _mm512_dpbf16_ps(hi[a], pairs_hi, pv);
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < kOutHeads; ++a) _mm512_storeu_ps(acc[a], lo[a]), _mm512_storeu_ps(acc[a] + 16, hi[a]);
}

}  // namespace

// The kernel's unpacks and masked 16-bit stores are AVX512-BW: checked too, in case a hypervisor hides it.
bool AttendBf16Supported() { return CpuHasAvx512Bf16() && __builtin_cpu_supports("avx512bw"); }

namespace {

// The scratch of Attention: sections on 64-byte boundaries.
struct Scratch {
  Scratch(float* scratch, int64_t heads, int64_t count, int64_t rank32) {
    const int64_t even = EvenCount(count);
    float* at = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) / 64 * 64);
    const auto take = [&](int64_t bytes) {
      float* section = at;
      at += Floats64(bytes);
      return section;
    };
    scores = take(heads * count * 4);
    p = reinterpret_cast<uint16_t*>(take(heads * even * 2));
    q = reinterpret_cast<uint16_t*>(take(heads * rank32 * 2));
    sums = take(heads * rank32 * 4);
    rows = reinterpret_cast<const uint16_t**>(take((even + kTile) * sizeof(uint16_t*)));
    zeros = reinterpret_cast<uint16_t*>(take(rank32 * 2));
    converted = reinterpret_cast<uint16_t*>(at);  // AttendBf16's rows, last (AttendBf16InPlace has none)
  }
  static int64_t Floats(int64_t heads, int64_t count, int64_t rank32) {
    const int64_t even = EvenCount(count);
    return 16 + Floats64(heads * count * 4) + Floats64(heads * even * 2) + Floats64(heads * rank32 * 2) +
           Floats64(heads * rank32 * 4) + Floats64((even + kTile) * sizeof(uint16_t*)) + Floats64(rank32 * 2);
  }
  float* scores;          // [heads, count] fp32
  uint16_t* p;            // [heads, even count] bf16
  uint16_t* q;            // [heads, rank32] bf16
  float* sums;            // [heads, rank32] fp32, each 32-value slice permuted (Unscramble)
  const uint16_t** rows;  // [even count + kTile] row pointers; those past count point at `zeros`
  uint16_t* zeros;        // [rank32]
  uint16_t* converted;    // [count, rank32] bf16
};

// The attention over rows s.rows[0, count) (each rank32 bf16 values), s.q filled.
GLINT_TARGET_BF16 void Attention(Scratch& s, int64_t heads, int64_t rank, int64_t count, float scale, float* out) {
  const int64_t rank32 = PaddedRank(rank), even = EvenCount(count);
  std::memset(s.zeros, 0, rank32 * sizeof(uint16_t));
  for (int64_t i = count; i < even + kTile; ++i) s.rows[i] = s.zeros;

  Scores(s.q, heads, rank32, s.rows, count, scale, s.scores);
  SoftmaxRows(heads, count, s.scores);
  for (int64_t h = 0; h < heads; ++h) ToBf16(s.scores + h * count, count, even, s.p + h * even);

  // Output: position blocks that stay in L2; per block, every 32-value slice of the rank and every 8-head tile.
  const int64_t block = std::max<int64_t>(2, kL2Bytes / (rank32 * 2) / 2 * 2);
  alignas(64) float discard[kOutHeads][kRankStep];  // a partial tile's extra heads: computed, never read
  for (int64_t begin = 0; begin < even; begin += block) {
    const int64_t end = std::min(even, begin + block);
    for (int64_t r = 0; r < rank32; r += kRankStep) {
      for (int64_t h = 0; h < heads; h += kOutHeads) {
        const uint16_t* pa[kOutHeads];
        float* acc[kOutHeads];
        for (int64_t a = 0; a < kOutHeads; ++a) {
          const bool real = h + a < heads;
          pa[a] = s.p + (real ? h + a : h) * even;
          acc[a] = real ? s.sums + (h + a) * rank32 + r : discard[a];
        }
        OutputTile(pa, s.rows, begin, end, r, begin > 0, acc);
      }
    }
  }
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < rank32; r += kRankStep) {
      const float* sums = s.sums + h * rank32 + r;
      float natural[kRankStep];
      Unscramble(_mm512_loadu_ps(sums), _mm512_loadu_ps(sums + 16), natural);
      std::memcpy(out + h * rank + r, natural, std::min(kRankStep, rank - r) * sizeof(float));
    }
  }
}

}  // namespace

int64_t AttendBf16ScratchFloats(int64_t heads, int64_t count, int64_t rank) {
  const int64_t rank32 = PaddedRank(rank);
  return Scratch::Floats(heads, count, rank32) + Floats64(count * rank32 * 2);
}

int64_t AttendBf16InPlaceScratchFloats(int64_t heads, int64_t count, int64_t rank) {
  return Scratch::Floats(heads, count, PaddedRank(rank));
}

GLINT_TARGET_BF16 void AttendBf16(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows,
                                  const int64_t* positions, int64_t count, float scale, float* out, float* scratch) {
  const int64_t rank32 = PaddedRank(rank);
  Scratch s(scratch, heads, count, rank32);
  for (int64_t h = 0; h < heads; ++h) ToBf16(q_latent + h * rank, rank, rank32, s.q + h * rank32);
  for (int64_t i = 0; i < count; ++i) {
    ToBf16(rows.Row(positions[i]), rank, rank32, s.converted + i * rank32);
    s.rows[i] = s.converted + i * rank32;
  }
  Attention(s, heads, rank, count, scale, out);
}

GLINT_TARGET_BF16 void AttendBf16InPlace(const float* q_latent, int64_t heads, int64_t rank, const LatentRowsBf16& rows,
                                         const int64_t* positions, int64_t count, float scale, float* out,
                                         float* scratch) {
  GLINT_CHECK(rank % kRankStep == 0) << "AttendBf16InPlace needs a rank that is a multiple of 32, got " << rank;
  Scratch s(scratch, heads, count, rank);
  for (int64_t h = 0; h < heads; ++h) ToBf16(q_latent + h * rank, rank, rank, s.q + h * rank);
  for (int64_t i = 0; i < count; ++i) s.rows[i] = rows.Row(positions[i]);
  Attention(s, heads, rank, count, scale, out);
}

}  // namespace glint::mla
