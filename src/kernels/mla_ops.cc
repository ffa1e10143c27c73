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
#include "kernels/head_groups.h"
#include "kernels/transpose_floats-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glint::mla {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;

constexpr int64_t kOutputHeads = 8, kOutputVectors = 2;  // the rows-form output tile: 8 heads × 2 vectors of rank

// The heads sit in the lanes (model-glm53.md §6 written per lane): q̃ is transposed to qt [rank, hp] (hp: the heads
// rounded up to whole vectors, the padding zero), so a score is one lane's chain of fused multiply-adds over the rank
// in order and needs no horizontal sum, and a tile of V head vectors × P positions loads V vectors of qt and
// broadcasts P latent values per step of the rank (V·P multiply-adds for V + P loads). Each head's chain is its own
// lane's whatever the other heads of the call, so the bits do not depend on how the engine splits a token's heads
// over calls (mla_ops_test), nor on the vector width. Measured against the earlier 4 heads × 4 positions of dot
// products with a tree of horizontal sums (64 heads, 2,040 positions, rank 512, one thread, Zen 5): the score phase
// ≈ 150 → ≈ 205 GFLOPS (docs/performance.md "MLA attention with the heads in the lanes").
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kRegisters = 32;
#else
constexpr int kRegisters = 16;
#endif
// Head vectors per tile: 4 where 32 registers hold 24 accumulators, 2 where 16 hold 12.
constexpr int kMaxTileVectors = kRegisters == 32 ? 4 : 2;
// Positions (or values of the rank) per tile of V head vectors: accumulators V·P ≤ 24 (12), beside V loaded
// vectors and a broadcast.
constexpr int TilePositions(int vectors) {
  if (kRegisters == 32) return vectors == 4 ? 6 : vectors == 3 ? 8 : vectors == 2 ? 12 : 16;
  return vectors == 2 ? 6 : 12;
}
constexpr int kMaxTilePositions = TilePositions(1);

// Heads rounded up to whole vectors.
int64_t PaddedHeads(D d, int64_t heads) {
  const int64_t lanes = hn::Lanes(d);
  return (heads + lanes - 1) / lanes * lanes;
}

// st[j, ·] = scale · Σ_r qt[r, ·] · rows[j][r] for P positions j and V head vectors (qt and st start at the tile's
// first head vector; both have rows of hp values). Every row pointer is valid (callers repeat a row past the count
// and drop those results).
template <int V, int P>
HWY_INLINE void ScoreColumnsTile(D d, const float* qt, int64_t hp, int64_t rank, const float* const* rows, float scale,
                                 float* st) {
  const int64_t lanes = hn::Lanes(d);
  hn::Vec<D> acc[V][P];
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) acc[v][j] = hn::Zero(d);
  }
  const float* row[P];
#pragma GCC unroll 16
  for (int j = 0; j < P; ++j) row[j] = rows[j];
  for (int64_t r = 0; r < rank; ++r) {
    hn::Vec<D> q[V];
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) q[v] = hn::LoadU(d, qt + r * hp + v * lanes);
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) {
      const auto c = hn::Set(d, row[j][r]);
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[v][j] = hn::MulAdd(q[v], c, acc[v][j]);
    }
  }
  const auto s = hn::Set(d, scale);
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) hn::StoreU(hn::Mul(acc[v][j], s), d, st + j * hp + v * lanes);
  }
}

// The scores of V head vectors (from head vector v0) at every position; st has rows up to the count rounded up to P.
template <int V>
void ScoreColumnGroup(D d, const float* qt, int64_t hp, int64_t rank, const float* const* row, int64_t count,
                      float scale, int64_t v0, float* st) {
  constexpr int P = TilePositions(V);
  const int64_t lanes = hn::Lanes(d);
  for (int64_t i = 0; i < count; i += P) {
    ScoreColumnsTile<V, P>(d, qt + v0 * lanes, hp, rank, row + i, scale, st + i * hp + v0 * lanes);
  }
}

