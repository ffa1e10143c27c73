// Vectorised fp32 building blocks of the fast path (dots, norms, activations, the mHC read/write), written once
// with Google Highway and dispatched at run time to AVX-512, AVX2 or scalar code. Each function's specification
// is the double-precision loop of the same name in kernels/reference.h; vector_ops_test checks every compiled
// target against it with a bound derived from fp32 accumulation.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

namespace glint::vec {

float Dot(const float* a, const float* b, int64_t n);
float SumSquares(const float* x, int64_t n);
// out[r] = Σ_i rows[r · stride + i] · x[i] for r < count (one x against several rows: x stays in registers/L1).
void DotRows(const float* rows, int64_t count, int64_t stride, const float* x, int64_t n, float* out);
// out[t · out_stride + r] = DotRows(rows, count, stride, x + t · x_stride, n)[r] for t < tokens, bit for bit (each
// sum runs in the same order): tiles of 4 rows × 4 tokens share each load, so rows that do not fit in cache (mHC's
// 24 × 16,384 mixing weights, 1.5 MB) are read once per 4 tokens instead of once per token.
void DotRowsTokens(const float* rows, int64_t count, int64_t stride, const float* x, int64_t x_stride, int64_t tokens,
                   int64_t n, float* out, int64_t out_stride);
// y = x · (mean(x²) + eps)^-1/2 · weight; weight may be null; x and y may alias.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y);
// out = silu(min(gate, limit)) · clamp(up, −limit, limit): the clamped SwiGLU of model-glm53.md §8.1.
void SwiGlu(const float* gate, const float* up, int64_t n, float limit, float* out);
// y = 1 / (1 + exp(−x)); x and y may alias.
void Sigmoid(const float* x, int64_t n, float* y);
// y = x · sigmoid(x); x and y may alias.
void Silu(const float* x, int64_t n, float* y);
// The numerators of softmax(scale · x), in place, and their sum: x[i] ← exp(scale · x[i] − scale · max_j x[j]) (one
// fused multiply-subtract, then exp), returning Σ_i x[i] (fp32 in four vector accumulators). n ≥ 1, scale > 0.
float SoftmaxNumerators(float* x, int64_t n, float scale);
// y += a · x.
void Axpy(float a, const float* x, int64_t n, float* y);
// y = a · x.
void Scale(float a, const float* x, int64_t n, float* y);
// mHC read (§4.2): h[d] = Σ_s pre[s] · streams[s · n + d].   streams: [hc, n], h: [n]
void MhcRead(const float* streams, const float* pre, int64_t hc, int64_t n, float* h);
// mHC write (§4.3), in place: streams[k] ← post[k] · y + Σ_j comb[j · hc + k] · streams[j]. hc ≤ 8.
void MhcWrite(const float* post, const float* comb, const float* y, int64_t hc, int64_t n, float* streams);

// KDA's short convolution (model-glm53.md §5.1), in place over `count` rows of `width` channels: causal, depthwise,
// `kernel` taps, then SiLU. With u the K − 1 inputs of `window` [width, K − 1] (oldest first) followed by the rows
// x_t = x + t · stride:  x_t[c] ← silu(y),  y = Σ_{i<K} taps[c · K + i] · u_{t+i}[c]  (tap K − 1 on the current
// row), summed as fused multiply-adds in tap order from taps[c · K]'s product — the same chain for every row and
// channel whatever `count` and `width`, so a sequence gives the same bits fed in one call or several. `window`
// ends holding the last K − 1 inputs, and each (r, to) of `copies` (0 ≤ r ≤ count) gets in `to` [width, K − 1] the
// window as it is after the first r rows. 1 ≤ kernel ≤ kMaxConvKernel (the bound io/config.cc puts on
// short_conv_kernel_size).
inline constexpr int64_t kMaxConvKernel = 64;
void ShortConvSilu(const float* taps, int64_t width, int64_t kernel, float* window, float* x, int64_t stride,
                   int64_t count, std::span<const std::pair<int64_t, float*>> copies);

}  // namespace glint::vec
