// mla::AttendBf16 (mla_ops.h): absorbed MLA attention with AVX512-BF16 dot products. Every function carries its
// target attribute, so nothing here runs unless AttendBf16Supported().
//
// vdpbf16ps adds to each fp32 lane j the products of bf16 pairs 2j and 2j + 1 of its two operands: 32 products per
// instruction against vfmadd's 16, at the same throughput (Zen 5: 460 against 230 GFLOPS on one core, measured).
// As in the fp32 kernel (mla_ops.cc) the heads sit in the lanes, so no score needs a horizontal sum and every head's
// result is its own lane's chain of instructions in order, whatever the other heads of the call:
//   * scores: a lane pairs two neighbouring values of the rank. q̃ is transposed to qt [rank/2][hp] (each 32-bit lane
//     one head's pair (q̃_2k, q̃_2k+1)); a tile of V head vectors × P positions loads V vectors of qt and broadcasts
//     P latent pairs (c_i,2k, c_i,2k+1) per step: V·P instructions for V + P loads.
//   * output: a lane pairs two neighbouring positions. The probabilities go to pt [count/2][hp] (each lane one head's
//     (p_i, p_i+1)), and each block of latent rows is interleaved once into pairs [count/2][rank] (lane r:
//     (c_i,r, c_i+1,r)); a tile of V head vectors × P values of the rank loads V vectors of pt and broadcasts P pairs
//     per step, into ot [rank][hp], transposed to out at the end. A call of one head vector (a decode task of ≤ 16
//     heads) takes the rows form instead — 8 heads × 32 values of the rank, two latent rows unpacked per step and
//     each head's probability pair broadcast — the same instruction on the same pairs in the same order per output,
//     so the same bits.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, see gemm_i8_avx512.cc
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/status.h"
#include "kernels/head_groups.h"
#include "kernels/isa.h"
#include "kernels/mla_bf16_common.h"
#include "kernels/mla_ops.h"

#define GLINT_INLINE_BF16 GLINT_TARGET_BF16 inline __attribute__((always_inline))

namespace glint::mla {
namespace {

constexpr int64_t kLanes = 16;            // heads per vector: one fp32 lane (one bf16 pair) each
constexpr int64_t kRankStep = 32;         // bf16 values per 512-bit operand: the rank is padded to a multiple
constexpr int kMaxTileVectors = 4;        // head vectors per tile: V · P ≤ 24 accumulators beside V loads
constexpr int64_t kOutHeads = 8;          // rows-form output tile: 8 heads × 32 rank values (two accumulators each)
constexpr int64_t kL2Bytes = 256 * 1024;  // a block of latent pairs that stays in L2 (as AttendBlockRows)

// Positions (scores) or values of the rank (output) per tile of V head vectors.
constexpr int TilePositions(int vectors) { return vectors == 4 ? 6 : vectors == 3 ? 8 : vectors == 2 ? 12 : 16; }
constexpr int kMaxTilePositions = TilePositions(1);

int64_t PaddedRank(int64_t rank) { return (rank + kRankStep - 1) / kRankStep * kRankStep; }
int64_t PaddedHeads(int64_t heads) { return (heads + kLanes - 1) / kLanes * kLanes; }
int64_t EvenCount(int64_t count) { return (count + 1) / 2 * 2; }
// Positions per output block: pairs of a block take ≤ kL2Bytes.
int64_t BlockPositions(int64_t rank32) { return std::max<int64_t>(2, kL2Bytes / (rank32 * 2) / 2 * 2); }

GLINT_INLINE_BF16 __m512bh AsBh(__m512i v) { return reinterpret_cast<__m512bh>(v); }
GLINT_INLINE_BF16 __m512i Broadcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// st[j][·] = scale · Σ_k qt[k][·] · (c_j,2k, c_j,2k+1) for P positions j and V head vectors (qt and st start at the
// tile's first head vector; rows of hp lanes). Every row pointer is valid (past the count they point at zeros, and
// those results are dropped).
template <int V, int P>
GLINT_TARGET_BF16 void ScoreTile(const uint32_t* qt, int64_t hp, int64_t pairs, const uint16_t* const* rows,
                                 float scale, float* st) {
  __m512 acc[V][P];
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) acc[v][j] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < pairs; ++k) {
    __m512bh q[V];
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) q[v] = AsBh(_mm512_loadu_si512(qt + k * hp + v * kLanes));
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) {
      const __m512bh c = AsBh(Broadcast32(rows[j] + 2 * k));
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[v][j] = _mm512_dpbf16_ps(acc[v][j], q[v], c);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) _mm512_storeu_ps(st + j * hp + v * kLanes, _mm512_mul_ps(acc[v][j], s));
  }
}

