// KDA sublayer of the fast path (fast_layers.h), the equations of model/kda.cc (docs/model-kda.md) with int8
// q/k/v/o projections, exact bf16 gate projections and the kernels of kernels/kda_ops.h: the fused decode step for
// a one-token segment, the chunked WY form (chunks of 64 from the segment's first token) otherwise.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "fast/fast_layers.h"
#include "kernels/kda_ops.h"
#include "kernels/vector_ops.h"
#include "quant/formats.h"

namespace glint {
namespace {

constexpr float kL2NormEps = 1e-6f;  // HF l2norm eps, inside the sqrt (pitfall 2)

// Before anything is written: the kernels' limits, one state per segment and one view per state copy.
// Returns n, the rows of the pass.
Result<int64_t> CheckSegments(const ModelConfig& c, std::span<const Segment> segments,
                              std::span<const KdaSegmentState> states) {
  if (c.kda_head_dim > 256) return Unimplemented("the fast KDA kernels support head_dim ≤ 256, got ", c.kda_head_dim);
  if (c.kda_conv_kernel < 1 || c.kda_conv_kernel > vec::kMaxConvKernel) {
    return InvalidArgument("the KDA short conv needs 1 to ", vec::kMaxConvKernel, " taps, the config has ",
                           c.kda_conv_kernel);
  }
  if (states.size() != segments.size()) {
    return InvalidArgument("FastKda: ", states.size(), " states for ", segments.size(), " segments");
  }
  int64_t n = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    n = std::max(n, segments[i].row + segments[i].count);
    if (states[i].copies.size() != segments[i].state_copies.size()) {
      return InvalidArgument("FastKda: segment ", i, " asks for ", segments[i].state_copies.size(),
                             " state copies but has ", states[i].copies.size(), " destination views");
    }
  }
  return n;
}

// The projections of h for n rows, in the pass's KDA buffers (ctx.act.kda), with their row strides.
struct KdaProjections {
  int64_t qkv_stride = 0, gates_stride = 0;
  float* qkv = nullptr;    // [n, 3W] q, k, v
  float* gates = nullptr;  // [n, 2d + H] f_a h, g_a h, b h
  float* g = nullptr;      // [n, W] f = f_b(f_a h), later the log-decay g
  float* z = nullptr;      // [n, W] output gate logits
  float* o = nullptr;      // [n, W] attention output
};

// [q; k; v] (int8), [f_a; g_a; b] (bf16), then f = f_b(f_a h), z = g_b(g_a h) (bf16).
KdaProjections Project(FastContext& ctx, const FastKdaWeights& w, const float* h, int64_t n) {
  const ModelConfig& c = ctx.config;
  const int64_t heads = c.kda_num_heads, d = c.kda_head_dim, width = c.KdaWidth();
  KdaProjections p;
  p.qkv_stride = 3 * width;
  p.gates_stride = 2 * d + heads;
  p.qkv = ctx.act.kda.qkv.Floats(n * p.qkv_stride);
  p.gates = ctx.act.kda.gates.Floats(n * p.gates_stride);
  p.g = ctx.act.kda.decay.Floats(n * width);
  p.z = ctx.act.kda.gate_logits.Floats(n * width);
  p.o = ctx.act.kda.attention.Floats(n * width);
  ctx.Linear(w.qkv, h, c.hidden_size, n, p.qkv, p.qkv_stride);
  ctx.Linear(w.gates_in, h, c.hidden_size, n, p.gates, p.gates_stride);
  ctx.Linear(w.f_b, p.gates, p.gates_stride, n, p.g, width);
  ctx.Linear(w.g_b, p.gates + d, p.gates_stride, n, p.z, width);
  return p;
}

// (1) short conv + SiLU per segment, stream and block of channels (KdaConvBlockChannels; sequential in time,
// independent across channels); the conv windows at each state copy go to its destination (vec::ShortConvSilu: whole
// vectors of channels, the window in registers' reach between rows).
void ConvAndSilu(FastContext& ctx, const FastKdaWeights& w, const KdaProjections& p, std::span<const Segment> segments,
                 std::span<const KdaSegmentState> states, int64_t n) {
  const int64_t width = ctx.config.KdaWidth(), kernel = ctx.config.kda_conv_kernel, history = kernel - 1;
  struct ConvTask {
    size_t segment;
    int stream;
    int64_t begin, end;  // channels
  };
  std::vector<ConvTask> tasks;
  for (size_t s = 0; s < segments.size(); ++s) {
    const int64_t block = KdaConvBlockChannels(width, segments[s].count), blocks = (width + block - 1) / block;
    for (int stream = 0; stream < 3; ++stream) {
      for (int64_t b = 0; b < blocks; ++b) {
        tasks.push_back({s, stream, b * block, std::min(width, (b + 1) * block)});
      }
    }
  }
  ctx.pool.RunIfWorthIt(
      static_cast<int64_t>(tasks.size()), 3 * n * width * kernel, kMinParallelElements, [&](int64_t i, int) {
        const ConvTask& task = tasks[i];
        const Segment& s = segments[task.segment];
        const KdaSegmentState& state = states[task.segment];
        // This block's [channels, K−1] slice of the stream's part of a window.
        const int64_t window_offset = (task.stream * width + task.begin) * history;
        std::vector<std::pair<int64_t, float*>> window_copies;  // the block's window in each copy
        for (size_t k = 0; k < s.state_copies.size(); ++k) {
          if (s.state_copies[k].second == nullptr) continue;  // a split only: the conv is per row, nothing to copy
          window_copies.emplace_back(s.state_copies[k].first, state.copies[k].conv_window + window_offset);
        }
        vec::ShortConvSilu(w.conv[task.stream] + task.begin * kernel, task.end - task.begin, kernel,
                           state.state.conv_window + window_offset,
                           p.qkv + s.row * p.qkv_stride + task.stream * width + task.begin, p.qkv_stride, s.count,
                           window_copies);
      });
}

// (2) per-head L2 norms (q also × d^-1/2), (3) g = lb · sigmoid(exp(A_log) (f + dt_bias)), (4) β = sigmoid(b),
// in place (β overwrites the b columns of `gates`).
void NormsAndGates(FastContext& ctx, const FastKdaWeights& w, const KdaProjections& p, int64_t n) {
  const ModelConfig& c = ctx.config;
  const int64_t heads = c.kda_num_heads, d = c.kda_head_dim, width = c.KdaWidth();
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> decay_rate(heads);
  for (int64_t hd = 0; hd < heads; ++hd) decay_rate[hd] = std::exp(w.a_log[hd]);
  ctx.pool.Run(n, [&](int64_t t, int) {
    float* row = p.qkv + t * p.qkv_stride;
    for (int64_t hd = 0; hd < heads; ++hd) {
      float* q = row + hd * d;
      float* k = row + width + hd * d;
      vec::Scale(q_scale / std::sqrt(vec::SumSquares(q, d) + kL2NormEps), q, d, q);
      vec::Scale(1.0f / std::sqrt(vec::SumSquares(k, d) + kL2NormEps), k, d, k);
    }
    float* g = p.g + t * width;
    for (int64_t hd = 0; hd < heads; ++hd) {  // head by head: no integer division per channel, and it vectorises
      float* g_head = g + hd * d;
      const float* bias = w.dt_bias + hd * d;
      for (int64_t ch = 0; ch < d; ++ch) g_head[ch] = decay_rate[hd] * (g_head[ch] + bias[ch]);
    }
    vec::Sigmoid(g, width, g);
    vec::Scale(c.kda_gate_lower_bound, g, width, g);
    float* b = p.gates + t * p.gates_stride + 2 * d;
    vec::Sigmoid(b, heads, b);
  });
}

// One head of one segment through the delta rule: its rows' q, k, v, g, β and output, and S in fp32.
struct HeadRows {
  const KdaProjections& p;
  const Segment& s;
  int64_t head;
  float* S;        // [d, d]
  float* scratch;  // kda::ChunkScratchFloats(d, d)
};

// Rows [begin, end) of the head as one call: the fused decode step for one row, chunks of 64 from `begin` otherwise.
void DeltaRuleRows(const ModelConfig& c, const HeadRows& r, int64_t begin, int64_t end) {
  const int64_t d = c.kda_head_dim, width = c.KdaWidth(), qkv = r.p.qkv_stride, gates = r.p.gates_stride;
  const float* q = r.p.qkv + r.s.row * qkv + r.head * d;
  const float* k = q + width;
  const float* v = q + 2 * width;
  const float* g = r.p.g + r.s.row * width + r.head * d;
  const float* b = r.p.gates + r.s.row * gates + 2 * d + r.head;
  float* out = r.p.o + r.s.row * width + r.head * d;
  if (end - begin == 1) {
    kda::DecodeStep(r.S, q + begin * qkv, k + begin * qkv, v + begin * qkv, g + begin * width, b[begin * gates], d, d,
                    out + begin * width);
    return;
  }
  for (int64_t start = begin; start < end; start += kda::kChunkTokens) {
    kda::ChunkArgs args;
    args.q = q + start * qkv, args.k = k + start * qkv, args.qk_stride = qkv;
    args.v = v + start * qkv, args.v_stride = qkv;
    args.g = g + start * width, args.g_stride = width;
    args.beta = b + start * gates, args.beta_stride = gates;
    args.o = out + start * width, args.o_stride = width;
    args.n = std::min(kda::kChunkTokens, end - start), args.dk = d, args.dv = d;
    kda::Chunk(r.S, args, r.scratch);
  }
}

// (5)/(6) the delta rule of one (segment, head), split at the segment's state copies (each part a call of its own).
// S is updated in place (fp32 storage), or widened from bf16 storage into scratch and rounded back after the call
// and at every copy, a call boundary.
void DeltaRuleHead(FastContext& ctx, const KdaProjections& p, const Segment& s, const KdaSegmentState& state,
                   int64_t head, int worker) {
  const int64_t d = ctx.config.kda_head_dim, dd = d * d;
  const bool bf16 = state.state.storage == KdaStateStorage::kBfloat16;
  float* scratch = ctx.WorkerFloats(worker, dd + kda::ChunkScratchFloats(d, d));
  uint16_t* S_bf16 = static_cast<uint16_t*>(state.state.recurrent) + head * dd;
  float* S = bf16 ? scratch : static_cast<float*>(state.state.recurrent) + head * dd;
  if (bf16) {
    for (int64_t i = 0; i < dd; ++i) S[i] = Bf16ToFloat(S_bf16[i]);
  }
  const HeadRows rows{p, s, head, S, scratch + dd};
  int64_t done = 0;
  for (size_t c = 0; c < s.state_copies.size(); ++c) {
    const int64_t end = s.state_copies[c].first;
    if (end > done) DeltaRuleRows(ctx.config, rows, done, end);
    done = end;
    const bool split_only = s.state_copies[c].second == nullptr;  // a split, no copy to write
    if (bf16) {  // a call boundary: S is stored as bf16 there, and the next call widens it again
      uint16_t* copy = split_only ? nullptr : static_cast<uint16_t*>(state.copies[c].recurrent) + head * dd;
      for (int64_t j = 0; j < dd; ++j) {
        const uint16_t stored = FloatToBf16(S[j]);
        if (copy != nullptr) copy[j] = stored;
        S[j] = Bf16ToFloat(stored);
      }
    } else if (!split_only) {
      std::memcpy(static_cast<float*>(state.copies[c].recurrent) + head * dd, S, dd * sizeof(float));
    }
  }
  if (done < s.count) DeltaRuleRows(ctx.config, rows, done, s.count);
  if (bf16) {
    for (int64_t i = 0; i < dd; ++i) S_bf16[i] = FloatToBf16(S[i]);
  }
}

// (7) gated RMSNorm per head with a sigmoid gate: o' = o_norm ⊙ RMSNorm(o_h) ⊙ sigmoid(z_h), in place.
void GatedNorm(FastContext& ctx, const FastKdaWeights& w, const KdaProjections& p, int64_t n) {
  const ModelConfig& c = ctx.config;
  const int64_t heads = c.kda_num_heads, d = c.kda_head_dim, width = c.KdaWidth();
  ctx.pool.Run(n, [&](int64_t t, int worker) {
    float* gate = ctx.WorkerFloats(worker, width);
    vec::Sigmoid(p.z + t * width, width, gate);
    for (int64_t hd = 0; hd < heads; ++hd) {
      float* head = p.o + t * width + hd * d;
      vec::RmsNorm(head, w.o_norm, d, c.rms_norm_eps, head);
      for (int64_t ch = 0; ch < d; ++ch) head[ch] *= gate[hd * d + ch];
    }
  });
}

}  // namespace

