// Highway implementations of kda_ops.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kda_ops.cc"
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
#include "kernels/kda_ops.h"

#include <algorithm>
#include <cstring>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "kernels/transpose_floats-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glint::kda {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;

// y[0..n) += a · x
HWY_INLINE void Axpy(D d, float a, const float* x, float* y, int64_t n) {
  const int64_t lanes = hn::Lanes(d);
  const auto av = hn::Set(d, a);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    hn::BlendedStore(hn::MulAdd(av, hn::MaskedLoad(mask, d, x + i), hn::MaskedLoad(mask, d, y + i)), mask, d, y + i);
  }
}

HWY_INLINE float Dot(D d, const float* a, const float* b, int64_t n) {
  const int64_t lanes = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + lanes), hn::LoadU(d, b + i + lanes), s1);
  }
  for (; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    s0 = hn::MulAdd(hn::MaskedLoad(mask, d, a + i), hn::MaskedLoad(mask, d, b + i), s0);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}

// out = x ⊙ exp(e), n values.
HWY_INLINE void MulExp(D d, const float* x, const float* e, int64_t n, float* out) {
  const int64_t lanes = hn::Lanes(d);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    hn::BlendedStore(hn::Mul(hn::MaskedLoad(mask, d, x + i), hn::Exp(d, hn::MaskedLoad(mask, d, e + i))), mask, d,
                     out + i);
  }
}

void DecodeStep(float* state, const float* q, const float* k, const float* v, const float* g, float beta, int64_t dk,
                int64_t dv, float* o) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  constexpr int64_t kMaxKey = 256;
  float alpha[kMaxKey], decayed_k[kMaxKey], decayed_q[kMaxKey];  // dk ≤ 256, checked by the caller's config
  MulExp(d, k, g, dk, decayed_k);
  MulExp(d, q, g, dk, decayed_q);
  for (int64_t i = 0; i < dk; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(dk - i));
    hn::BlendedStore(hn::Exp(d, hn::MaskedLoad(mask, d, g + i)), mask, d, alpha + i);
  }
  // Pass 1 (read only): u = (Diag(α) S)ᵀ k and p = (Diag(α) S)ᵀ q, over the value dim, by strips of 4 vectors
  // with both sums in registers across all dk rows (a last partial strip as axpys into memory). As axpys each row's
  // update waited on the previous row's store of the same sums (store forwarding in the chain), so the rows of S
  // were requested one after another: with S out of cache (a batch's states are megabytes) a step took ≈ 4× its
  // time in L3. The same multiply-adds in the same order per element: bit for bit the sums of the axpys.
  float u[kMaxKey];
  int64_t j0 = 0;
  for (; j0 + 4 * lanes <= dv; j0 += 4 * lanes) {
    auto u0 = hn::Zero(d), u1 = hn::Zero(d), u2 = hn::Zero(d), u3 = hn::Zero(d);
    auto p0 = hn::Zero(d), p1 = hn::Zero(d), p2 = hn::Zero(d), p3 = hn::Zero(d);
    for (int64_t key = 0; key < dk; ++key) {
      const float* row = state + key * dv + j0;
      const auto ak = hn::Set(d, decayed_k[key]), aq = hn::Set(d, decayed_q[key]);
      const auto s0 = hn::LoadU(d, row), s1 = hn::LoadU(d, row + lanes);
      const auto s2 = hn::LoadU(d, row + 2 * lanes), s3 = hn::LoadU(d, row + 3 * lanes);
      u0 = hn::MulAdd(ak, s0, u0), u1 = hn::MulAdd(ak, s1, u1), u2 = hn::MulAdd(ak, s2, u2);
      u3 = hn::MulAdd(ak, s3, u3);
      p0 = hn::MulAdd(aq, s0, p0), p1 = hn::MulAdd(aq, s1, p1), p2 = hn::MulAdd(aq, s2, p2);
      p3 = hn::MulAdd(aq, s3, p3);
    }
    hn::StoreU(u0, d, u + j0), hn::StoreU(u1, d, u + j0 + lanes);
    hn::StoreU(u2, d, u + j0 + 2 * lanes), hn::StoreU(u3, d, u + j0 + 3 * lanes);
    hn::StoreU(p0, d, o + j0), hn::StoreU(p1, d, o + j0 + lanes);
    hn::StoreU(p2, d, o + j0 + 2 * lanes), hn::StoreU(p3, d, o + j0 + 3 * lanes);
  }
  if (j0 < dv) {
    std::fill(u + j0, u + dv, 0.0f);
    std::fill(o + j0, o + dv, 0.0f);
    for (int64_t key = 0; key < dk; ++key) {
      const float* row = state + key * dv;
      Axpy(d, decayed_k[key], row + j0, u + j0, dv - j0);
      Axpy(d, decayed_q[key], row + j0, o + j0, dv - j0);
    }
  }
  // δ = β (v − u);  o = p + (k·q) δ
  const float kq = Dot(d, k, q, dk);
  float delta[kMaxKey];
  for (int64_t j = 0; j < dv; ++j) delta[j] = beta * (v[j] - u[j]);
  Axpy(d, kq, delta, o, dv);
  // Pass 2: S ← Diag(α) S + k δᵀ
  for (int64_t key = 0; key < dk; ++key) {
    float* row = state + key * dv;
    const auto a = hn::Set(d, alpha[key]), kk = hn::Set(d, k[key]);
    for (int64_t j = 0; j < dv; j += lanes) {
      const auto mask = hn::FirstN(d, static_cast<size_t>(dv - j));
      const auto updated =
          hn::MulAdd(a, hn::MaskedLoad(mask, d, row + j), hn::Mul(kk, hn::MaskedLoad(mask, d, delta + j)));
      hn::BlendedStore(updated, mask, d, row + j);
    }
  }
}

