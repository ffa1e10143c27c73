// ModelConfig: config.json (+ generation_config.json) of a GLM-5.3-Flash checkpoint, typed and validated.
//
// Accepts the release layout (outer `glm5_next` with a nested `text_config`) and flat text-only exports. The
// per-layer kinds come from `layer_types` (authoritative) and are checked against the redundant lists
// (`linear_attn_config.full_attn_layers`/`kda_layers`, 0-based; `mlp_layer_types` vs `first_k_dense_replace`).
// Contradictions and values glint does not implement are refused with what was found and what was expected.
// See docs/model.md and docs/model-glm53.md §1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint {

enum class AttentionKind { kKda, kDsa };  // "linear_attention", "deepseek_sparse_attention"
enum class MlpKind { kDense, kMoe };      // "dense", "sparse"

std::string_view AttentionKindName(AttentionKind kind);
std::string_view MlpKindName(MlpKind kind);

// vision_config (docs/vision.md): the ViT tower under `model.visual.*`. Validated: head_dim = hidden_size /
// num_heads divisible by 4 (the 2D rotary splits half of it into h and w frequencies), hidden_act "silu",
// out_hidden_size = the text hidden size (image rows replace token embeddings).
struct VisionConfig {
  bool present = false;
  int64_t depth = 0, hidden_size = 0, num_heads = 0, intermediate_size = 0, patch_size = 0, temporal_patch_size = 0;
  int64_t spatial_merge_size = 0, out_hidden_size = 0, projection_intermediate_size = 0, in_channels = 3;
  bool attention_bias = false;  // biases on qkv/proj and the block MLP (true in the release)
  float rms_norm_eps = 1e-5f;   // block norms, per-head q/k norms and post_layernorm (HF: config.rms_norm_eps)
  float swiglu_limit = 10.0f;   // clamp of the block MLP's and the merger's SwiGLU (required key, > 0)
  double rope_theta = 10000.0;  // the 2D rotary's base (HF VisionRotaryEmbedding default; not a config key)

  int64_t HeadDim() const { return num_heads > 0 ? hidden_size / num_heads : 0; }
  int64_t PatchValues() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  int64_t MergeArea() const { return spatial_merge_size * spatial_merge_size; }
};

// Parses a vision_config object on its own (a tower checkpoint's config, e.g. the golden fixture). When
// `text_hidden_size` > 0, out_hidden_size must equal it.
Result<VisionConfig> ParseVisionConfig(std::string_view json_text, std::string_view source,
                                       int64_t text_hidden_size = 0);

// The tokens that carry an image in the text sequence, as config.json names them at its top level (HF:
// image_token_id is the placeholder whose embedding rows the tower's output replaces; image_start_token_id and
// image_end_token_id are the markers around an image's run of placeholders). -1: the config does not name it.
struct ImageTokenIds {
  int64_t image = -1;
  int64_t start = -1;
  int64_t end = -1;
};

struct ModelConfig {
  // Trunk.
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        // D
  int64_t num_hidden_layers = 0;  // trunk layers; the MTP layer is stored as layer index num_hidden_layers
  float rms_norm_eps = 1e-5f;
  int64_t max_position_embeddings = 0;         // NoPE: only a capacity hint
  std::vector<AttentionKind> attention_kinds;  // [num_hidden_layers]
  std::vector<MlpKind> mlp_kinds;              // [num_hidden_layers]

  // mHC residual streams (§4).
  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  float hc_eps = 1e-6f;

  // KDA (§5): heads × head_dim, short conv kernel, gate lower bound (a multiplier, pitfall 1).
  int64_t kda_num_heads = 0;
  int64_t kda_head_dim = 0;
  int64_t kda_conv_kernel = 4;
  float kda_gate_lower_bound = -5.0f;

  // NoPE MLA (§6).
  int64_t num_attention_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_head_dim = 0;  // == qk_nope_head_dim (qk_rope_head_dim must be 0)
  int64_t v_head_dim = 0;

  // KPool indexer (§7).
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;   // tokens; index_topk / index_kpool pools are selected
  int64_t index_kpool = 0;  // tokens per pool
  bool index_share_for_mtp_iteration = false;

  // FFN (§8).
  int64_t intermediate_size = 0;      // dense MLP
  int64_t moe_intermediate_size = 0;  // routed and shared experts (shared width × n_shared_experts)
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_shared_experts = 0;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  float swiglu_limit = 10.0f;

  // MTP (§10): 0 or 1 layer.
  int64_t num_nextn_predict_layers = 0;

  // Tokens.
  int64_t pad_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;

  // FP8 checkpoint (§9): block shape of `_scale_inv`, or 0×0 for an unquantized checkpoint.
  bool fp8 = false;
  int64_t fp8_block_rows = 0;
  int64_t fp8_block_cols = 0;

  VisionConfig vision;
  ImageTokenIds image_tokens;  // top-level image_token_id, image_start_token_id, image_end_token_id

  // Derived.
  int64_t IndexTopkPools() const { return index_topk / index_kpool; }
  // Width of HF's index output and the dense-regime bound: with at most this many visible tokens every token is
  // selected (index_topk + index_kpool − 1).
  int64_t DenseRegimeTokens() const { return index_topk + index_kpool - 1; }
  int64_t KdaWidth() const { return kda_num_heads * kda_head_dim; }
  int64_t SharedIntermediate() const { return moe_intermediate_size * n_shared_experts; }
  bool HasMtp() const { return num_nextn_predict_layers > 0; }
  int64_t MtpLayerIndex() const { return num_hidden_layers; }
  int NumLayersOf(AttentionKind kind) const;
  int NumLayersOf(MlpKind kind) const;
};

// Sampling defaults of the checkpoint (generation_config.json). Absent file or keys: HF's defaults.
struct GenerationConfig {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int64_t top_k = 0;  // 0 = off
  bool do_sample = true;
  std::vector<int64_t> eos_token_ids;  // falls back to the model config's list
};

// Parses config.json text. `source` names the file in error messages.
Result<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source = "config.json");
// `path` is a model directory (reads DIR/config.json) or a config file.
Result<ModelConfig> LoadModelConfig(const std::string& path);
Result<GenerationConfig> ParseGenerationConfig(std::string_view json_text, const ModelConfig& model,
                                               std::string_view source = "generation_config.json");
// Reads DIR/generation_config.json if present, else returns the defaults with the model's eos list.
Result<GenerationConfig> LoadGenerationConfig(const std::string& model_dir, const ModelConfig& model);

}  // namespace glint