// st [count, hp]: scores[h at lane h, i] = scale · q̃_h · row[i], head vectors in groups of kMaxTileVectors; the group
// of V head vectors streams its qt (V · 64 B a step of the rank; 128 KB for 64 heads at rank 512, from L2) once per
// tile of positions, whose rows stay in L1.
void ScoreColumns(D d, const float* qt, int64_t hp, int64_t rank, const float* const* row, int64_t count, float scale,
                  float* st) {
  ForEachHeadGroup<kMaxTileVectors>(hp / static_cast<int64_t>(hn::Lanes(d)), [&]<int V>(int64_t v0) {
    ScoreColumnGroup<V>(d, qt, hp, rank, row, count, scale, v0, st);
  });
}

// Softmax over the positions of every head lane of st [count, hp], in place, in fp32 with the maximum subtracted:
// each head's own lane throughout (the sum in position order), so it too is the same whatever the heads per call.
void SoftmaxColumns(D d, int64_t hp, int64_t count, float* st) {
  const int64_t lanes = hn::Lanes(d);
  for (int64_t v = 0; v < hp; v += lanes) {
    auto max_score = hn::LoadU(d, st + v);
    for (int64_t i = 1; i < count; ++i) max_score = hn::Max(max_score, hn::LoadU(d, st + i * hp + v));
    auto sum = hn::Zero(d);
    for (int64_t i = 0; i < count; ++i) {
      const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, st + i * hp + v), max_score));
      sum = hn::Add(sum, e);
      hn::StoreU(e, d, st + i * hp + v);
    }
    const auto inverse = hn::Div(hn::Set(d, 1.0f), sum);
    for (int64_t i = 0; i < count; ++i) hn::StoreU(hn::Mul(hn::LoadU(d, st + i * hp + v), inverse), d, st + i * hp + v);
  }
}

// ot[r, ·] = Σ_i pt[i, ·] · rows[i][r] for P values r of the rank (from r0) and V head vectors, in position order;
// with `resume` the sums continue from ot (a later block of positions). The transposed output: V probability
// vectors loaded and P latent values broadcast per position, the same multiply-adds in the same order as the rows
// form (OutputTile), so the same bits.
template <int V, int P>
HWY_INLINE void OutputColumnsTile(D d, const float* pt, int64_t hp, const float* const* rows, int64_t count, int64_t r0,
                                  bool resume, float* ot) {
  const int64_t lanes = hn::Lanes(d);
  hn::Vec<D> acc[V][P];
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) acc[v][j] = resume ? hn::LoadU(d, ot + (r0 + j) * hp + v * lanes) : hn::Zero(d);
  }
  for (int64_t i = 0; i < count; ++i) {
    hn::Vec<D> p[V];
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) p[v] = hn::LoadU(d, pt + i * hp + v * lanes);
    const float* row = rows[i] + r0;
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) {
      const auto c = hn::Set(d, row[j]);
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) acc[v][j] = hn::MulAdd(p[v], c, acc[v][j]);
    }
  }
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) {
#pragma GCC unroll 16
    for (int j = 0; j < P; ++j) hn::StoreU(acc[v][j], d, ot + (r0 + j) * hp + v * lanes);
  }
}

// One block of positions for V head vectors (from v0) over the whole rank: tiles of P values, then single values.
template <int V>
void OutputColumnGroup(D d, const float* pt, int64_t hp, int64_t rank, const float* const* rows, int64_t count,
                       bool resume, int64_t v0, float* ot) {
  constexpr int P = TilePositions(V);
  const int64_t lanes = hn::Lanes(d);
  int64_t r = 0;
  for (; r + P <= rank; r += P)
    OutputColumnsTile<V, P>(d, pt + v0 * lanes, hp, rows, count, r, resume, ot + v0 * lanes);
  for (; r < rank; ++r) OutputColumnsTile<V, 1>(d, pt + v0 * lanes, hp, rows, count, r, resume, ot + v0 * lanes);
}