// ---- The chunked form as register-tiled matrix products ----
//
// A chunk is ≈ 4.6 M multiply-adds a head (n = 64, dk = dv = 128): W S0, Qγ S0 and Kᵀν are n·dk·dv each, the decayed
// Gram matrices, U and W n²·d/2 each. As dot products and axpys over 128 floats every multiply-add also loads or
// stores (44 GFLOPS on a Zen 5 core, ≈ 20 % of its fp32 peak); as tiles of 4 rows × 4 vectors of accumulators each
// loaded B vector feeds 4 FMAs and each broadcast A element 4 (`MatMul`), so the FMA ports, not the loads, bound it.

enum class Accumulate { kSet, kAdd, kSubtract };  // C = AB, C += AB, C −= AB

// A(m, k) = a[m · row_step + k · depth_step]: row-major A has (lda, 1), a transposed one (1, lda).
struct MatrixA {
  const float* a;
  int64_t row_step, depth_step;
};

// C[m, 0:cols) (op)= Σ_k A(m, k) · B[k, 0:cols) for m ∈ [0, rows), k ∈ [0, depth); B and C row-major.
// lower_triangular: A(m, k) = 0 for k > m (and stored as 0), so a tile of rows [m0, m0 + MR) stops at depth m0 + MR.
struct MatMulArgs {
  MatrixA a;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  int64_t rows, cols, depth;
  bool lower_triangular = false;
  Accumulate op = Accumulate::kSet;
};

// Accumulator tile: MR rows × NV vectors. AVX-512 has 32 vector registers (16 accumulators + 4 B vectors + a
// broadcast); AVX2 and the emulated targets 16 (8 + 2 + 1).
#if HWY_TARGET <= HWY_AVX3
constexpr int kTileVectors = 4;
#else
constexpr int kTileVectors = 2;
#endif
constexpr int kTileRows = 4;

