// The sublayers of the fast forward pass (FastModel): each works on the rows of one pass — the new tokens of every
// sequence in the batch, stacked — and on the per-sequence caches of the segments those rows belong to. Matrix
// products go through the int8/bf16 kernels on the worker pool; everything between them is fp32.
//
// Exposed (rather than private to fast_model.cc) so that tests can run one fast sublayer against its fp32
// reference on the same input (tests/unit/fast_model_test.cc, quality gate (a)).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/worker_pool.h"
#include "dist/sharding.h"
#include "fast/pass_profile.h"
#include "io/config.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_i4.h"
#include "kernels/gemm_i8.h"
#include "kernels/mla_ops.h"
#include "model/dsa.h"
#include "model/ffn.h"
#include "model/kda.h"
#include "packed/fast_weights.h"

namespace glint {

class ExpertStore;

// Rows [row, row + count) of a pass belong to one sequence, at absolute positions first_position…; first_index is
// the index of the first of them among the tokens of the Forward call's entry (what ForcedChoices is indexed by).
struct Segment {
  int sequence = 0;  // batch entry
  int64_t row = 0;
  int64_t count = 0;
  int64_t first_position = 0;
  int64_t first_index = 0;
  // Where to copy the KDA state out inside the segment (prefix-cache checkpoints, the speculative-decoding rollback
  // snapshot): (rows of the segment before the copy, 1..count, ascending; destination laid out as a slot's KDA
  // part). FastKda splits its recurrence there exactly as separate calls would.
  std::vector<std::pair<int64_t, std::byte*>> state_copies = {};
};

// Per-token mHC coefficients (hc ≤ 8).
struct MhcTokenCoefficients {
  float pre[8];
  float post[8];
  float comb[64];
};

// One activation buffer of the fast pass: grown to the largest size asked for and kept between calls (no allocation
// in the steady state). What it holds lasts from the step that fills it until that step runs again. An AlignedBuffer,
// so one of 2 MiB or more sits on transparent huge pages: a 512-row pass's buffers total ≈ 0.6 GB at the release
// widths, which on 4 KiB pages cost the first pass ≈ 140,000 page faults and every pass TLB misses (docs/performance.md
// "Activations on 2 MB pages").
class PassBuffer {
 public:
  float* Floats(int64_t count) {
    if (count > count_) Grow(count);
    return data();
  }
  float* data() { return values_.As<float>(); }

 private:
  void Grow(int64_t count);  // to at least `count` and twice the old size, keeping the values held
  AlignedBuffer values_;
  int64_t count_ = 0;
};

// The named activations of the fast pass (FastContext::act), one member per buffer. Shapes: n rows of the pass,
// r rows that want logits, D hidden, V vocabulary, hc streams; KDA W = H·d (heads × head_dim); MLA H heads, q
// q_lora, c kv_lora, qk and v head dims, e and I the indexer's head dim and heads; F an MLP's or expert's width,
// E routed experts, w rows of an MoE wave.
struct FastActivations {
  // The trunk (FastModel::RunPass).
  PassBuffer streams;                      // [n, hc, D] X: the mHC residual streams
  PassBuffer sublayer_in;                  // [n, D] the site's RMSNormed mHC read: the sublayer's input
  PassBuffer sublayer_out;                 // [n, D] the sublayer's output (MoE: summed over the ranks)
  std::vector<MhcTokenCoefficients> site;  // [n] the current site's mHC coefficients
  PassBuffer final_normed;                 // [n, D] RMSNorm(mean of the streams)
  PassBuffer logit_inputs;                 // [r, D] the final_normed rows that want logits, gathered
  PassBuffer logits;                       // [r, V] lm_head of logit_inputs
  struct {                                 // FastKda
    PassBuffer qkv;                        // [n, 3W] q, k, v: projected, conv + SiLU, q and k L2-normed, in place
    PassBuffer gates;                      // [n, 2d + H] f_a h, g_a h, b h (b → β in place)
    PassBuffer decay;                      // [n, W] f_b(f_a h) → the log-decay g, in place
    PassBuffer gate_logits;                // [n, W] z = g_b(g_a h), the output gate's logits
    PassBuffer attention;                  // [n, W] o = Sᵀq per head, then gated-RMSNormed in place
  } kda;
  struct {                // FastDsa
    PassBuffer qa_kva;    // [n, q + c] q_resid = RMSNorm(q_a h), the latent c = RMSNorm(kv_a h)
    PassBuffer q;         // [n, H·qk] q_b q_resid
    PassBuffer index_in;  // [n, 2e + I] indexer key, pooling gate, head weights
    PassBuffer index_q;   // [n, I·e] the indexer query wq_b q_resid (only past the dense regime)
    PassBuffer q_latent;  // [n, H·c] q̃_h = Wk_hᵀ q_h
    PassBuffer o_latent;  // [n, H·c] ō_h = Σ_j p_j c_j
    PassBuffer o;         // [n, H·v] Wv_h ō_h
  } dsa;
  struct {               // FastMlp
    PassBuffer gate_up;  // [n, 2F] gate, then up
    PassBuffer act;      // [n, F] SwiGLU(gate, up)
  } mlp;
  struct {                     // FastMoe
    PassBuffer router_logits;  // [n, E] fp32 logits from exact bf16 router weights
    PassBuffer gate_up;        // [w, 2F] per expert row of the wave
    PassBuffer act;            // [w, F]
    PassBuffer expert_out;     // [w, D]
  } moe;
};

// Kernels, pool, scratch and statistics for one model. Not thread-safe: one forward pass at a time.
class FastContext {
 public:
  FastContext(WorkerPool& pool, Isa isa, const ModelConfig& config);