// out[a] (8 heads) = Σ_i p[a][i · p_stride] · rows[i][r : r + 2·lanes] for one slice of 2 vectors of the rank, in
// position order; with `resume` the sums continue from out[a]'s values (a later block of positions). The rows form
// of the output, for calls of one head vector (a decode task's 16 heads or fewer), where OutputColumnsTile would
// broadcast many latent values per probability vector: each row vector loaded (from L2) serves 8 heads.
HWY_INLINE void OutputTile(D d, const float* const* p, int64_t p_stride, const float* const* rows, int64_t count,
                           int64_t r, int64_t rank, bool resume, float* const* out) {
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
      const auto pv = hn::Set(d, p[a][i * p_stride]);
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

// out = P C from the probabilities pt [count, hp], one block of positions at a time (the block's rows stay in L2
// while every tile passes over them; AttendBlockRows), each output the chain of multiply-adds over the positions in
// order (resumed across blocks): calls of two head vectors or more in the transposed form through ot [rank, hp],
// then transposed into out; calls of one in the rows form. The same bits either way.
void Output(D d, const float* pt, int64_t heads, int64_t hp, int64_t rank, const float* const* row, int64_t count,
            float* ot, float* out) {
  const int64_t lanes = hn::Lanes(d), block = AttendBlockRows(rank), vectors = hp / lanes;
  for (int64_t begin = 0; begin < count; begin += block) {
    const int64_t size = std::min(block, count - begin);
    const bool resume = begin > 0;
    if (vectors == 1) {
      for (int64_t r = 0; r < rank; r += kOutputVectors * lanes) {
        for (int64_t h = 0; h < heads; h += kOutputHeads) {
          const float* p[kOutputHeads];
          float* o[kOutputHeads];
          for (int64_t a = 0; a < kOutputHeads; ++a) {
            // A partial tile repeats head h: it computes head h's values again and writes them to the same place.
            const int64_t head = h + a < heads ? h + a : h;
            p[a] = pt + begin * hp + head;
            o[a] = out + head * rank;
          }
          OutputTile(d, p, hp, row + begin, size, r, rank, resume, o);
        }
      }
      continue;
    }
    ForEachHeadGroup<kMaxTileVectors>(vectors, [&]<int V>(int64_t v0) {
      OutputColumnGroup<V>(d, pt + begin * hp, hp, rank, row + begin, size, resume, v0, ot);
    });
  }
  if (vectors > 1) glint::HWY_NAMESPACE::TransposeFloats(ot, hp, rank, heads, out, rank);
}

void SoftmaxRows(int64_t heads, int64_t count, float* scores) { Softmax(D(), heads, count, scores); }
// Exported under its own name: HWY_EXPORT takes a name, and SoftmaxColumns here is also the per-target kernel.
void SoftmaxColumnsExported(int64_t hp, int64_t count, float* st) { SoftmaxColumns(D(), hp, count, st); }

// The scratch's parts, in floats from its start (AttendScratchFloats): qt [rank, hp], st [count + P, hp] (P: the
// longest tile of positions, whose repeated rows' scores are dropped), ot [rank, hp], then count + P row pointers.
struct ScratchLayout {
  int64_t hp, qt, st, ot, row, floats;
};
ScratchLayout Layout(D d, int64_t heads, int64_t count, int64_t rank) {
  ScratchLayout l;
  l.hp = PaddedHeads(d, heads);
  l.qt = 0;
  l.st = l.qt + rank * l.hp;
  l.ot = l.st + (count + kMaxTilePositions) * l.hp;
  l.row = l.ot + rank * l.hp;
  l.floats = l.row + 2 * (count + kMaxTilePositions);  // pointers at an even float offset: 8-byte aligned
  return l;
}

int64_t ScratchFloats(int64_t heads, int64_t count, int64_t rank) { return Layout(D(), heads, count, rank).floats; }

void Attend(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
            int64_t count, float scale, float* out, float* scratch) {
  const D d;
  const ScratchLayout l = Layout(d, heads, count, rank);
  float* qt = scratch + l.qt;
  glint::HWY_NAMESPACE::TransposeFloats(q_latent, rank, heads, rank, qt, l.hp);  // q̃ [heads, rank] → qt
  for (int64_t r = 0; r < rank; ++r) std::fill(qt + r * l.hp + heads, qt + (r + 1) * l.hp, 0.0f);  // padding heads
  const float** row = reinterpret_cast<const float**>(scratch + l.row);
  for (int64_t i = 0; i < count; ++i) row[i] = rows.Row(positions[i]);
  for (int64_t i = count; i < count + kMaxTilePositions; ++i) row[i] = row[0];  // partial tiles repeat a valid row
  float* st = scratch + l.st;
  ScoreColumns(d, qt, l.hp, rank, row, count, scale, st);
  SoftmaxColumns(d, l.hp, count, st);
  Output(d, st, heads, l.hp, rank, row, count, scratch + l.ot, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace glint::mla
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glint::mla {
HWY_EXPORT(Attend);
HWY_EXPORT(ScratchFloats);
HWY_EXPORT(SoftmaxRows);
HWY_EXPORT(SoftmaxColumnsExported);

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
  switch (precision) {
    case AttentionPrecision::kBf16:
      return "bf16";
    case AttentionPrecision::kBf16Amx:
      return "bf16 on AMX tiles";
    case AttentionPrecision::kFp32:
      break;
  }
  return "fp32";
}

AttentionPrecision AttentionOnTiles(AttentionPrecision precision, Isa isa) {
  // AmxBf16UnavailableReason(kHardware) is empty only where the OS granted the tiles (IsaSupported(kAmx)) too.
  const bool tiles = isa == Isa::kAmx && AmxBf16UnavailableReason(AmxTiles::kHardware).empty();
  return precision == AttentionPrecision::kBf16 && tiles ? AttentionPrecision::kBf16Amx : precision;
}

void AttendWith(AttentionPrecision precision, const float* q_latent, int64_t heads, int64_t rank,
                const LatentRows& rows, const int64_t* positions, int64_t count, float scale, float* out,
                float* scratch) {
  switch (precision) {
    case AttentionPrecision::kBf16:
      AttendBf16(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
      return;
    case AttentionPrecision::kBf16Amx:
      AttendBf16Amx(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
      return;
    case AttentionPrecision::kFp32:
      break;
  }
  Attend(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
}

int64_t AttendScratchFloats(AttentionPrecision precision, int64_t heads, int64_t count, int64_t rank) {
  switch (precision) {
    case AttentionPrecision::kBf16:
      return AttendBf16ScratchFloats(heads, count, rank);
    case AttentionPrecision::kBf16Amx:
      return AttendBf16AmxScratchFloats(heads, count, rank);
    case AttentionPrecision::kFp32:
      break;
  }
  return AttendScratchFloats(heads, count, rank);
}

int64_t AttendScratchFloats(int64_t heads, int64_t count, int64_t rank) {
  return HWY_DYNAMIC_DISPATCH(ScratchFloats)(heads, count, rank);
}

void SoftmaxRows(int64_t heads, int64_t count, float* scores) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRows)(heads, count, scores);
}

void SoftmaxColumns(int64_t hp, int64_t count, float* st) {
  HWY_DYNAMIC_DISPATCH(SoftmaxColumnsExported)(hp, count, st);
}

void Attend(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
            int64_t count, float scale, float* out, float* scratch) {
  HWY_DYNAMIC_DISPATCH(Attend)(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
}
}  // namespace glint::mla
#endif  // HWY_ONCE
