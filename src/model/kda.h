// Kimi Delta Attention (KDA), the linear-attention sublayer of GLM-5.3-Flash: fp32 reference forward pass.
// Spec: docs/model-glm53.md §5 (per-token math §5.1, chunked form §5.2, state §5.3, pitfalls 1–4 of §13).
// How it works and where each equation lives: docs/model-kda.md.
//
// Notation: H heads (kda_num_heads), d = key dim = value dim (kda_head_dim), width = H·d, D hidden, K the short
// conv kernel (kda_conv_kernel). Row-major throughout.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "model/weights.h"

namespace glint {

// Per-sequence state of one KDA layer. Owned by the caller (the engine will page it later); KdaForward reads it as
// the history before the first token of the call and leaves it describing the history after the last one.
struct KdaState {
  // [3 (q, k, v), width, K−1]: for each stream and channel, the last K−1 PRE-conv projections, oldest first.
  // Zeros at sequence start (the conv sees zero history before position 0).
  std::vector<float> conv_window;
  // [H, d (key), d (value)]: the delta-rule state S of every head, fp32 (§5.3).
  std::vector<float> recurrent;
  int64_t tokens_seen = 0;  // tokens consumed since the sequence start

  // The state of an empty sequence, sized for `config`.
  static KdaState Zero(const ModelConfig& config);
};

// Both evaluate the same math (§5.1 ≡ §5.2) and agree to fp32 rounding; the recurrent one is the simplest
// statement of it (HF uses it for 1-token decode), the chunked one is what HF runs for any multi-token call.
enum class KdaAlgorithm {
  kRecurrent,  // one delta-rule step per token (§5.1)
  kChunked,    // WY-form chunks of 64 tokens with S carried across chunks (§5.2)
};

// How a slot stores S between calls. The math is fp32 either way.
enum class KdaStateStorage {
  kFloat32,   // S kept as computed (the reference)
  kBfloat16,  // S rounded to bf16 (round to nearest even) after each call: half the memory; docs/engine.md
              // measures what it costs in quality
};

// A KDA layer's state where the engine keeps it (a slot of its slot pool; cache_layout.h), read and written in
// place. Sizes are the layout's, so they are not checked here.
struct KdaStateView {
  float* conv_window = nullptr;  // [3, width, K−1] fp32
  void* recurrent = nullptr;     // [H, d, d] fp32 or bf16 bits, per `storage`
  KdaStateStorage storage = KdaStateStorage::kFloat32;
};

// One KDA sublayer over `tokens` consecutive tokens of one sequence, continuing from `state`.
//   h:   [tokens, D]  the RMS-normed hidden (input of the sublayer)
//   out: [tokens, D]  the sublayer output (after o_proj); may alias `h`
// Advances `state` by `tokens`. On an error (tokens ≤ 0, a state or weights not sized for `config`, null
// pointers) nothing is written and `state` is unchanged.
Status KdaForward(const KdaWeights& weights, const ModelConfig& config, const float* h, int64_t tokens, KdaState& state,
                  KdaAlgorithm algorithm, float* out);
// The same on a state kept in a slot. fp32 storage is updated in place; bf16 storage is widened to an fp32 copy
// of S for the call and rounded back after it (one read and one write of S per call: what a fused kernel would
// avoid). The caller counts tokens.
Status KdaForward(const KdaWeights& weights, const ModelConfig& config, const float* h, int64_t tokens,
                  const KdaStateView& state, KdaAlgorithm algorithm, float* out);

// Token count of one chunk of the chunked form (HF / FLA chunk_size).
inline constexpr int64_t kKdaChunkTokens = 64;

}  // namespace glint