// One MR × NV tile at (m0, c0). Compile-time trip counts keep the accumulators in registers.
template <int MR, int NV, bool kSubtract>
HWY_INLINE void MatMulTile(D d, const MatMulArgs& p, int64_t m0, int64_t c0) {
  const int64_t lanes = hn::Lanes(d);
  using V = hn::Vec<D>;
  using M = hn::Mask<D>;
  M mask[NV];
  V acc[MR][NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v)
    mask[v] = hn::FirstN(d, static_cast<size_t>(std::clamp<int64_t>(p.cols - c0 - v * lanes, 0, lanes)));
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      acc[r][v] =
          p.op == Accumulate::kSet ? hn::Zero(d) : hn::MaskedLoad(mask[v], d, p.c + (m0 + r) * p.ldc + c0 + v * lanes);
    }
  }
  const int64_t depth = p.lower_triangular ? std::min(p.depth, m0 + MR) : p.depth;
  const float* a = p.a.a + m0 * p.a.row_step;
  const float* b = p.b + c0;
  for (int64_t k = 0; k < depth; ++k, a += p.a.depth_step, b += p.ldb) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = hn::MaskedLoad(mask[v], d, b + v * lanes);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const V av = hn::Set(d, a[r * p.a.row_step]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
        acc[r][v] = kSubtract ? hn::NegMulAdd(av, bv[v], acc[r][v]) : hn::MulAdd(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) hn::BlendedStore(acc[r][v], mask[v], d, p.c + (m0 + r) * p.ldc + c0 + v * lanes);
  }
}

template <bool kSubtract>
void MatMulAs(D d, const MatMulArgs& p) {
  const int64_t step = kTileVectors * static_cast<int64_t>(hn::Lanes(d));
  for (int64_t c0 = 0; c0 < p.cols; c0 += step) {
    int64_t m0 = 0;
    for (; m0 + kTileRows <= p.rows; m0 += kTileRows) MatMulTile<kTileRows, kTileVectors, kSubtract>(d, p, m0, c0);
    for (; m0 < p.rows; ++m0) MatMulTile<1, kTileVectors, kSubtract>(d, p, m0, c0);
  }
}

void MatMul(D d, const MatMulArgs& p) {
  if (p.op == Accumulate::kSubtract) {
    MatMulAs<true>(d, p);
  } else {
    MatMulAs<false>(d, p);
  }
}

// out[0:n) = x ⊙ y
HWY_INLINE void Multiply(D d, const float* x, const float* y, int64_t n, float* out) {
  const int64_t lanes = hn::Lanes(d);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    hn::BlendedStore(hn::Mul(hn::MaskedLoad(mask, d, x + i), hn::MaskedLoad(mask, d, y + i)), mask, d, out + i);
  }
}

// x[0:n) = exp(x)
HWY_INLINE void Exponentiate(D d, float* x, int64_t n) {
  const int64_t lanes = hn::Lanes(d);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    hn::BlendedStore(hn::Exp(d, hn::MaskedLoad(mask, d, x + i)), mask, d, x + i);
  }
}

// The chunk's scratch (ChunkScratchFloats), named. n rows of the chunk, sub-blocks of kSubBlock rows; "ᵀ" marks a
// [dk, n] matrix (the B operand of a Gram product must run along the chunk's rows).
struct ChunkScratch {
  static constexpr int64_t kBlocks = kChunkTokens / kSubBlock;
  ChunkScratch(float* scratch, int64_t n, int64_t dk, int64_t dv)
      : prefix(scratch),
        suffix(prefix + n * dk),
        totals(suffix + n * dk),
        before(totals + kBlocks * dk),
        after(before + kBlocks * dk),
        between(after + kBlocks * dk),
        q_hat(between + kBlocks * kBlocks * dk),
        k_hat(q_hat + n * dk),
        q_gamma(k_hat + n * dk),
        k_gamma(q_gamma + n * dk),
        k_last(k_gamma + n * dk),
        k_suffix(k_last + n * dk),
        k_check_t(k_suffix + n * dk),
        k_suffix_t(k_check_t + dk * n),
        keys_t(k_suffix_t + dk * n),
        lower(keys_t + dk * n),
        inverse(lower + n * n),
        scores(inverse + n * n),
        nu(scores + n * n),
        w(nu + n * dv) {}
  float* prefix;      // [n, dk]  L_i: in-block inclusive prefix sum of g, then exp(L_i)
  float* suffix;      // [n, dk]  R_j: in-block exclusive suffix sum of g, then exp(R_j)
  float* totals;      // [blocks, dk] each block's sum of g
  float* before;      // [blocks, dk] exp(Σ totals of the blocks before)
  float* after;       // [blocks, dk] exp(Σ totals of the blocks after)
  float* between;     // [blocks, blocks, dk] (bi, bj): exp(Σ totals of the blocks strictly between bj < bi)
  float* q_hat;       // [n, dk] q ⊙ exp(L)
  float* k_hat;       // [n, dk] k ⊙ exp(L)
  float* q_gamma;     // [n, dk] q ⊙ Γ = q ⊙ exp(G)
  float* k_gamma;     // [n, dk] k ⊙ Γ
  float* k_last;      // [n, dk] k ⊙ exp(G_last − G)
  float* k_suffix;    // [n, dk] k ⊙ exp(R)
  float* k_check_t;   // [dk, n] (k ⊙ exp(−L))ᵀ
  float* k_suffix_t;  // [dk, n] (k ⊙ exp(R))ᵀ
  float* keys_t;      // [dk, n] one query block's Gram keys: k_suffix_t ⊙ between for earlier blocks, k_check_t in it
  float* lower;       // [n, n] L[i, j] = β_i (k_i·k_j)_decayed, j < i
  float* inverse;     // [n, n] A = (I + L)^-1, then A diag(β)
  float* scores;      // [n, n] Aqk, j ≤ i
  float* nu;          // [n, dv] U, then ν
  float* w;           // [n, dk] W
};