// st [count + kMaxTilePositions][hp]: every position's scores, head vectors in groups of V, tiles of P positions.
GLINT_TARGET_BF16 void Scores(const uint32_t* qt, int64_t hp, int64_t rank32, const uint16_t* const* rows,
                              int64_t count, float scale, float* st) {
  ForEachHeadGroup<kMaxTileVectors>(hp / kLanes, [&]<int V>(int64_t v0) {
    constexpr int P = TilePositions(V);
    for (int64_t i = 0; i < count; i += P) {
      ScoreTile<V, P>(qt + v0 * kLanes, hp, rank32 / 2, rows + i, scale, st + i * hp + v0 * kLanes);
    }
  });
}

// pt[m][·] = (bf16(p_2m), bf16(p_2m+1)) per head lane (round to nearest even; an odd count's last pair ends in 0).
GLINT_TARGET_BF16 void ProbabilityPairs(const float* st, int64_t hp, int64_t count, uint32_t* pt) {
  for (int64_t i = 0; i < count; i += 2) {
    for (int64_t v = 0; v < hp; v += kLanes) {
      const __m512 even = _mm512_loadu_ps(st + i * hp + v);
      const __m512 odd = i + 1 < count ? _mm512_loadu_ps(st + (i + 1) * hp + v) : _mm512_setzero_ps();
      const __m512i low = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(even)));
      const __m512i high = _mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(odd)));
      _mm512_storeu_si512(pt + i / 2 * hp + v, _mm512_or_si512(low, _mm512_slli_epi32(high, 16)));
    }
  }
}

// pairs[m][r] = (c_2m,r, c_2m+1,r) for the positions [begin, end) (even), rows as in Attention.
GLINT_TARGET_BF16 void LatentPairs(const uint16_t* const* rows, int64_t begin, int64_t end, int64_t rank32,
                                   uint32_t* pairs) {
  for (int64_t i = begin; i < end; i += 2)
    InterleavePositions(rows[i], rows[i + 1], rank32, pairs + (i - begin) / 2 * rank32);
}

// ot[r][·] (+)= Σ_m pt[m][·] · pairs[m][r] for P values r of the rank (from r0) and V head vectors, over `steps`
// position pairs in order; with `resume` the sums continue from ot (a later block of positions).
template <int V, int P>
GLINT_TARGET_BF16 void OutputColumnsTile(const uint32_t* pt, int64_t hp, const uint32_t* pairs, int64_t rank32,
                                         int64_t steps, int64_t r0, bool resume, float* ot) {
  __m512 acc[V][P];
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) {
      acc[v][j] = resume ? _mm512_loadu_ps(ot + (r0 + j) * hp + v * kLanes) : _mm512_setzero_ps();
    }
  }
  for (int64_t m = 0; m < steps; ++m) {
    __m512bh p[V];
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) p[v] = AsBh(_mm512_loadu_si512(pt + m * hp + v * kLanes));
    const uint32_t* c = pairs + m * rank32 + r0;
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) {
      const __m512bh cj = AsBh(_mm512_set1_epi32(static_cast<int32_t>(c[j])));
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[v][j] = _mm512_dpbf16_ps(acc[v][j], p[v], cj);
    }
  }
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) _mm512_storeu_ps(ot + (r0 + j) * hp + v * kLanes, acc[v][j]);
  }
}

// The whole rank for V head vectors (from v0) over one block: tiles of P and P − 1 values (as even as that allows,
// so no narrow tile ends the rank).
template <int V>
GLINT_TARGET_BF16 void OutputColumnGroup(const uint32_t* pt, int64_t hp, const uint32_t* pairs, int64_t rank32,
                                         int64_t steps, bool resume, int64_t v0, float* ot) {
  constexpr int P = TilePositions(V);
  const int64_t tiles = (rank32 + P - 1) / P, wide = rank32 - tiles * (P - 1);  // tiles of P, then of P − 1
  int64_t r = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    if (t < wide) {
      OutputColumnsTile<V, P>(pt + v0 * kLanes, hp, pairs, rank32, steps, r, resume, ot + v0 * kLanes);
      r += P;
    } else {
      OutputColumnsTile<V, P - 1>(pt + v0 * kLanes, hp, pairs, rank32, steps, r, resume, ot + v0 * kLanes);
      r += P - 1;
    }
  }
}

