// Scalar reference kernels: the specification every fast kernel is tested against. Plain loops, fp32 inputs
// and outputs; reductions accumulate in double where a long sum would otherwise dominate the error budget of
// the golden comparison (D-length dots, 4·D RMS), so the reference stays ~1e-7 relative to float64 math.
// Row-major throughout; a weight W is [out, in] and y = W x.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

namespace glint::ref {

// y[t, o] = Σ_i W[o, i] · x[t, i] for t < tokens.   x: [tokens, in]   W: [out, in]   y: [tokens, out]
void Linear(const float* x, int64_t tokens, const float* weight, int64_t out, int64_t in, float* y);

// y = x / sqrt(mean(x²) + eps) · weight (weight may be null for an unweighted norm). x, y: [n]; may alias.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y);

// LayerNorm with bias: y = (x − mean) / sqrt(var + eps) · weight + bias (biased variance, as torch).
void LayerNorm(const float* x, const float* weight, const float* bias, int64_t n, float eps, float* y);

// In-place softmax over n values; computed with the max subtracted, sum in double.
void Softmax(float* values, int64_t n);

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float Silu(float x) { return x * Sigmoid(x); }

// Σ a[i]·b[i] accumulated in double.
double Dot(const float* a, const float* b, int64_t n);

// The KDA delta rule for one head, token by token, in double (model-glm53.md §5.1): the specification of
// kernels/kda_ops.h. state [dk, dv] (double); per token t: q, k, g rows of stride qk_stride, v, o rows of stride
// v_stride, beta[t · beta_stride].
//   S ← Diag(exp(g_t)) S;  u = Sᵀ k_t;  S ← S + k_t ⊗ β_t (v_t − u);  o_t = Sᵀ q_t
void KdaRecurrent(double* state, const float* q, const float* k, const float* v, const float* g, int64_t qk_stride,
                  int64_t v_stride, const float* beta, int64_t beta_stride, int64_t tokens, int64_t dk, int64_t dv,
                  double* o);

// Absorbed MLA over selected latent rows for one query (model-glm53.md §6), in double: the specification of
// kernels/mla_ops.h. q_latent [heads, rank]; rows[i] → the latent of the i-th selected position [rank];
// out [heads, rank] = Σ_i softmax_i(scale · q_latent_h · row_i) · row_i.
void LatentAttention(const float* q_latent, int64_t heads, int64_t rank, const float* const* rows, int64_t count,
                     double scale, double* out);

// LatentAttention as mla::AttendBf16 rounds it: q̃ and the rows rounded to bf16 (nearest even), the scores and
// softmax in double over those values, each probability rounded to bf16 (through fp32), the output in double.
// probabilities [heads, count]: the unrounded softmax, for tests that bound where a rounding may fall the other way;
// may be null.
void LatentAttentionBf16(const float* q_latent, int64_t heads, int64_t rank, const float* const* rows, int64_t count,
                         double scale, double* out, double* probabilities);

// KPool indexer scores (model-glm53.md §7.3), in double: scores[m] = Σ_h w_h · relu(scale · query_h · pooled_m).
// query [heads, dim], head_weights [heads], pooled [pools, dim].
void IndexerScores(const float* query, const float* head_weights, const float* pooled, int64_t pools, int64_t heads,
                   int64_t dim, double scale, double* scores);

}  // namespace glint::ref
