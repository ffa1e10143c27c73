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

}  // namespace glint::ref
