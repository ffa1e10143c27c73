// Highway implementation of mla_ops.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/mla_ops.cc"
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
#include "kernels/mla_ops.h"

#include <algorithm>
#include <cmath>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "kernels/mla_tile_sums_avx512.h"

HWY_BEFORE_NAMESPACE();
namespace glint::mla {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;

constexpr int64_t kTile = 4;
constexpr int64_t kOutputHeads = 8, kOutputVectors = 2;  // the output tile: 8 heads × 2 vectors of the rank

// s[a][j] = scale · q[a] · rows[j] for a tile of 4 heads × 4 positions; q[a] and rows[j] always point at valid data
// (callers repeat a valid head or row to fill a partial tile and ignore those results), so every loop has a
// compile-time trip count and the 16 accumulators stay in registers (GCC keeps arrays indexed by runtime bounds in
// memory). The sums go straight to their destinations: copied through a local array, GCC merged the copy into 8-byte
// loads of values just stored 4 bytes at a time, which the store buffer cannot forward (17 % of the score phase).
// kWholeVectors: rank is a multiple of the vector length, so the loads need no mask.
template <bool kWholeVectors>
HWY_INLINE void ScoreTile(D d, const float* const* q, int64_t rank, const float* const* rows, float scale,
                          float* const* s) {
  const int64_t lanes = hn::Lanes(d);
  const auto load = [d](auto mask, const float* from) {
    if constexpr (kWholeVectors) {
      return hn::LoadU(d, from);
    } else {
      return hn::MaskedLoad(mask, d, from);
    }
  };
  auto a00 = hn::Zero(d), a01 = hn::Zero(d), a02 = hn::Zero(d), a03 = hn::Zero(d);
  auto a10 = hn::Zero(d), a11 = hn::Zero(d), a12 = hn::Zero(d), a13 = hn::Zero(d);
  auto a20 = hn::Zero(d), a21 = hn::Zero(d), a22 = hn::Zero(d), a23 = hn::Zero(d);
  auto a30 = hn::Zero(d), a31 = hn::Zero(d), a32 = hn::Zero(d), a33 = hn::Zero(d);
  for (int64_t r = 0; r < rank; r += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(rank - r));
    const auto c0 = load(mask, rows[0] + r), c1 = load(mask, rows[1] + r);
    const auto c2 = load(mask, rows[2] + r), c3 = load(mask, rows[3] + r);
    auto qv = load(mask, q[0] + r);
    a00 = hn::MulAdd(qv, c0, a00), a01 = hn::MulAdd(qv, c1, a01), a02 = hn::MulAdd(qv, c2, a02),
    a03 = hn::MulAdd(qv, c3, a03);
    qv = load(mask, q[1] + r);
    a10 = hn::MulAdd(qv, c0, a10), a11 = hn::MulAdd(qv, c1, a11), a12 = hn::MulAdd(qv, c2, a12),
    a13 = hn::MulAdd(qv, c3, a13);
    qv = load(mask, q[2] + r);
    a20 = hn::MulAdd(qv, c0, a20), a21 = hn::MulAdd(qv, c1, a21), a22 = hn::MulAdd(qv, c2, a22),
    a23 = hn::MulAdd(qv, c3, a23);
    qv = load(mask, q[3] + r);
    a30 = hn::MulAdd(qv, c0, a30), a31 = hn::MulAdd(qv, c1, a31), a32 = hn::MulAdd(qv, c2, a32),
    a33 = hn::MulAdd(qv, c3, a33);
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // Head a's 4 sums are 128-bit block a of the transposed tree's result (TileSums512, mla_tile_sums_avx512.h).
  const __m512 sums = _mm512_mul_ps(TileSums512(a00.raw, a01.raw, a02.raw, a03.raw, a10.raw, a11.raw, a12.raw, a13.raw,
                                                a20.raw, a21.raw, a22.raw, a23.raw, a30.raw, a31.raw, a32.raw, a33.raw),
                                    _mm512_set1_ps(scale));
  _mm_storeu_ps(s[0], _mm512_castps512_ps128(sums)), _mm_storeu_ps(s[1], _mm512_extractf32x4_ps(sums, 1));
  _mm_storeu_ps(s[2], _mm512_extractf32x4_ps(sums, 2)), _mm_storeu_ps(s[3], _mm512_extractf32x4_ps(sums, 3));
#else
  const auto sum = [&](auto v) { return scale * hn::GetLane(hn::SumOfLanes(d, v)); };
  s[0][0] = sum(a00), s[0][1] = sum(a01), s[0][2] = sum(a02), s[0][3] = sum(a03);
  s[1][0] = sum(a10), s[1][1] = sum(a11), s[1][2] = sum(a12), s[1][3] = sum(a13);
  s[2][0] = sum(a20), s[2][1] = sum(a21), s[2][2] = sum(a22), s[2][3] = sum(a23);
  s[3][0] = sum(a30), s[3][1] = sum(a31), s[3][2] = sum(a32), s[3][3] = sum(a33);
#endif
}

// out[a] (8 heads) = Σ_i p[a][i] · rows[i][r : r + 2·lanes] for one slice of 2 vectors of the rank, in position
// order; with `resume` the sums continue from out[a]'s values (a later block of positions). 8 heads × 2 vectors
// rather than 4 × 4: each row vector loaded (from L2) serves 8 heads, and the 8 broadcasts come from L1.
HWY_INLINE void OutputTile(D d, const float* const* p, const float* const* rows, int64_t count, int64_t r, int64_t rank,
                           bool resume, float* const* out) {
  const int64_t lanes = hn::Lanes(d);
  const auto m0 = hn::FirstN(d, static_cast<size_t>(std::clamp<int64_t>(rank - r, 0, lanes)));
  const auto m1 = hn::FirstN(d, static_cast<size_t>(std::clamp<int64_t>(rank - r - lanes, 0, lanes)));
  const auto load = [&](int64_t a, int64_t v, auto mask) {
    return resume ? hn::MaskedLoad(mask, d, out[a] + r + v * lanes) : hn::Zero(d);
  };
  auto a00 = load(0, 0, m0), a01 = load(0, 1, m1), a10 = load(1, 0, m0), a11 = load(1, 1, m1);
  auto a20 = load(2, 0, m0), a21 = load(2, 1, m1), a30 = load(3, 0, m0), a31 = load(3, 1, m1);
  auto a40 = load(4, 0, m0), a41 = load(4, 1, m1), a50 = load(5, 0, m0), a51 = load(5, 1, m1);
  auto a60 = load(6, 0, m0), a61 = load(6, 1, m1), a70 = load(7, 0, m0), a71 = load(7, 1, m1);
  for (int64_t i = 0; i < count; ++i) {
    const float* row = rows[i] + r;
    const auto c0 = hn::MaskedLoad(m0, d, row), c1 = hn::MaskedLoad(m1, d, row + lanes);
    const auto head = [&](int64_t a, hn::Vec<D>& v0, hn::Vec<D>& v1) {  // inlined: the accumulators stay in registers
      const auto pv = hn::Set(d, p[a][i]);
      v0 = hn::MulAdd(pv, c0, v0), v1 = hn::MulAdd(pv, c1, v1);
    };
    head(0, a00, a01), head(1, a10, a11), head(2, a20, a21), head(3, a30, a31);
    head(4, a40, a41), head(5, a50, a51), head(6, a60, a61), head(7, a70, a71);
  }
  const auto store = [&](float* o, auto v0, auto v1) {
    hn::BlendedStore(v0, m0, d, o + r), hn::BlendedStore(v1, m1, d, o + r + lanes);
  };
  store(out[0], a00, a01), store(out[1], a10, a11), store(out[2], a20, a21), store(out[3], a30, a31);
  store(out[4], a40, a41), store(out[5], a50, a51), store(out[6], a60, a61), store(out[7], a70, a71);
}

// scores[h, i] = scale · q_h · row[i] for every head, one group of positions at a time: a group's rows take at most
// 16 KB (8 rows of rank 512), so they stay in L1 beside a head tile's queries while every head tile passes over them,
// and reach the core from L2 or L3 once; the queries (128 KB for 64 heads) wait in L2. Measured against 256 KB blocks
// with the rows from L2 for every head tile: 64 heads, 2,051 positions 143 → 151 GFLOPS; groups of 12 or 16 rows were
// no better.
void Scores(D d, const float* q_latent, int64_t heads, int64_t rank, const float* const* row, int64_t count,
            float scale, float* scores) {
  constexpr int64_t kGroupBytes = 16 * 1024;
  const int64_t group_rows = kGroupBytes / (std::max<int64_t>(rank, 1) * static_cast<int64_t>(sizeof(float)));
  const int64_t group = std::max(kTile, group_rows / kTile * kTile);  // whole tiles, at least one
  float spare[kTile * kTile];  // a partial tile's results: the repeated heads' are dropped, the positions' copied
  for (int64_t begin = 0; begin < count; begin += group) {
    const int64_t end = std::min(count, begin + group);
    for (int64_t h = 0; h < heads; h += kTile) {
      const float* q[kTile];
      for (int64_t a = 0; a < kTile; ++a) q[a] = q_latent + std::min(h + a, heads - 1) * rank;
      for (int64_t i = begin; i < end; i += kTile) {  // groups are whole tiles: only the last tile can be partial
        const int64_t size = std::min(kTile, count - i);
        float* s[kTile];
        for (int64_t a = 0; a < kTile; ++a) {
          s[a] = h + a < heads && size == kTile ? scores + (h + a) * count + i : spare + a * kTile;
        }
        if (rank % hn::Lanes(d) == 0) {
          ScoreTile<true>(d, q, rank, row + i, scale, s);
        } else {
          ScoreTile<false>(d, q, rank, row + i, scale, s);
        }
        if (size == kTile) continue;
        for (int64_t a = 0; a < std::min(kTile, heads - h); ++a) {
          for (int64_t j = 0; j < size; ++j) scores[(h + a) * count + i + j] = spare[a * kTile + j];
        }
      }
    }
  }
}

// Softmax of every head's scores in place, in fp32 with the maximum subtracted.
void Softmax(D d, int64_t heads, int64_t count, float* scores) {
  const int64_t lanes = hn::Lanes(d);
  for (int64_t h = 0; h < heads; ++h) {
    float* s = scores + h * count;
    auto max_lanes = hn::Set(d, s[0]);  // lanes past count keep a score, so they never raise the maximum
    for (int64_t i = 0; i < count; i += lanes) {
      const auto mask = hn::FirstN(d, static_cast<size_t>(count - i));
      max_lanes = hn::Max(max_lanes, hn::IfThenElse(mask, hn::MaskedLoad(mask, d, s + i), max_lanes));
    }
    const float max_score = hn::GetLane(hn::MaxOfLanes(d, max_lanes));
    auto sum = hn::Zero(d);
    for (int64_t i = 0; i < count; i += lanes) {
      const auto mask = hn::FirstN(d, static_cast<size_t>(count - i));
      const auto e =
          hn::IfThenElseZero(mask, hn::Exp(d, hn::Sub(hn::MaskedLoad(mask, d, s + i), hn::Set(d, max_score))));
      sum = hn::Add(sum, e);
      hn::BlendedStore(e, mask, d, s + i);
    }
    const auto inverse = hn::Set(d, 1.0f / hn::GetLane(hn::SumOfLanes(d, sum)));
    for (int64_t i = 0; i < count; i += lanes) {
      const auto mask = hn::FirstN(d, static_cast<size_t>(count - i));
      hn::BlendedStore(hn::Mul(hn::MaskedLoad(mask, d, s + i), inverse), mask, d, s + i);
    }
  }
}

// out = P C, one position block at a time: 8 heads × 2 vectors of rank per pass over the block's positions (the
// block's rows stay in L2 across heads). The accumulators continue from out after the first block, so every
// output is the same chain of fused multiply-adds in position order as without blocks.
void Output(D d, const float* scores, int64_t heads, int64_t rank, const float* const* row, int64_t count, float* out) {
  const int64_t lanes = hn::Lanes(d), block = AttendBlockRows(rank);
  for (int64_t begin = 0; begin < count; begin += block) {
    const int64_t size = std::min(block, count - begin);
    for (int64_t r = 0; r < rank; r += kOutputVectors * lanes) {
      for (int64_t h = 0; h < heads; h += kOutputHeads) {
        const float* p[kOutputHeads];
        float* o[kOutputHeads];
        for (int64_t a = 0; a < kOutputHeads; ++a) {
          // A partial tile repeats head h: it computes head h's values again and writes them to the same place.
          const int64_t head = h + a < heads ? h + a : h;
          p[a] = scores + head * count + begin;
          o[a] = out + head * rank;
        }
        OutputTile(d, p, row + begin, size, r, rank, begin > 0, o);
      }
    }
  }
}

void SoftmaxRows(int64_t heads, int64_t count, float* scores) { Softmax(D(), heads, count, scores); }

void Attend(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
            int64_t count, float scale, float* out, float* scratch) {
  const D d;
  float* scores = scratch;  // [heads, count]
  // [count + 4] row pointers, after the scores at an even float offset (8-byte aligned for a 16-byte aligned scratch)
  const float** row = reinterpret_cast<const float**>(scratch + (heads * count + 1) / 2 * 2);
  for (int64_t i = 0; i < count; ++i) row[i] = rows.Row(positions[i]);
  for (int64_t i = count; i < count + kTile; ++i) row[i] = row[0];  // partial tiles repeat a valid row
  Scores(d, q_latent, heads, rank, row, count, scale, scores);
  Softmax(d, heads, count, scores);
  Output(d, scores, heads, rank, row, count, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace glint::mla
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glint::mla {
HWY_EXPORT(Attend);
HWY_EXPORT(SoftmaxRows);

// The block's latent rows take at most 256 KB, so they stay in L2 (1 MB per core on Zen 5, 2 MB on Sapphire Rapids)
// beside the probabilities while every head tile passes over them; 2,051 rows of rank 512 are 4.2 MB. Measured flat
// from 128 to 512 KB, slower at 64 KB.
int64_t AttendBlockRows(int64_t rank) {
  constexpr int64_t kBlockBytes = 256 * 1024;
  const int64_t rows = kBlockBytes / (std::max<int64_t>(rank, 1) * static_cast<int64_t>(sizeof(float)));
  return std::max<int64_t>(4, rows / 4 * 4);  // whole tiles of 4 positions, at least one
}

Result<AttentionPrecision> ParseAttentionPrecision(std::string_view name) {
  if (name == "fp32") return AttentionPrecision::kFp32;
  if (name != "bf16") return InvalidArgument("MLA attention precision must be fp32 or bf16, got '", name, "'");
  if (!AttendBf16Supported()) {
    return InvalidArgument(
        "bf16 MLA attention needs AVX512-BF16 (vdpbf16ps), which this CPU does not report; use fp32");
  }
  return AttentionPrecision::kBf16;
}

std::string_view AttentionPrecisionName(AttentionPrecision precision) {
  return precision == AttentionPrecision::kBf16 ? "bf16" : "fp32";
}

void AttendWith(AttentionPrecision precision, const float* q_latent, int64_t heads, int64_t rank,
                const LatentRows& rows, const int64_t* positions, int64_t count, float scale, float* out,
                float* scratch) {
  if (precision == AttentionPrecision::kBf16) {
    AttendBf16(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
  } else {
    Attend(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
  }
}

int64_t AttendScratchFloats(AttentionPrecision precision, int64_t heads, int64_t count, int64_t rank) {
  return precision == AttentionPrecision::kBf16 ? AttendBf16ScratchFloats(heads, count, rank)
                                                : AttendScratchFloats(heads, count);
}

int64_t AttendScratchFloats(int64_t heads, int64_t count) {
  return (heads * count + 1) / 2 * 2 + 2 * (count + 4);  // scores, then count + 4 row pointers (2 floats each)
}

void SoftmaxRows(int64_t heads, int64_t count, float* scores) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRows)(heads, count, scores);
}

void Attend(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
            int64_t count, float scale, float* out, float* scratch) {
  HWY_DYNAMIC_DISPATCH(Attend)(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
}
}  // namespace glint::mla
#endif  // HWY_ONCE
