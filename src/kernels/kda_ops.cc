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

// out = x ⊙ exp(e) (or exp(−e) when negate), n values.
HWY_INLINE void MulExp(D d, const float* x, const float* e, bool negate, int64_t n, float* out) {
  const int64_t lanes = hn::Lanes(d);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    auto exponent = hn::MaskedLoad(mask, d, e + i);
    if (negate) exponent = hn::Neg(exponent);
    hn::BlendedStore(hn::Mul(hn::MaskedLoad(mask, d, x + i), hn::Exp(d, exponent)), mask, d, out + i);
  }
}

void DecodeStep(float* state, const float* q, const float* k, const float* v, const float* g, float beta, int64_t dk,
                int64_t dv, float* o) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  constexpr int64_t kMaxKey = 256;
  float alpha[kMaxKey], decayed_k[kMaxKey], decayed_q[kMaxKey];  // dk ≤ 256, checked by the caller's config
  MulExp(d, k, g, false, dk, decayed_k);
  MulExp(d, q, g, false, dk, decayed_q);
  for (int64_t i = 0; i < dk; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(dk - i));
    hn::BlendedStore(hn::Exp(d, hn::MaskedLoad(mask, d, g + i)), mask, d, alpha + i);
  }
  // Pass 1 (read only): u = (Diag(α) S)ᵀ k and p = (Diag(α) S)ᵀ q, over the value dim.
  std::fill(o, o + dv, 0.0f);
  float u[kMaxKey];
  std::fill(u, u + dv, 0.0f);
  for (int64_t key = 0; key < dk; ++key) {
    const float* row = state + key * dv;
    Axpy(d, decayed_k[key], row, u, dv);
    Axpy(d, decayed_q[key], row, o, dv);
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

// The chunk's scratch (ChunkScratchFloats), named. n rows of the chunk, sub-blocks of kSubBlock rows.
struct ChunkScratch {
  ChunkScratch(float* scratch, int64_t n, int64_t dk, int64_t dv)
      : prefix(scratch),
        suffix(prefix + n * dk),
        totals(suffix + n * dk),
        q_hat(totals + (kChunkTokens / kSubBlock) * dk),
        k_hat(q_hat + n * dk),
        k_check(k_hat + n * dk),
        k_cross(k_check + n * dk),
        k_gamma(k_cross + n * dk),
        k_last(k_gamma + n * dk),
        q_gamma(k_last + n * dk),
        lower(q_gamma + n * dk),
        inverse(lower + n * n),
        scores(inverse + n * n),
        nu(scores + n * n),
        w(nu + n * dv),
        exponent(w + n * dk) {}
  float* prefix;    // [n, dk]  L_i: in-block inclusive prefix sum of g
  float* suffix;    // [n, dk]  R_j: in-block exclusive suffix sum of g
  float* totals;    // [blocks, dk]
  float* q_hat;     // [n, dk] q ⊙ exp(L)
  float* k_hat;     // [n, dk] k ⊙ exp(L)
  float* k_check;   // [n, dk] k ⊙ exp(−L)
  float* k_cross;   // [n, dk] k ⊙ exp(M + R), rebuilt per query block
  float* k_gamma;   // [n, dk] k ⊙ Γ = k ⊙ exp(G)
  float* k_last;    // [n, dk] k ⊙ exp(G_last − G)
  float* q_gamma;   // [n, dk] q ⊙ Γ
  float* lower;     // [n, n] L[i, j] = β_i (k_i·k_j)_decayed, j < i
  float* inverse;   // [n, n] A = (I + L)^-1
  float* scores;    // [n, n] Aqk, j ≤ i
  float* nu;        // [n, dv] U, then ν
  float* w;         // [n, dk] W
  float* exponent;  // [dk] one row of exponents
};

// In-block prefix / suffix sums and block totals of g.
void BlockSums(const ChunkArgs& args, int64_t blocks, const ChunkScratch& s) {
  const int64_t n = args.n, dk = args.dk;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kSubBlock, end = std::min(n, begin + kSubBlock);
    for (int64_t c = 0; c < dk; ++c) {
      float run = 0;
      for (int64_t i = begin; i < end; ++i) s.prefix[i * dk + c] = (run += args.g[i * args.g_stride + c]);
      s.totals[b * dk + c] = run;
      run = 0;
      for (int64_t i = end - 1; i >= begin; --i) {
        s.suffix[i * dk + c] = run;
        run += args.g[i * args.g_stride + c];
      }
    }
  }
}