  WorkerPool& pool;
  const Int8Kernels& i8;
  const Int4Kernels& i4;
  const Bf16Kernels& bf16;
  const ModelConfig& config;
  const Isa isa;  // the highest kernel level allowed (--isa): the indexer's kernels follow it too
  // The MLA attention kernel (FastModelOptions::mla_attention).
  mla::AttentionPrecision attention = mla::AttentionPrecision::kFp32;

  // y [tokens, w.rows] = W x for x [tokens, w.cols] (row stride x_stride): int8 and int4 weights quantize x per
  // token and group first; bf16 weights use x as it is.
  void Linear(const PackedLinear& w, const float* x, int64_t x_stride, int64_t tokens, float* y, int64_t y_stride);
  // For a matrix stacking `heads` per-head blocks of w.rows / heads rows: head h's rows of y are W_h x_h with
  // x_h = x + h · x_head_offset (each head has its own input, e.g. q_h). int8 only.
  void LinearPerHead(const PackedLinear& w, int64_t heads, const float* x, int64_t x_stride, int64_t x_head_offset,
                     int64_t tokens, float* y, int64_t y_stride);

  // Row blocks [block_begin, block_end) of an int8 or int4 product on the calling thread, x quantized for
  // w.ActivationGrouping(). No statistics (the caller counts).
  void IntegerGemm(const PackedLinear& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                   float* y, int64_t y_stride) const;

  // Per-worker scratch.
  ActivationScratch& WorkerActivations(int worker) { return worker_activations_[worker]; }
  float* WorkerFloats(int worker, int64_t count);
  // The pass's activations, named.
  FastActivations act;
  ActivationScratch& ExpertActivations(int64_t index);
  // The MoE input's rows quantized once for all the experts that take them (fast_moe.cc).
  ActivationScratch& MoeInputActivations() { return moe_input_activations_; }

  // Statistics since the last ResetStats (benchmarks): bytes of weights the products read, and the integer (int8
  // and int4) products' multiply-adds and wall time (the prefill target is judged on those products alone).
  uint64_t weight_bytes_read = 0;
  // Where routed experts come from: null = FastMoeWeights::experts, all resident (the default).
  ExpertStore* experts = nullptr;
  // --expert-prefetch next-layer: the next MoE layer of this pass, whose likely experts (this layer's MoE input
  // through its router) FastMoe asks the store to read once its own experts are done; null: no prefetch.
  const FastMoeWeights* prefetch_next = nullptr;
  // [n] per row of the current pass when the caller scopes expert-read failures to rows (FastModel::RunPass): Ok
  // for a row computed in full; a row routed to an expert the store could not read gets that error, and FastMoe
  // routes it to no expert in later layers (its sequence fails; other rows are exact). Empty: a failed read fails
  // the FastMoe call.
  std::vector<Status> row_errors;
  ProductTime dense_products;   // FastContext::Linear and LinearPerHead (quantization not included)
  ProductTime expert_products;  // the MoE's expert phases (fast_moe.cc)
  // The DSA indexer's selection (scoring + top-k) wall time and the pooled-key bytes it read (bench-context).
  double indexer_seconds = 0;
  uint64_t indexer_key_bytes = 0;
  // Where the wall time goes, by part (bench-model's prefill profile); off unless the caller enables it.
  PassProfile profile;
  void ResetStats() {
    weight_bytes_read = 0, dense_products = {}, expert_products = {}, indexer_seconds = 0, indexer_key_bytes = 0;
    profile.Reset();
  }

