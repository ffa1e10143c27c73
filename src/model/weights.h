// Weights of the GLM-5.3-Flash text model for the fp32 reference path, bound from a checkpoint by name
// (docs/model-glm53.md §2) with every shape checked against the ModelConfig.
//
// The reference path holds every tensor as fp32: BF16 decoded exactly, FP8 dequantized exactly
// (W[r,c] = e4m3(code[r,c]) · scale_inv[r/128, c/128], §9). That is fine at tiny sizes; the fast path (its own
// issue) keeps int8/bf16 weights instead. Conventions: row-major, linear weights [out, in] as in the checkpoint,
// y = W x.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "dist/sharding.h"
#include "io/checkpoint_schema.h"
#include "io/config.h"
#include "io/safetensors.h"

namespace glint {

// A dense fp32 matrix [rows, cols], row-major.
struct Matrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;  // [rows * cols]

  const float* Row(int64_t r) const { return data.data() + r * cols; }
  float* Row(int64_t r) { return data.data() + r * cols; }
  bool empty() const { return data.empty(); }
};

// mHC parameters of one site (attention or FFN), §4.
struct MhcWeights {
  Matrix fn;                 // [(2 + hc) · hc, hc · D] = [24, 16384] in the release
  std::vector<float> base;   // [(2 + hc) · hc]
  std::vector<float> scale;  // [3]: pre, post, comb
};

// Kimi Delta Attention, §5. H heads × d (key = value = head_dim), width = H·d.
struct KdaWeights {
  Matrix q_proj, k_proj, v_proj;  // [width, D]
  Matrix o_proj;                  // [D, width]
  Matrix f_a_proj, g_a_proj;      // [d, D]   (low rank = head_dim)
  Matrix f_b_proj, g_b_proj;      // [width, d]
  Matrix b_proj;                  // [H, D]
  Matrix q_conv, k_conv, v_conv;  // [width, kernel]; tap kernel−1 multiplies the current token
  std::vector<float> a_log;       // [H]
  std::vector<float> dt_bias;     // [width]
  std::vector<float> o_norm;      // [d]
};

// KPool lightning indexer, §7. I heads × e (index_head_dim).
struct IndexerWeights {
  Matrix wq_b;                       // [I·e, q_lora]
  Matrix wk;                         // [e, D]
  std::vector<float> k_norm_weight;  // [e]  LayerNorm with bias, eps 1e-6
  std::vector<float> k_norm_bias;    // [e]
  Matrix weights_proj;               // [I, D]
  Matrix compress_gate;              // [e, D]  per-channel pooling logits
  Matrix compress_ape;               // [kpool, e]  learned position bias of the pooling softmax
};

// NoPE MLA + indexer (a DSA layer, also the MTP layer's attention), §6.
struct DsaWeights {
  Matrix q_a_proj;                    // [q_lora, D]
  std::vector<float> q_a_layernorm;   // [q_lora]
  Matrix q_b_proj;                    // [heads · qk_head_dim, q_lora]
  Matrix kv_a_proj;                   // [kv_lora, D]   (kv_a_proj_with_mqa; no rope part)
  std::vector<float> kv_a_layernorm;  // [kv_lora]
  Matrix kv_b_proj;                   // [heads · (qk_head_dim + v_head_dim), kv_lora]; per head: k rows then v rows
  Matrix o_proj;                      // [D, heads · v_head_dim]
  IndexerWeights indexer;
};

// Clamped SwiGLU MLP (dense layers, shared and routed experts), §8.1.
struct MlpWeights {
  Matrix gate_proj, up_proj;  // [width, D]
  Matrix down_proj;           // [D, width]
};

// Sigmoid-routed MoE, §8.2–8.3.
struct MoeWeights {
  Matrix router;                               // [E, D]  (mlp.gate.weight)
  std::vector<float> e_score_correction_bias;  // [E]     selection only
  std::vector<MlpWeights> experts;             // [E]
  std::vector<MlpWeights> shared;              // [n_shared_experts] (0 or 1)
};