// For a prefill segment, blocks of at most 256 channels, a multiple of 16 (whole AVX-512 vectors), give the pool
// 3 × 32 tasks per segment at the model's width instead of 3; narrower streams still split in four (16 channels at
// least), so the small test models run the block offsets too. A segment of few rows (a decode step: one row each)
// takes blocks of at least kMinConvTaskValues channels × rows: with 256-channel blocks a 16-sequence step handed out
// 1,536 tasks of one row each per layer, each no more work than claiming it, and the part took 3.8–3.9 % of the
// step; whole streams per task, 1.7 % (docs/performance.md, "Batched decode: the rest of the step").
int64_t KdaConvBlockChannels(int64_t width, int64_t rows) {
  constexpr int64_t kMinConvTaskValues = 8192;
  const int64_t prefill_block = std::clamp<int64_t>((width / 4 + 15) / 16 * 16, 16, 256);
  const int64_t few_rows_block = (kMinConvTaskValues / std::max<int64_t>(1, rows) + 15) / 16 * 16;
  return std::min(width, std::max(prefill_block, few_rows_block));
}

// A segment of several rows runs the chunked form, a compute-bound task per head. A one-row segment is
// memory-bound: each head's state (64 KB at d = 128; a segment's heads are contiguous) is read from memory and
// written back, and a task of consecutive heads streams them as one sequential run that the hardware prefetcher
// follows, where heads handed out one at a time send both threads to alternate 64 KB pieces. Harness (Zen 5,
// 2 threads, 16 × 3 × 64 states, DecodeStep alone): 1 head a task 7.9 ms, 2 heads 7.1–7.2, 4 heads 6.7, 8 heads
// 6.4–6.6 ms; a software prefetch of the next head's state on top gained nothing.
std::vector<KdaHeadRange> KdaDeltaRuleTasks(std::span<const Segment> segments, int64_t heads, int workers) {
  int64_t one_row_heads = 0;
  for (const Segment& s : segments) one_row_heads += s.count == 1 ? heads : 0;
  const int64_t decode_group =
      std::clamp<int64_t>(one_row_heads / (4 * int64_t{std::max(1, workers)}), 1, kKdaDecodeHeadsPerTask);
  std::vector<KdaHeadRange> tasks;
  for (size_t s = 0; s < segments.size(); ++s) {
    const int64_t group = segments[s].count == 1 ? decode_group : 1;
    for (int64_t head = 0; head < heads; head += group) tasks.push_back({s, head, std::min(heads, head + group)});
  }
  return tasks;
}