 private:
  ActivationScratch activations_;
  std::vector<ActivationScratch> worker_activations_;
  std::vector<PassBuffer> worker_floats_;
  std::vector<std::unique_ptr<ActivationScratch>> expert_activations_;
  ActivationScratch moe_input_activations_;
};

// mHC read at one site for n tokens: coefficients from the streams, then h = RMSNorm(Σ pre · X; norm).
//   streams [n, hc, D]; h [n, D]; coefficients [n]
void FastMhcRead(FastContext& ctx, const FastMhcWeights& w, const float* norm, const float* streams, int64_t n,
                 float* h, MhcTokenCoefficients* coefficients);
// mHC write: streams ← post · y + combᵀ streams, per token.   y [n, D]
void FastMhcWrite(FastContext& ctx, const MhcTokenCoefficients* coefficients, const float* y, int64_t n,
                  float* streams);

// One segment's state in a KDA layer: the layer's view in the sequence's slot (fp32 or bf16 storage), and in each
// of the segment's state_copies destinations (laid out as a slot's KDA part).
struct KdaSegmentState {
  KdaStateView state;
  std::vector<KdaStateView> copies = {};  // [segment.state_copies]
};

// KDA over the pass: h [n, D] → out [n, D]; updates each segment's state in place (states [segments]). The caller
// counts tokens. Each segment's state_copies get the layer's state at their row: the rows are computed in parts
// split there, each part as a call of its own (one row: the decode step; more: chunks of 64 from the part's first
// row; bf16 storage rounded at each split).
Status FastKda(FastContext& ctx, const FastKdaWeights& w, const float* h, std::span<const Segment> segments,
               std::span<const KdaSegmentState> states, float* out);

// How FastKda splits its work over the pool (fast_kda.cc gives the measurements). The short conv: channels per task
// for a segment of `rows` rows, a stream `width` channels wide. The delta rule: tasks of consecutive heads of one
// segment, one head each for a segment of several rows, up to kKdaDecodeHeadsPerTask for one-row segments (a
// decode step) while that leaves at least 4 tasks per worker; in segment order, each head exactly once.
int64_t KdaConvBlockChannels(int64_t width, int64_t rows);
inline constexpr int64_t kKdaDecodeHeadsPerTask = 8;
struct KdaHeadRange {
  size_t segment;
  int64_t begin, end;  // heads
};
std::vector<KdaHeadRange> KdaDeltaRuleTasks(std::span<const Segment> segments, int64_t heads, int workers);

// DSA over the pass: h [n, D] → out [n, D]; appends to each segment's cache (caches [segments]: a view whose
// `tokens` is the segment's first position; an owning cache is grown, a view's blocks must already cover the new
// positions) and advances its `tokens`. forced: empty, or [n] the forced attended positions of each pass row (null:
// the indexer chooses). selections: when not null, every pass row's selected positions and indexer margin.
Status FastDsa(FastContext& ctx, const FastDsaWeights& w, const float* h, std::span<const Segment> segments,
               std::span<DsaCache> caches, std::span<const std::vector<int64_t>* const> forced, float* out,
               DsaTrace* selections);

// Clamped SwiGLU MLP: h [n, D] → out [n, D].
void FastMlp(FastContext& ctx, const FastMlpWeights& w, const float* h, int64_t n, float* out);

// MoE (fast/fast_moe.cc): route (forced: empty, or [n] a choice per row, null: the router chooses), group rows by
// expert, read each active expert's weights once, combine in ascending expert id, shared expert last. choices: when not
// null, filled [n]. With ctx.experts set, routed experts come from that store (experts/expert_store.h) and an expert
// it cannot read fails the call. `local` (expert parallel, sharding.h): only the chosen experts this rank holds are
// computed, so `out` is this rank's partial sum (the caller sums over the ranks); choices and routing are whole.
// experts_active counts the local experts the rows activated.
Status FastMoe(FastContext& ctx, const FastMoeWeights& w, const float* h, int64_t n,
               std::span<const RouterChoice* const> forced, float* out, std::vector<RouterChoice>* choices,
               int64_t* experts_active, const LocalExperts& local = {});

// FastMoe's two halves, for --dp-attention (the rows' owner routes them; the expert holders compute the routed
// rows they receive): the routing of rows h [n, D], and the products and combine of rows already routed.
std::vector<RouterChoice> RouteMoe(FastContext& ctx, const FastMoeWeights& w, const float* h, int64_t n,
                                   std::span<const RouterChoice* const> forced);
Status FastMoeRouted(FastContext& ctx, const FastMoeWeights& w, const float* h, int64_t n,
                     const std::vector<RouterChoice>& routed, float* out, int64_t* experts_active,
                     const LocalExperts& local);

// Rows of expert work (Σ over active experts of their rows) processed together in one MoE wave: bounds the MoE
// buffers of long prefills (each expert still belongs to exactly one wave, so its weights are read once per pass).
inline constexpr int64_t kMoeWaveRows = 1024;

// Elementwise work (floats touched) below which a step runs on the calling thread (WorkerPool::RunIfWorthIt).
inline constexpr int64_t kMinParallelElements = int64_t{1} << 16;

}  // namespace glint