struct LayerWeights {
  AttentionKind attention_kind;
  MlpKind mlp_kind;
  std::vector<float> input_layernorm;           // [D]
  std::vector<float> post_attention_layernorm;  // [D]
  MhcWeights hc_attn, hc_ffn;
  KdaWeights kda;  // when attention_kind == kKda
  DsaWeights dsa;  // when attention_kind == kDsa
  MlpWeights mlp;  // when mlp_kind == kDense
  MoeWeights moe;  // when mlp_kind == kMoe
};

// The MTP layer (index num_hidden_layers), §10: plain residuals, no mHC.
struct MtpWeights {
  Matrix eh_proj;                               // [D, 2D]; input = [enorm(embed) ; hnorm(hidden)]
  std::vector<float> enorm, hnorm;              // [D]
  std::vector<float> input_layernorm;           // [D]
  std::vector<float> post_attention_layernorm;  // [D]
  std::vector<float> shared_head_norm;          // [D]
  DsaWeights dsa;
  MoeWeights moe;
};

struct ModelWeights {
  Matrix embed_tokens;               // [V, D]
  std::vector<LayerWeights> layers;  // [num_hidden_layers]
  std::vector<float> final_norm;     // [D]
  Matrix lm_head;                    // [V, D]
  std::unique_ptr<MtpWeights> mtp;   // null when the config has no MTP layer or it was not loaded
};

// The part of a tensor, viewed as [shape[0], product of the rest], that a rank holds: rows [row_begin, row_end),
// columns [col_begin, col_end); −1 ends: to the end.
struct TensorRegion {
  int64_t row_begin = 0, row_end = -1;
  int64_t col_begin = 0, col_end = -1;
};

struct LoadOptions {
  bool load_mtp = true;  // bind layers.<num_hidden_layers>.* when the config has an MTP layer
  // Expert parallel: the routed (and shared) experts to read; the others are checked from the header (name, shape,
  // dtype) but their data is never read, and their MlpWeights stay empty.
  LocalExperts experts;
  // Tensor parallel: the slice of each named tensor to read (tensor_parallel.h TensorParallelRegions); only those
  // bytes are decoded. A tensor not named is read whole.
  std::map<std::string, TensorRegion> regions;
};

// Binds every text-path tensor of `checkpoint` to fp32 weights. Errors name the tensor and say what was wrong:
// a missing tensor, an unknown name (vision tensors are recognised and skipped), a wrong shape or dtype, an FP8
// tensor without its `_scale_inv` (or with one of the wrong shape).
Result<ModelWeights> LoadModelWeights(const Checkpoint& checkpoint, const ModelConfig& config,
                                      const LoadOptions& options = {});

// The checkpoint rules every weight loader applies (the fp32 binder here and the fast path's converter), so
// both accept and refuse the same files with the same messages.
// A tensor against its schema entry: present, of the expected shape, either F8_E4M3 (only where the release
// stores FP8, with an F32 `_scale_inv` of one scale per block) or F32/BF16/F16 without scales.
struct CheckedTensor {
  const TensorInfo* info = nullptr;
  const TensorInfo* scale = nullptr;  // the `_scale_inv` companion; null unless info is F8_E4M3
};
Result<CheckedTensor> CheckStoredTensor(const Checkpoint& checkpoint, const ModelConfig& config,
                                        const TensorSpec& spec);
// After binding: every tensor of the checkpoint was used (`used` names tensors and scales), is a vision tensor
// (skipped: text-only serving), or belongs to the MTP layer while `skip_mtp`.
Status CheckNoUnknownTensors(const Checkpoint& checkpoint, const ModelConfig& config, const std::set<std::string>& used,
                             bool skip_mtp);

// Decodes one float tensor (F32/BF16/F16, or F8_E4M3 with `scale`) to fp32. Exposed for tests.
Result<std::vector<float>> DecodeToFloat(const TensorView& view, const TensorView* scale, int64_t block_rows,
                                         int64_t block_cols);
// Decodes `region` of it (row-major [rows, cols] of the region), reading only the region's bytes (and its scales).
Result<std::vector<float>> DecodeRegionToFloat(const TensorView& view, const TensorView* scale, int64_t block_rows,
                                               int64_t block_cols, const TensorRegion& region);

}  // namespace glint