Status FastKda(FastContext& ctx, const FastKdaWeights& w, const float* h, std::span<const Segment> segments,
               std::span<const KdaSegmentState> states, float* out) {
  GLINT_ASSIGN_OR_RETURN(const int64_t n, CheckSegments(ctx.config, segments, states));
  const KdaProjections projections = Project(ctx, w, h, n);
  {
    const ScopedPart part(ctx.profile, PassPart::kKdaElementwise);
    ConvAndSilu(ctx, w, projections, segments, states, n);
    NormsAndGates(ctx, w, projections, n);
  }
  {
    const ScopedPart part(ctx.profile, PassPart::kKdaChunks);
    const std::vector<KdaHeadRange> tasks = KdaDeltaRuleTasks(segments, ctx.config.kda_num_heads, ctx.pool.size());
    ctx.pool.Run(static_cast<int64_t>(tasks.size()), [&](int64_t i, int worker) {
      const KdaHeadRange& task = tasks[i];
      for (int64_t head = task.begin; head < task.end; ++head) {
        DeltaRuleHead(ctx, projections, segments[task.segment], states[task.segment], head, worker);
      }
    });
  }
  {
    const ScopedPart part(ctx.profile, PassPart::kKdaElementwise);
    GatedNorm(ctx, w, projections, n);
  }
  ctx.Linear(w.o_proj, projections.o, ctx.config.KdaWidth(), n, out, ctx.config.hidden_size);  // (8) o_proj o'
  return Status::Ok();
}

}  // namespace glint