// Requests row `row` of [rows] strided rows of `floats` values into the cache (nothing past the last row). The
// chunk's q, k, v and g rows are a projection row apart (96 KB at the model's widths): each row is a new page and
// its lines miss, and the kernels' loops over them stalled on those loads (perf: 73 % of DecayedRows' samples on its
// first loads of q and k) without requests this many rows ahead.
constexpr int64_t kPrefetchRowsAhead = 8;
HWY_INLINE void PrefetchRow(const float* base, int64_t stride, int64_t row, int64_t rows, int64_t floats) {
  if (row >= rows) return;
  const char* p = reinterpret_cast<const char*>(base + row * stride);
  for (int64_t byte = 0; byte < floats * static_cast<int64_t>(sizeof(float)); byte += 64) __builtin_prefetch(p + byte);
}

// In-block prefix and suffix sums and block totals of g, a row at a time (vectors across the key channels), then
// the exponentials every product needs: exp(L), exp(R), and per block exp of the whole blocks before, after and
// between. Each is ≤ 1 but exp(−L) (≤ e^80, kSubBlock · the gate's lower bound −5).
void DecaySums(D d, const ChunkArgs& args, int64_t blocks, const ChunkScratch& s) {
  const int64_t n = args.n, dk = args.dk, lanes = hn::Lanes(d);
  for (int64_t i = 0; i < n; ++i) PrefetchRow(args.g, args.g_stride, i, n, dk);  // the first pass reads them all
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kSubBlock, end = std::min(n, begin + kSubBlock);
    for (int64_t c = 0; c < dk; c += lanes) {
      const auto mask = hn::FirstN(d, static_cast<size_t>(dk - c));
      auto run = hn::Zero(d);
      for (int64_t i = begin; i < end; ++i) {
        run = hn::Add(run, hn::MaskedLoad(mask, d, args.g + i * args.g_stride + c));
        hn::BlendedStore(run, mask, d, s.prefix + i * dk + c);
      }
      hn::BlendedStore(run, mask, d, s.totals + b * dk + c);
      run = hn::Zero(d);
      for (int64_t i = end - 1; i >= begin; --i) {
        hn::BlendedStore(run, mask, d, s.suffix + i * dk + c);
        run = hn::Add(run, hn::MaskedLoad(mask, d, args.g + i * args.g_stride + c));
      }
    }
  }
  // Whole-block sums, exponentiated: before[b], after[b], between[bi][bj].
  for (int64_t c = 0; c < dk; ++c) {
    for (int64_t b = 0; b < blocks; ++b) {
      float before = 0, after = 0;
      for (int64_t p = 0; p < b; ++p) before += s.totals[p * dk + c];
      for (int64_t p = b + 1; p < blocks; ++p) after += s.totals[p * dk + c];
      s.before[b * dk + c] = before, s.after[b * dk + c] = after;
      for (int64_t bj = 0; bj < b; ++bj) {
        float middle = 0;
        for (int64_t p = bj + 1; p < b; ++p) middle += s.totals[p * dk + c];
        s.between[(b * ChunkScratch::kBlocks + bj) * dk + c] = middle;
      }
    }
  }
  Exponentiate(d, s.before, blocks * dk);
  Exponentiate(d, s.after, blocks * dk);
  for (int64_t b = 1; b < blocks; ++b) Exponentiate(d, s.between + b * ChunkScratch::kBlocks * dk, b * dk);
  Exponentiate(d, s.prefix, n * dk);
  Exponentiate(d, s.suffix, n * dk);
}

