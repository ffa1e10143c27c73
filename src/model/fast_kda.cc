// KDA sublayer of the fast path (fast_layers.h), the equations of model/kda.cc (docs/model-kda.md) with int8
// q/k/v/o projections, exact bf16 gate projections and the kernels of kernels/kda_ops.h: the fused decode step for
// a one-token segment, the chunked WY form (chunks of 64 from the segment's first token) otherwise.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "kernels/kda_ops.h"
#include "kernels/vector_ops.h"
#include "model/fast_layers.h"
#include "quant/formats.h"

namespace glint {
namespace {

constexpr float kL2NormEps = 1e-6f;  // HF l2norm eps, inside the sqrt (pitfall 2)

// Causal depthwise conv (kernel K, tap K−1 on the current token) + SiLU over one stream of one segment, in place.
// x: rows [count] of stride `stride`, width channels; taps [width, K]; window [width, K−1] holds the K−1 inputs
// before the segment (oldest first) and is left holding the last K−1 inputs. scratch: (K − 1 + count + K) · width.
// copies: (rows r, window [width, K−1]) to fill with the window as it is after the segment's first r rows.
void ShortConvSilu(const float* taps, int64_t width, int64_t kernel, float* window, float* x, int64_t stride,
                   int64_t count, float* scratch, std::span<const std::pair<int64_t, float*>> copies) {
  const int64_t history = kernel - 1;
  float* raw = scratch;                                  // [K−1 + count, width] history, then the segment's inputs
  float* taps_by_offset = raw + (history + count) * width;  // [K, width] taps transposed: the loops run over channels
  for (int64_t c = 0; c < width; ++c) {
    for (int64_t i = 0; i < kernel; ++i) taps_by_offset[i * width + c] = taps[c * kernel + i];
    for (int64_t i = 0; i < history; ++i) raw[i * width + c] = window[c * history + i];
  }
  for (int64_t t = 0; t < count; ++t) std::memcpy(raw + (history + t) * width, x + t * stride, width * sizeof(float));
  // After r rows the window holds raw rows r .. r + K − 2 (the last K − 1 inputs).
  for (const auto& [rows, copy] : copies) {
    for (int64_t c = 0; c < width; ++c) {
      for (int64_t i = 0; i < history; ++i) copy[c * history + i] = raw[(rows + i) * width + c];
    }
  }
  for (int64_t c = 0; c < width; ++c) {
    for (int64_t i = 0; i < history; ++i) window[c * history + i] = raw[(count + i) * width + c];
  }
  for (int64_t t = 0; t < count; ++t) {
    float* y = x + t * stride;
    std::fill(y, y + width, 0.0f);
    for (int64_t i = 0; i < kernel; ++i) {
      const float* tap = taps_by_offset + i * width;
      const float* in = raw + (t + i) * width;
      for (int64_t c = 0; c < width; ++c) y[c] += tap[c] * in[c];
    }
    vec::Silu(y, width, y);
  }
}

}  // namespace

Status FastKda(FastContext& ctx, const FastKdaWeights& w, const float* h, std::span<const Segment> segments,
               const std::function<KdaStateView(const Segment&)>& state_of, float* out,
               const std::function<KdaStateView(const Segment&, std::byte*)>& copy_view) {
  const ModelConfig& c = ctx.config;
  const int64_t heads = c.kda_num_heads, d = c.kda_head_dim, width = c.KdaWidth(), hidden = c.hidden_size;
  const int64_t kernel = c.kda_conv_kernel;
  if (d > 256) return Unimplemented("the fast KDA kernels support head_dim ≤ 256, got ", d);
  int64_t n = 0;
  for (const Segment& s : segments) {
    n = std::max(n, s.row + s.count);
    if (!s.state_copies.empty() && !copy_view) {
      return InvalidArgument("FastKda: a segment asks for state copies but no destination view was given");
    }
  }
  // The layer's view in each state copy's destination: [segments][copies].
  std::vector<std::vector<KdaStateView>> copies(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    for (const auto& [rows, destination] : segments[i].state_copies) {
      // No destination: a split of the recurrence only (a checkpoint position whose checkpoint the cache has).
      copies[i].push_back(destination != nullptr ? copy_view(segments[i], destination) : KdaStateView{});
    }
  }

  // Projections: [q; k; v] (int8), [f_a; g_a; b] (bf16), then f = f_b(f_a h), z = g_b(g_a h) (bf16).
  float* qkv = ctx.Buffer(kBufKdaQkv, n * 3 * width);         // [n, 3·width]
  float* gates = ctx.Buffer(kBufKdaGates, n * (2 * d + heads));  // [n, 2d + H]
  float* f = ctx.Buffer(kBufKdaF, n * width);                  // [n, width] → log-decay g
  float* z = ctx.Buffer(kBufKdaZ, n * width);                  // [n, width] output gate logits
  float* o = ctx.Buffer(kBufKdaOut, n * width);                // [n, width] attention output
  ctx.Linear(w.qkv, h, hidden, n, qkv, 3 * width);
  ctx.Linear(w.gates_in, h, hidden, n, gates, 2 * d + heads);
  ctx.Linear(w.f_b, gates, 2 * d + heads, n, f, width);
  ctx.Linear(w.g_b, gates + d, 2 * d + heads, n, z, width);

  // (1) short conv + SiLU per segment and stream (sequential in time, independent across streams).
  std::vector<std::pair<size_t, int>> conv_tasks;
  for (size_t s = 0; s < segments.size(); ++s) {
    for (int stream = 0; stream < 3; ++stream) conv_tasks.push_back({s, stream});
  }
  ctx.pool.RunIfWorthIt(static_cast<int64_t>(conv_tasks.size()), 3 * n * width * kernel, kMinParallelElements,
                        [&](int64_t i, int worker) {
    const Segment& s = segments[conv_tasks[i].first];
    const int stream = conv_tasks[i].second;
    const KdaStateView state = state_of(s);
    std::vector<std::pair<int64_t, float*>> window_copies;  // this stream's window in each copy
    for (size_t k = 0; k < s.state_copies.size(); ++k) {
      if (s.state_copies[k].second == nullptr) continue;  // a split only: the conv is per row, nothing to copy
      window_copies.emplace_back(s.state_copies[k].first,
                                 copies[conv_tasks[i].first][k].conv_window + stream * width * (kernel - 1));
    }
    float* scratch = ctx.WorkerFloats(worker, (kernel - 1 + s.count + kernel) * width);
    ShortConvSilu(w.conv[stream], width, kernel, state.conv_window + stream * width * (kernel - 1),
                  qkv + s.row * 3 * width + stream * width, 3 * width, s.count, scratch, window_copies);
  });
  // (2) per-head L2 norms (q also × d^-1/2), (3) g = lb · sigmoid(exp(A_log) (f + dt_bias)), (4) β = sigmoid(b).
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> decay_rate(heads);
  for (int64_t hd = 0; hd < heads; ++hd) decay_rate[hd] = std::exp(w.a_log[hd]);
  float* beta = gates;  // β overwrites the b columns in place (row stride 2d + H, offset 2d)
  ctx.pool.Run(n, [&](int64_t t, int) {
    float* row = qkv + t * 3 * width;
    for (int64_t hd = 0; hd < heads; ++hd) {
      float* q = row + hd * d;
      float* k = row + width + hd * d;
      vec::Scale(q_scale / std::sqrt(vec::SumSquares(q, d) + kL2NormEps), q, d, q);
      vec::Scale(1.0f / std::sqrt(vec::SumSquares(k, d) + kL2NormEps), k, d, k);
    }
    float* g = f + t * width;
    for (int64_t ch = 0; ch < width; ++ch) g[ch] = decay_rate[ch / d] * (g[ch] + w.dt_bias[ch]);
    vec::Sigmoid(g, width, g);
    vec::Scale(c.kda_gate_lower_bound, g, width, g);
    float* b = beta + t * (2 * d + heads) + 2 * d;
    vec::Sigmoid(b, heads, b);
  });
  // (5)/(6) the delta rule per (segment, head).
  const int64_t tasks = static_cast<int64_t>(segments.size()) * heads;
  ctx.pool.Run(tasks, [&](int64_t i, int worker) {
    const Segment& s = segments[i / heads];
    const int64_t hd = i % heads;
    const KdaStateView state = state_of(s);
    // S of this head, fp32 in place, or widened from bf16 storage into scratch and rounded back after the call.
    const bool bf16 = state.storage == KdaStateStorage::kBfloat16;
    float* scratch_all = ctx.WorkerFloats(worker, d * d + kda::ChunkScratchFloats(d, d));
    uint16_t* S_bf16 = static_cast<uint16_t*>(state.recurrent) + hd * d * d;
    float* S = bf16 ? scratch_all : static_cast<float*>(state.recurrent) + hd * d * d;
    if (bf16) {
      for (int64_t i = 0; i < d * d; ++i) S[i] = Bf16ToFloat(S_bf16[i]);
    }
    const float* q = qkv + s.row * 3 * width + hd * d;
    const float* k = q + width;
    const float* v = q + 2 * width;
    const float* g = f + s.row * width + hd * d;
    const float* b = beta + s.row * (2 * d + heads) + 2 * d + hd;
    float* out_rows = o + s.row * width + hd * d;
    float* scratch = scratch_all + d * d;
    // Rows [begin, end) as one call: the fused decode step for one row, chunks of 64 from `begin` otherwise.
    const auto run_rows = [&](int64_t begin, int64_t end) {
      if (end - begin == 1) {
        kda::DecodeStep(S, q + begin * 3 * width, k + begin * 3 * width, v + begin * 3 * width, g + begin * width,
                        b[begin * (2 * d + heads)], d, d, out_rows + begin * width);
        return;
      }
      for (int64_t start = begin; start < end; start += kda::kChunkTokens) {
        const int64_t len = std::min(kda::kChunkTokens, end - start);
        kda::ChunkArgs args;
        args.q = q + start * 3 * width, args.k = k + start * 3 * width, args.qk_stride = 3 * width;
        args.v = v + start * 3 * width, args.v_stride = 3 * width;
        args.g = g + start * width, args.g_stride = width;
        args.beta = b + start * (2 * d + heads), args.beta_stride = 2 * d + heads;
        args.o = out_rows + start * width, args.o_stride = width;
        args.n = len, args.dk = d, args.dv = d;
        kda::Chunk(S, args, scratch);
      }
    };
    int64_t done = 0;
    for (size_t c = 0; c < s.state_copies.size(); ++c) {
      const int64_t rows = s.state_copies[c].first;
      if (rows > done) run_rows(done, rows);
      done = rows;
      const bool split_only = s.state_copies[c].second == nullptr;
      if (bf16) {  // a call boundary: S is stored as bf16 there, and the next call widens it again
        uint16_t* copy = split_only ? nullptr : static_cast<uint16_t*>(copies[i / heads][c].recurrent) + hd * d * d;
        for (int64_t j = 0; j < d * d; ++j) {
          const uint16_t stored = FloatToBf16(S[j]);
          if (copy != nullptr) copy[j] = stored;
          S[j] = Bf16ToFloat(stored);
        }
      } else if (!split_only) {
        std::memcpy(static_cast<float*>(copies[i / heads][c].recurrent) + hd * d * d, S, d * d * sizeof(float));
      }
    }
    if (done < s.count) run_rows(done, s.count);
    if (bf16) {
      for (int64_t i = 0; i < d * d; ++i) S_bf16[i] = FloatToBf16(S[i]);
    }
  });
  // (7) gated RMSNorm per head with a sigmoid gate: o' = o_norm ⊙ RMSNorm(o_h) ⊙ sigmoid(z_h).
  ctx.pool.Run(n, [&](int64_t t, int worker) {
    float* gate = ctx.WorkerFloats(worker, width);
    vec::Sigmoid(z + t * width, width, gate);
    for (int64_t hd = 0; hd < heads; ++hd) {
      float* head = o + t * width + hd * d;
      vec::RmsNorm(head, w.o_norm, d, c.rms_norm_eps, head);
      for (int64_t ch = 0; ch < d; ++ch) head[ch] *= gate[hd * d + ch];
    }
  });
  // (8) out = o_proj o'
  ctx.Linear(w.o_proj, o, width, n, out, hidden);
  return Status::Ok();
}

}  // namespace glint