// The output accumulators' lanes in the rows form: `lo` holds rank values 0–3, 8–11, 16–19, 24–27 of a 32-value
// slice (block b of 4 lanes = values 8b … 8b + 3), `hi` values 4–7, 12–15, … (vpunpck{l,h}wd interleave each
// 128-bit block's halves). Natural order: first = [lo.b0, hi.b0, lo.b1, hi.b1], second = [lo.b2, hi.b2, lo.b3, hi.b3].
GLINT_INLINE_BF16 void Unscramble(__m512 lo, __m512 hi, float* out) {
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  _mm512_storeu_ps(out, _mm512_permutex2var_ps(lo, first, hi));
  _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(lo, second, hi));
}

// The rows form: acc[a] (8 heads, 32 rank values at r, permuted) (+)= Σ over the position pairs of [begin, end) of
// (p_i, p_i+1) · (c_i, c_i+1). p[a]: head a's lane of pt (stride hp); row: pointers to the rows (row count points at
// zeros when count is odd).
GLINT_TARGET_BF16 void OutputRowsTile(const uint32_t* const* p, int64_t hp, const uint16_t* const* row, int64_t begin,
                                      int64_t end, int64_t r, bool resume, float* const* acc) {
  __m512 lo[kOutHeads], hi[kOutHeads];
#pragma GCC unroll 8
  for (int a = 0; a < kOutHeads; ++a) {
    lo[a] = resume ? _mm512_loadu_ps(acc[a]) : _mm512_setzero_ps();
    hi[a] = resume ? _mm512_loadu_ps(acc[a] + 16) : _mm512_setzero_ps();
  }
  for (int64_t i = begin; i < end; i += 2) {
    const __m512i c0 = _mm512_loadu_si512(row[i] + r), c1 = _mm512_loadu_si512(row[i + 1] + r);
    const __m512bh pairs_lo = AsBh(_mm512_unpacklo_epi16(c0, c1));
    const __m512bh pairs_hi = AsBh(_mm512_unpackhi_epi16(c0, c1));
#pragma GCC unroll 8
    for (int a = 0; a < kOutHeads; ++a) {
      const __m512bh pv = AsBh(_mm512_set1_epi32(static_cast<int32_t>(p[a][i / 2 * hp])));
      lo[a] = _mm512_dpbf16_ps(lo[a], pv, pairs_lo);
      hi[a] = _mm512_dpbf16_ps(hi[a], pv, pairs_hi);
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < kOutHeads; ++a) _mm512_storeu_ps(acc[a], lo[a]), _mm512_storeu_ps(acc[a] + 16, hi[a]);
}

}  // namespace

// The kernel's unpacks, 16-bit permutes and masked 16-bit stores are AVX512-BW: checked too, in case a hypervisor
// hides it.
bool AttendBf16Supported() { return CpuHasAvx512Bf16() && __builtin_cpu_supports("avx512bw"); }

namespace {

// The scratch of Attention: sections on 64-byte boundaries.
struct Scratch {
  Scratch(float* scratch, int64_t heads, int64_t count, int64_t rank32) {
    const int64_t hp = PaddedHeads(heads), even = EvenCount(count), block = std::min(BlockPositions(rank32), even);
    float* at = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) / 64 * 64);
    const auto take = [&](int64_t bytes) {
      float* section = at;
      at += Floats64(bytes);
      return section;
    };
    q = reinterpret_cast<uint16_t*>(take(hp * rank32 * 2));
    qt = reinterpret_cast<uint32_t*>(take(hp * rank32 * 2));
    st = take((count + kMaxTilePositions) * hp * 4);
    pt = reinterpret_cast<uint32_t*>(take(even / 2 * hp * 4));
    ot = take(rank32 * hp * 4);
    pairs = reinterpret_cast<uint32_t*>(take(block / 2 * rank32 * 4));
    rows = reinterpret_cast<const uint16_t**>(take((count + kMaxTilePositions) * sizeof(uint16_t*)));
    zeros = reinterpret_cast<uint16_t*>(take(rank32 * 2));
    converted = reinterpret_cast<uint16_t*>(at);  // AttendBf16's rows, last (AttendBf16InPlace has none)
  }
  static int64_t Floats(int64_t heads, int64_t count, int64_t rank32) {
    const int64_t hp = PaddedHeads(heads), even = EvenCount(count), block = std::min(BlockPositions(rank32), even);
    return 16 + 2 * Floats64(hp * rank32 * 2) + Floats64((count + kMaxTilePositions) * hp * 4) +
           Floats64(even / 2 * hp * 4) + Floats64(rank32 * hp * 4) + Floats64(block / 2 * rank32 * 4) +
           Floats64((count + kMaxTilePositions) * sizeof(uint16_t*)) + Floats64(rank32 * 2);
  }
  uint16_t* q;            // [hp, rank32] bf16, the padding heads zero
  uint32_t* qt;           // [rank32 / 2, hp] bf16 pairs: q transposed as 32-bit words
  float* st;              // [count + kMaxTilePositions, hp] fp32 scores, then probabilities
  uint32_t* pt;           // [even count / 2, hp] bf16 probability pairs
  float* ot;              // [rank32, hp] fp32 output sums; in the rows form [heads, rank32], each slice permuted
  uint32_t* pairs;        // [block / 2, rank32] bf16 latent pairs of one output block
  const uint16_t** rows;  // [count + kMaxTilePositions] row pointers; those past count point at `zeros`
  uint16_t* zeros;        // [rank32]
  uint16_t* converted;    // [count, rank32] bf16
};