// The q and k rows scaled by the decays (exp(G_i) = exp(before) · exp(L_i), exp(G_last − G_j) = exp(R_j) · exp(after):
// two factors ≤ 1 instead of the exponential of a sum), and the Gram products' keys, transposed.
void DecayedRows(D d, const ChunkArgs& args, const ChunkScratch& s) {
  const int64_t n = args.n, dk = args.dk, stride = args.qk_stride, lanes = hn::Lanes(d);
  float* k_check = s.w;  // [n, dk] W's rows are free until Nu
  for (int64_t i = 0; i < kPrefetchRowsAhead; ++i) {
    PrefetchRow(args.q, stride, i, n, dk);
    PrefetchRow(args.k, stride, i, n, dk);
  }
  for (int64_t i = 0; i < n; ++i) {
    PrefetchRow(args.q, stride, i + kPrefetchRowsAhead, n, dk);
    PrefetchRow(args.k, stride, i + kPrefetchRowsAhead, n, dk);
    PrefetchRow(args.v, args.v_stride, i, n, args.dv);  // for Nu, after the Gram products
    const int64_t b = i / kSubBlock;
    const float* q = args.q + i * stride;
    const float* k = args.k + i * stride;
    const float* exp_prefix = s.prefix + i * dk;
    Multiply(d, q, exp_prefix, dk, s.q_hat + i * dk);
    Multiply(d, k, exp_prefix, dk, s.k_hat + i * dk);
    Multiply(d, s.q_hat + i * dk, s.before + b * dk, dk, s.q_gamma + i * dk);
    Multiply(d, s.k_hat + i * dk, s.before + b * dk, dk, s.k_gamma + i * dk);
    Multiply(d, k, s.suffix + i * dk, dk, s.k_suffix + i * dk);
    Multiply(d, s.k_suffix + i * dk, s.after + b * dk, dk, s.k_last + i * dk);
    for (int64_t c = 0; c < dk; c += lanes) {  // k ⊙ exp(−L) = k / exp(L), exp(L) ≥ e^−80
      const auto mask = hn::FirstN(d, static_cast<size_t>(dk - c));
      const auto quotient = hn::Div(hn::MaskedLoad(mask, d, k + c), hn::MaskedLoad(mask, d, exp_prefix + c));
      hn::BlendedStore(hn::IfThenElseZero(mask, quotient), mask, d, k_check + i * dk + c);
    }
  }
  glint::HWY_NAMESPACE::TransposeFloats(k_check, dk, n, dk, s.k_check_t, n);
  glint::HWY_NAMESPACE::TransposeFloats(s.k_suffix, dk, n, dk, s.k_suffix_t, n);
}

