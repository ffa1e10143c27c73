// FastContext, the mHC sites and the FFN sublayers of the fast path (fast_layers.h).
#include "fast/fast_layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/timer.h"
#include "kernels/linear.h"
#include "kernels/vector_ops.h"
#include "model/mhc.h"

namespace glint {

FastContext::FastContext(WorkerPool& pool, Isa isa, const ModelConfig& config)
    : pool(pool),
      i8(GetInt8Kernels(isa)),
      i4(GetInt4Kernels(isa)),
      bf16(GetBf16Kernels(isa)),
      config(config),
      isa(isa),
      worker_activations_(pool.size()),
      worker_floats_(pool.size()) {}

void PassBuffer::Grow(int64_t count) {
  // At least double, as std::vector does: an MoE wave's rows differ from layer to layer, and growing to each new
  // maximum exactly re-allocated, zeroed and copied tens of MB several times a pass (2 % of a 512-token prefill).
  count = std::max(count, 2 * count_);
  AlignedBuffer grown(static_cast<size_t>(count) * sizeof(float));
  if (count_ > 0) std::memcpy(grown.data(), values_.data(), static_cast<size_t>(count_) * sizeof(float));
  values_ = std::move(grown);
  count_ = count;
}

float* FastContext::WorkerFloats(int worker, int64_t count) { return worker_floats_[worker].Floats(count); }

ActivationScratch& FastContext::ExpertActivations(int64_t index) {
  while (static_cast<int64_t>(expert_activations_.size()) <= index) {
    expert_activations_.push_back(std::make_unique<ActivationScratch>());
  }
  return *expert_activations_[index];
}

void FastContext::Linear(const PackedLinear& w, const float* x, int64_t x_stride, int64_t tokens, float* y,
                         int64_t y_stride) {
  weight_bytes_read += w.bytes();
  GLINT_CHECK(w.format != PackedLinear::Format::kNone) << "a product with unbound weights";
  if (w.format == PackedLinear::Format::kBf16) {
    const ScopedPart part(profile, PassPart::kBf16Products);
    LinearBf16(pool, bf16, w.bf16, x, x_stride, tokens, y, y_stride);
    return;
  }
  // The int8 and int4 products: activations quantized per the weights' grouping, then the integer gemm (timed
  // alone: the quantization is its own part).
  QuantizedActivations q;
  {
    const ScopedPart part(profile, PassPart::kActivationQuant);
    q = QuantizeActivationsParallel(pool, i8, w.ActivationGrouping(), x, x_stride, tokens, activations_);
  }
  const ScopedPart part(profile, PassPart::kInt8Products);
  Stopwatch watch;
  if (w.format == PackedLinear::Format::kInt8) {
    LinearI8Quantized(pool, i8, w.int8, q, y, y_stride);
  } else {
    LinearI4Quantized(pool, i4, w.int4, q, y, y_stride);
  }
  dense_products.Add(w.rows() * w.cols() * tokens, w.bytes(), watch.Seconds());
}

void FastContext::IntegerGemm(const PackedLinear& w, const QuantizedActivations& x, int64_t block_begin,
                              int64_t block_end, float* y, int64_t y_stride) const {
  if (w.format == PackedLinear::Format::kInt4) {
    i4.gemm(w.int4, x, block_begin, block_end, y, y_stride);
  } else {
    GLINT_CHECK(w.format == PackedLinear::Format::kInt8) << "an integer product needs int8 or int4 weights";
    i8.gemm(w.int8, x, block_begin, block_end, y, y_stride);
  }
}

void FastContext::LinearPerHead(const PackedLinear& w, int64_t heads, const float* x, int64_t x_stride,
                                int64_t x_head_offset, int64_t tokens, float* y, int64_t y_stride) {
  GLINT_CHECK(w.format == PackedLinear::Format::kInt8) << "per-head products are int8";
  weight_bytes_read += w.bytes();
  const int64_t blocks_per_head = w.int8.layout.row_blocks() / heads;
  // The head's input is only its cols: quantize that slice with the matrix's grouping.
  Int8Layout head_input = w.int8.layout;
  Stopwatch watch;
  const ScopedPart part(profile, PassPart::kInt8Products);  // each head's quantization included (one task each)
  pool.Run(heads, [&](int64_t h, int worker) {
    const QuantizedActivations q =
        QuantizeActivations(i8, head_input, x + h * x_head_offset, x_stride, tokens, worker_activations_[worker]);
    i8.gemm(w.int8, q, h * blocks_per_head, (h + 1) * blocks_per_head, y, y_stride);
  });
  dense_products.Add(w.rows() * w.cols() * tokens, w.bytes(), watch.Seconds());
}

// ---- mHC ----

void FastMhcRead(FastContext& ctx, const FastMhcWeights& w, const float* norm, const float* streams, int64_t n,
                 float* h, MhcTokenCoefficients* coefficients) {
  const ScopedPart part(ctx.profile, PassPart::kMhc);
  const ModelConfig& c = ctx.config;
  const int64_t hc = c.hc_mult, d = c.hidden_size, flat = hc * d, mix_rows = (2 + hc) * hc;
  ctx.weight_bytes_read += mix_rows * flat * sizeof(float);  // fn, read for every token but cached after the first
  // fn (mix_rows × flat fp32, 1.5 MB at the model's widths) does not stay in L2: tasks of kMhcTokens rows read it
  // once for all of them (DotRowsTokens, the same sums bit for bit as a row at a time).
  constexpr int64_t kMhcTokens = 4, kMaxMixRows = 80;
  ctx.pool.Run((n + kMhcTokens - 1) / kMhcTokens, [&](int64_t task, int) {
    const int64_t t0 = task * kMhcTokens, count = std::min(kMhcTokens, n - t0);
    float dots[kMhcTokens][kMaxMixRows];
    vec::DotRowsTokens(w.fn, mix_rows, flat, streams + t0 * flat, flat, count, flat, &dots[0][0], kMaxMixRows);
    for (int64_t t = t0; t < t0 + count; ++t) {
      const float* x = streams + t * flat;
      // r = (mean(xf²) + rms_norm_eps)^-1/2 (pitfall 5); mix = (fn · xf) · r.
      const double inverse_rms = 1.0 / std::sqrt(static_cast<double>(vec::SumSquares(x, flat)) / flat + c.rms_norm_eps);
      double mix[kMaxMixRows];
      for (int64_t i = 0; i < mix_rows; ++i) mix[i] = dots[t - t0][i] * inverse_rms;
      const MhcCoefficients coefficients_t = MhcCoefficientsFromMix(mix, w.base, w.scale, c);
      MhcTokenCoefficients& out = coefficients[t];
      std::copy(coefficients_t.pre.begin(), coefficients_t.pre.end(), out.pre);
      std::copy(coefficients_t.post.begin(), coefficients_t.post.end(), out.post);
      std::copy(coefficients_t.comb.begin(), coefficients_t.comb.end(), out.comb);
      // Read and RMSNorm fused per token: the collapsed row is normalised while it is still in L1.
      vec::MhcRead(x, out.pre, hc, d, h + t * d);
      vec::RmsNorm(h + t * d, norm, d, c.rms_norm_eps, h + t * d);
    }
  });
}

void FastMhcWrite(FastContext& ctx, const MhcTokenCoefficients* coefficients, const float* y, int64_t n,
                  float* streams) {
  const ScopedPart part(ctx.profile, PassPart::kMhc);
  const int64_t hc = ctx.config.hc_mult, d = ctx.config.hidden_size;
  ctx.pool.Run(n, [&](int64_t t, int) {
    vec::MhcWrite(coefficients[t].post, coefficients[t].comb, y + t * d, hc, d, streams + t * hc * d);
  });
}

// ---- FFN ----

void FastMlp(FastContext& ctx, const FastMlpWeights& w, const float* h, int64_t n, float* out) {
  const int64_t d = ctx.config.hidden_size, width = w.down.cols();
  float* gate_up = ctx.act.mlp.gate_up.Floats(n * 2 * width);  // [n, 2·width]: gate, then up
  float* act = ctx.act.mlp.act.Floats(n * width);              // [n, width]
  ctx.Linear(w.gate_up, h, d, n, gate_up, 2 * width);
  const PassPart previous = ctx.profile.Enter(PassPart::kSwiGlu);
  ctx.pool.Run(n, [&](int64_t t, int) {
    vec::SwiGlu(gate_up + t * 2 * width, gate_up + t * 2 * width + width, width, ctx.config.swiglu_limit,
                act + t * width);
  });
  ctx.profile.Leave(previous);
  ctx.Linear(w.down, act, width, n, out, d);
}

}  // namespace glint