// out [heads, rank] = the first heads and rank of ot [rank32, hp] transposed, in 16 × 16 blocks.
GLINT_TARGET_BF16 void StoreTransposed(const float* ot, int64_t hp, int64_t heads, int64_t rank, float* out) {
  for (int64_t r0 = 0; r0 < rank; r0 += kLanes) {
    const __mmask16 valid = static_cast<__mmask16>(rank - r0 >= 16 ? 0xffff : (1u << (rank - r0)) - 1);
    for (int64_t h0 = 0; h0 < heads; h0 += kLanes) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_castps_si512(_mm512_loadu_ps(ot + (r0 + i) * hp + h0));
      internal::Transpose16x16(r);
      for (int64_t h = 0; h < std::min(kLanes, heads - h0); ++h) {
        _mm512_mask_storeu_ps(out + (h0 + h) * rank + r0, valid, _mm512_castsi512_ps(r[h]));
      }
    }
  }
}

// The attention over rows s.rows[0, count) (each rank32 bf16 values), s.q filled.
GLINT_TARGET_BF16 void Attention(Scratch& s, int64_t heads, int64_t rank, int64_t count, float scale, float* out) {
  const int64_t rank32 = PaddedRank(rank), hp = PaddedHeads(heads), even = EvenCount(count);
  std::memset(s.zeros, 0, rank32 * sizeof(uint16_t));
  for (int64_t i = count; i < count + kMaxTilePositions; ++i) s.rows[i] = s.zeros;
  std::memset(s.q + heads * rank32, 0, (hp - heads) * rank32 * sizeof(uint16_t));
  TransposeRankPairs(s.q, hp, rank32, s.qt);

  Scores(s.qt, hp, rank32, s.rows, count, scale, s.st);
  SoftmaxColumns(hp, count, s.st);
  ProbabilityPairs(s.st, hp, count, s.pt);

  // Output: blocks of positions whose pairs stay in L2 while every tile passes over them.
  const int64_t vectors = hp / kLanes, block = BlockPositions(rank32);
  for (int64_t begin = 0; begin < even; begin += block) {
    const int64_t end = std::min(even, begin + block), steps = (end - begin) / 2;
    const bool resume = begin > 0;
    const uint32_t* pt = s.pt + begin / 2 * hp;
    if (vectors == 1) {
      alignas(64) float discard[kOutHeads][kRankStep];  // a partial tile's extra heads: computed, never read
      for (int64_t r = 0; r < rank32; r += kRankStep) {
        for (int64_t h = 0; h < heads; h += kOutHeads) {
          const uint32_t* pa[kOutHeads];
          float* acc[kOutHeads];
          for (int64_t a = 0; a < kOutHeads; ++a) {
            const bool real = h + a < heads;
            pa[a] = s.pt + (real ? h + a : h);
            acc[a] = real ? s.ot + (h + a) * rank32 + r : discard[a];
          }
          OutputRowsTile(pa, hp, s.rows, begin, end, r, resume, acc);
        }
      }
      continue;
    }
    LatentPairs(s.rows, begin, end, rank32, s.pairs);
    ForEachHeadGroup<kMaxTileVectors>(
        vectors, [&]<int V>(int64_t v0) { OutputColumnGroup<V>(pt, hp, s.pairs, rank32, steps, resume, v0, s.ot); });
  }
  if (vectors > 1) {
    StoreTransposed(s.ot, hp, heads, rank, out);
    return;
  }
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < rank32; r += kRankStep) {
      const float* sums = s.ot + h * rank32 + r;
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