// Decayed Gram matrices, a query block at a time: for rows i of block bi and keys j ≤ the block's end,
//   scores[i, j] = Σ_c q_i k_j exp(G_i − G_j),   lower[i, j] = β_i Σ_c k_i k_j exp(G_i − G_j)   (j < i)
// with exp(G_i − G_j) = exp(L_i) · exp(−L_j) in the block and exp(L_i) · exp(between) · exp(R_j) across blocks.
void DecayedGram(D d, const ChunkArgs& args, int64_t blocks, const ChunkScratch& s) {
  const int64_t n = args.n, dk = args.dk, lanes = hn::Lanes(d);
  std::fill(s.lower, s.lower + n * n, 0.0f);
  std::fill(s.scores, s.scores + n * n, 0.0f);
  for (int64_t bi = 0; bi < blocks; ++bi) {
    const int64_t i_begin = bi * kSubBlock, i_end = std::min(n, i_begin + kSubBlock);
    for (int64_t c = 0; c < dk; ++c) {
      float* keys = s.keys_t + c * n;
      for (int64_t bj = 0; bj < bi; ++bj) {
        const auto scale = hn::Set(d, s.between[(bi * ChunkScratch::kBlocks + bj) * dk + c]);
        for (int64_t j = bj * kSubBlock; j < (bj + 1) * kSubBlock; j += lanes) {
          const auto mask = hn::FirstN(d, static_cast<size_t>((bj + 1) * kSubBlock - j));
          hn::BlendedStore(hn::Mul(scale, hn::MaskedLoad(mask, d, s.k_suffix_t + c * n + j)), mask, d, keys + j);
        }
      }
      std::copy(s.k_check_t + c * n + i_begin, s.k_check_t + c * n + i_end, keys + i_begin);
    }
    MatMulArgs gram{
        {s.q_hat + i_begin * dk, dk, 1}, s.keys_t, n, s.scores + i_begin * n, n, i_end - i_begin, i_end, dk};
    MatMul(d, gram);
    gram.a.a = s.k_hat + i_begin * dk, gram.c = s.lower + i_begin * n;
    MatMul(d, gram);
    for (int64_t i = i_begin; i < i_end; ++i) {
      const float beta_i = args.beta[i * args.beta_stride];
      for (int64_t j = 0; j < i; ++j) s.lower[i * n + j] *= beta_i;
      std::fill(s.lower + i * n + i, s.lower + i * n + i_end, 0.0f);
      std::fill(s.scores + i * n + i + 1, s.scores + i * n + i_end, 0.0f);
    }
  }
}

// Row i of A = (I + L)^-1 by forward substitution, for the columns [c0, c0 + NV vectors):
//   A[i, j] = δ_ij − Σ_{m < i} L[i, m] A[m, j]
// Rows m < c0 are zero there (A is lower triangular), so the sum starts at c0. Row i is held in registers across
// the sum (two sets of accumulators, m even and odd, to hide the FMA latency) instead of being loaded and stored at
// every m.
template <int NV>
HWY_INLINE void SubstituteRow(D d, int64_t n, int64_t i, int64_t c0, const float* lower, float* inverse) {
  const int64_t lanes = hn::Lanes(d);
  using V = hn::Vec<D>;
  hn::Mask<D> mask[NV];
  V even[NV], odd[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    mask[v] = hn::FirstN(d, static_cast<size_t>(std::clamp<int64_t>(n - c0 - v * lanes, 0, lanes)));
    even[v] = hn::Zero(d), odd[v] = hn::Zero(d);
  }
  const float* l = lower + i * n;
  int64_t m = c0;
  for (; m + 1 < i; m += 2) {
    const V l_even = hn::Set(d, l[m]), l_odd = hn::Set(d, l[m + 1]);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      even[v] = hn::NegMulAdd(l_even, hn::MaskedLoad(mask[v], d, inverse + m * n + c0 + v * lanes), even[v]);
      odd[v] = hn::NegMulAdd(l_odd, hn::MaskedLoad(mask[v], d, inverse + (m + 1) * n + c0 + v * lanes), odd[v]);
    }
  }
  if (m < i) {
    const V l_even = hn::Set(d, l[m]);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      even[v] = hn::NegMulAdd(l_even, hn::MaskedLoad(mask[v], d, inverse + m * n + c0 + v * lanes), even[v]);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) hn::BlendedStore(hn::Add(even[v], odd[v]), mask[v], d, inverse + i * n + c0 + v * lanes);
}

// A = (I + L)^-1 (columns past i of row i come out 0: rows m < i are zero there), then A diag(β).
void InvertUnitLower(D d, const ChunkArgs& args, const ChunkScratch& s) {
  const int64_t n = args.n, step = kTileVectors * static_cast<int64_t>(hn::Lanes(d));
  std::fill(s.inverse, s.inverse + n * n, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c0 = 0; c0 <= i; c0 += step) SubstituteRow<kTileVectors>(d, n, i, c0, s.lower, s.inverse);
    s.inverse[i * n + i] = 1.0f;
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) s.inverse[i * n + j] *= args.beta[j * args.beta_stride];
  }
}