// Γ_i = exp(G_i), G_i = Σ_{blocks before} totals + L_i; G_last − G_j = R_j + Σ_{blocks after j's} totals; and the
// q, k rows scaled by them.
void DecayedRows(D d, const ChunkArgs& args, int64_t blocks, const ChunkScratch& s) {
  const int64_t dk = args.dk, stride = args.qk_stride;
  for (int64_t i = 0; i < args.n; ++i) {
    const int64_t b = i / kSubBlock;
    for (int64_t c = 0; c < dk; ++c) {
      float before = 0, after = 0;
      for (int64_t p = 0; p < b; ++p) before += s.totals[p * dk + c];
      for (int64_t p = b + 1; p < blocks; ++p) after += s.totals[p * dk + c];
      s.exponent[c] = before + s.prefix[i * dk + c];
      s.k_last[i * dk + c] = s.suffix[i * dk + c] + after;  // exponent for now, multiplied by k below
    }
    const float* q = args.q + i * stride;
    const float* k = args.k + i * stride;
    MulExp(d, q, s.exponent, false, dk, s.q_gamma + i * dk);
    MulExp(d, k, s.exponent, false, dk, s.k_gamma + i * dk);
    MulExp(d, k, s.k_last + i * dk, false, dk, s.k_last + i * dk);
    MulExp(d, q, s.prefix + i * dk, false, dk, s.q_hat + i * dk);
    MulExp(d, k, s.prefix + i * dk, false, dk, s.k_hat + i * dk);
    MulExp(d, k, s.prefix + i * dk, true, dk, s.k_check + i * dk);
  }
}

// Decayed Gram matrices (L and Aqk's scores), block pair by block pair.
void DecayedGram(D d, const ChunkArgs& args, int64_t blocks, const ChunkScratch& s) {
  const int64_t n = args.n, dk = args.dk;
  std::fill(s.lower, s.lower + n * n, 0.0f);
  std::fill(s.scores, s.scores + n * n, 0.0f);
  for (int64_t bi = 0; bi < blocks; ++bi) {
    const int64_t i_begin = bi * kSubBlock, i_end = std::min(n, i_begin + kSubBlock);
    // k̃_j = k_j ⊙ exp(M(bj, bi) + R_j) for every earlier block bj.
    for (int64_t bj = 0; bj < bi; ++bj) {
      for (int64_t j = bj * kSubBlock; j < (bj + 1) * kSubBlock; ++j) {
        for (int64_t c = 0; c < dk; ++c) {
          float middle = 0;
          for (int64_t p = bj + 1; p < bi; ++p) middle += s.totals[p * dk + c];
          s.exponent[c] = middle + s.suffix[j * dk + c];
        }
        MulExp(d, args.k + j * args.qk_stride, s.exponent, false, dk, s.k_cross + j * dk);
      }
    }
    for (int64_t i = i_begin; i < i_end; ++i) {
      const float beta_i = args.beta[i * args.beta_stride];
      for (int64_t j = 0; j <= i; ++j) {
        const float* key = j < i_begin ? s.k_cross + j * dk : s.k_check + j * dk;
        s.scores[i * n + j] = Dot(d, s.q_hat + i * dk, key, dk);
        if (j < i) s.lower[i * n + j] = beta_i * Dot(d, s.k_hat + i * dk, key, dk);
      }
    }
  }
}

