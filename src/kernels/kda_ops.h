// KDA delta-rule kernels for one head (model-glm53.md §5, docs/model-kda.md): the fused single-token decode step
// and the chunked (WY) prefill of up to 64 tokens, fp32, Highway-dispatched. The specification of both is the
// recurrent rule in double (ref::KdaRecurrent in kernels/reference.h); kda_ops_test sweeps them against it.
//
// Notation: S [dk, dv] row-major (key × value), α_t = exp(g_t) per key channel (g ≤ 0),
//   S ← Diag(α_t) S;  u = Sᵀ k_t;  S ← S + k_t ⊗ β_t (v_t − u);  o_t = Sᵀ q_t
#pragma once

#include <cstdint>

namespace glint::kda {

inline constexpr int64_t kChunkTokens = 64;  // HF / FLA chunk size
inline constexpr int64_t kSubBlock = 16;     // see Chunk: the largest in-block exponent stays below fp32's range

// One token. Reads S twice and writes it once: u and Sᵀq are taken from the decayed S without storing it
// (S' = Diag(α) S + k δᵀ gives S'ᵀ q = (Diag(α) S)ᵀ q + (k·q) δ with δ = β (v − u)), then S ← Diag(α) S + k δᵀ.
//   state [dk, dv]; q, k, g [dk]; v, o [dv]
void DecodeStep(float* state, const float* q, const float* k, const float* v, const float* g, float beta, int64_t dk,
                int64_t dv, float* o);

// n ≤ 64 tokens in WY form (the §5.2 equations, docs/model-kda.md (6a)–(6e)), state carried in and out, as
// register-tiled matrix products (the Gram matrices, U, W, W S0, Qγ S0, Aqk ν, Kᵀν) around a forward substitution.
// Exponentials exp(G_i − G_j) of the in-chunk cumulative decay are never formed from G itself (|G| reaches 320 and
// exp(±320) overflows fp32): within a 16-token sub-block they factor as exp(L_i)·exp(−L_j) with |L| ≤ 80, and across
// sub-blocks as exp(L_i)·exp(M + R_j) with both exponents ≤ 0 (L: in-block prefix sum, R: in-block suffix sum,
// M: whole blocks between), which also keeps each difference accurate instead of a difference of two large sums.
struct ChunkArgs {
  const float* q = nullptr;  // [n] rows of qk_stride, dk values (L2-normed, q scaled)
  const float* k = nullptr;
  int64_t qk_stride = 0;
  const float* v = nullptr;  // [n] rows of v_stride, dv values
  int64_t v_stride = 0;
  const float* g = nullptr;  // [n] rows of g_stride, dk log-decays (≤ 0)
  int64_t g_stride = 0;
  const float* beta = nullptr;  // [n] values of beta_stride
  int64_t beta_stride = 0;
  float* o = nullptr;  // [n] rows of o_stride, dv outputs
  int64_t o_stride = 0;
  int64_t n = 0, dk = 0, dv = 0;
};
// scratch: ChunkScratchFloats(dk, dv) floats.
void Chunk(float* state, const ChunkArgs& args, float* scratch);
int64_t ChunkScratchFloats(int64_t dk, int64_t dv);

}  // namespace glint::kda