// U = A (β ⊙ V), W = A (β ⊙ K ⊙ Γ), ν = U − W S0.
void Nu(D d, const float* state, const ChunkArgs& args, const ChunkScratch& s) {
  const int64_t n = args.n, dk = args.dk, dv = args.dv;
  const MatrixA a_beta{s.inverse, n, 1};
  MatMul(d, {a_beta, args.v, args.v_stride, s.nu, dv, n, dv, n, true});
  MatMul(d, {a_beta, s.k_gamma, dk, s.w, dk, n, dk, n, true});
  MatMul(d, {{s.w, dk, 1}, state, dv, s.nu, dv, n, dv, dk, false, Accumulate::kSubtract});
}

// o_i = S0ᵀ (q_i ⊙ Γ_i) + Σ_{j ≤ i} Aqk[i, j] ν_j
void ChunkOutput(D d, const float* state, const ChunkArgs& args, const ChunkScratch& s) {
  const int64_t n = args.n, dk = args.dk, dv = args.dv;
  MatMul(d, {{s.q_gamma, dk, 1}, state, dv, args.o, args.o_stride, n, dv, dk});
  MatMul(d, {{s.scores, n, 1}, s.nu, dv, args.o, args.o_stride, n, dv, n, true, Accumulate::kAdd});
}

// S_n = Diag(Γ_last) S0 + Σ_j (k_j ⊙ exp(G_last − G_j)) ν_jᵀ = Diag(Γ_last) S0 + K_lastᵀ ν.
void UpdateState(D d, float* state, const ChunkArgs& args, int64_t blocks, const ChunkScratch& s) {
  const int64_t n = args.n, dk = args.dk, dv = args.dv;
  for (int64_t key = 0; key < dk; ++key) {
    float total = 0;
    for (int64_t p = 0; p < blocks; ++p) total += s.totals[p * dk + key];
    const float decay = hn::GetLane(hn::Exp(d, hn::Set(d, total)));
    float* row = state + key * dv;
    for (int64_t j = 0; j < dv; ++j) row[j] *= decay;
  }
  MatMul(d, {{s.k_last, 1, dk}, s.nu, dv, state, dv, dk, dv, n, false, Accumulate::kAdd});
}

void Chunk(float* state, const ChunkArgs& args, float* scratch) {
  const D d;
  const int64_t blocks = (args.n + kSubBlock - 1) / kSubBlock;
  const ChunkScratch s(scratch, args.n, args.dk, args.dv);
  DecaySums(d, args, blocks, s);
  DecayedRows(d, args, s);
  DecayedGram(d, args, blocks, s);
  InvertUnitLower(d, args, s);
  Nu(d, state, args, s);
  ChunkOutput(d, state, args, s);
  UpdateState(d, state, args, blocks, s);
}

}  // namespace HWY_NAMESPACE
}  // namespace glint::kda
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glint::kda {
int64_t ChunkScratchFloats(int64_t dk, int64_t dv) {
  const int64_t n = kChunkTokens, blocks = n / kSubBlock;
  // ChunkScratch: prefix, suffix, q̂, k̂, qΓ, kΓ, k_last, k_suffix, W [n, dk]; ǩᵀ, k_suffixᵀ, keysᵀ [dk, n]; totals,
  // before, after [blocks, dk]; between [blocks, blocks, dk]; L, A, Aqk [n, n]; U (→ ν) [n, dv]
  return 12 * n * dk + 3 * blocks * dk + blocks * blocks * dk + 3 * n * n + n * dv;
}
HWY_EXPORT(DecodeStep);
HWY_EXPORT(Chunk);

void DecodeStep(float* state, const float* q, const float* k, const float* v, const float* g, float beta, int64_t dk,
                int64_t dv, float* o) {
  HWY_DYNAMIC_DISPATCH(DecodeStep)(state, q, k, v, g, beta, dk, dv, o);
}
void Chunk(float* state, const ChunkArgs& args, float* scratch) { HWY_DYNAMIC_DISPATCH(Chunk)(state, args, scratch); }
}  // namespace glint::kda
#endif  // HWY_ONCE