// A = (I + L)^-1 by forward substitution: A[i, j] = δ_ij − Σ_{j ≤ m < i} L[i, m] A[m, j].
void InvertUnitLower(D d, int64_t n, const ChunkScratch& s) {
  std::fill(s.inverse, s.inverse + n * n, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    s.inverse[i * n + i] = 1.0f;
    for (int64_t m = 0; m < i; ++m) {
      const float l = s.lower[i * n + m];
      if (l != 0.0f) Axpy(d, -l, s.inverse + m * n, s.inverse + i * n, m + 1);  // row i −= L[i,m] · row m (cols ≤ m)
    }
  }
}

// U = A (β ⊙ V), W = A (β ⊙ K ⊙ Γ), ν = U − W S0.
void Nu(D d, const float* state, const ChunkArgs& args, const ChunkScratch& s) {
  const int64_t n = args.n, dk = args.dk, dv = args.dv;
  std::fill(s.nu, s.nu + n * dv, 0.0f);
  std::fill(s.w, s.w + n * dk, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const float a = s.inverse[i * n + j] * args.beta[j * args.beta_stride];
      if (a == 0.0f) continue;
      Axpy(d, a, args.v + j * args.v_stride, s.nu + i * dv, dv);
      Axpy(d, a, s.k_gamma + j * dk, s.w + i * dk, dk);
    }
    for (int64_t key = 0; key < dk; ++key) Axpy(d, -s.w[i * dk + key], state + key * dv, s.nu + i * dv, dv);
  }
}

// o_i = S0ᵀ (q_i ⊙ Γ_i) + Σ_{j ≤ i} Aqk[i, j] ν_j
void ChunkOutput(D d, const float* state, const ChunkArgs& args, const ChunkScratch& s) {
  const int64_t n = args.n, dk = args.dk, dv = args.dv;
  for (int64_t i = 0; i < n; ++i) {
    float* out = args.o + i * args.o_stride;
    std::fill(out, out + dv, 0.0f);
    for (int64_t key = 0; key < dk; ++key) Axpy(d, s.q_gamma[i * dk + key], state + key * dv, out, dv);
    for (int64_t j = 0; j <= i; ++j) Axpy(d, s.scores[i * n + j], s.nu + j * dv, out, dv);
  }
}

// S_n = Diag(Γ_last) S0 + Σ_j (k_j ⊙ exp(G_last − G_j)) ν_jᵀ, row by row in place.
void UpdateState(D d, float* state, const ChunkArgs& args, int64_t blocks, const ChunkScratch& s) {
  const int64_t dk = args.dk, dv = args.dv;
  for (int64_t c = 0; c < dk; ++c) {
    float total = 0;
    for (int64_t p = 0; p < blocks; ++p) total += s.totals[p * dk + c];
    s.exponent[c] = total;
  }
  for (int64_t key = 0; key < dk; ++key) {
    float* row = state + key * dv;
    const float decay = hn::GetLane(hn::Exp(d, hn::Set(d, s.exponent[key])));
    for (int64_t j = 0; j < dv; ++j) row[j] *= decay;
    for (int64_t t = 0; t < args.n; ++t) Axpy(d, s.k_last[t * dk + key], s.nu + t * dv, row, dv);
  }
}

void Chunk(float* state, const ChunkArgs& args, float* scratch) {
  const D d;
  const int64_t blocks = (args.n + kSubBlock - 1) / kSubBlock;
  const ChunkScratch s(scratch, args.n, args.dk, args.dv);
  BlockSums(args, blocks, s);
  DecayedRows(d, args, blocks, s);
  DecayedGram(d, args, blocks, s);
  InvertUnitLower(d, args.n, s);
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
  const int64_t n = kChunkTokens;
  // prefix, suffix [n, dk]; block totals [4, dk]; q̂, k̂ (·exp(L)), ǩ (·exp(−L)), k̃ (cross-block), kΓ, kD [n, dk];
  // q_gamma [n, dk]; L, A, Aqk [n, n]; U (→ ν) [n, dv]; W [n, dk]; one exponent row [dk]
  return 2 * n * dk + (n / kSubBlock) * dk + 7 * n * dk + 3 * n * n + n * dv + n * dk + dk;
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
