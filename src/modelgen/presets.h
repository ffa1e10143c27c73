// Presets of `glint make-tiny`: the hyperparameters of a tiny checkpoint of the real architecture, and the
// config.json / generation_config.json texts they produce (the release layout of model doc §1.2).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint {

struct TinyPreset {
  std::string name;
  std::string description;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;  // layer i is DSA when i % 4 == 3 (the release's 3 KDA : 1 DSA), else KDA
  int64_t first_k_dense_replace = 1;
  int64_t intermediate_size = 0;      // dense MLP
  int64_t moe_intermediate_size = 0;  // routed and shared experts
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_shared_experts = 1;
  int64_t kda_num_heads = 0;
  int64_t kda_head_dim = 0;
  int64_t num_attention_heads = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_head_dim = 0;  // = qk_nope_head_dim = v_head_dim (NoPE MLA)
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t index_kpool = 4;
  int64_t num_nextn_predict_layers = 0;  // MTP layer
  bool train_tokenizer = true;           // false: a byte-only BPE (bench: a 154880-token BPE is not the point)
  // The vision tower (docs/vision.md); patch 14, temporal patch 2 and merge 2 always, as released, so image
  // token counts are the release's. out_hidden_size = hidden_size.
  int64_t vision_depth = 1;
  int64_t vision_hidden_size = 32;
  int64_t vision_num_heads = 2;
  int64_t vision_intermediate_size = 64;
  int64_t vision_projection_intermediate_size = 128;
  int64_t vision_image_size = 28;  // informational (the processor's canvas rule decides the size)
};

// "default" (the embedded default model), "bench" (the real layer widths, 4 layers, several GB), "long-context"
// (tiny widths, 80 B of cache per token: the long-context boundary tests), "long-prefill" (the same with pools of
// 128 tokens: a 300k-token prefill through the CLI in tens of seconds), "expert-heavy" (routed experts ≈ 20× the
// rest: the --expert-memory peak-RSS test).
Result<TinyPreset> FindTinyPreset(std::string_view name);
std::vector<std::string> TinyPresetNames();

// Special tokens at the release's distance from the end of the vocabulary (model doc §11: ids relative to
// 154880). Returns (offset from the end, content) pairs; the id is vocab_size - offset.
struct SpecialTokenSlot {
  int64_t offset_from_end;
  std::string_view content;
};
const std::vector<SpecialTokenSlot>& GlmSpecialTokenSlots();

// The id of a special token in a vocabulary of `vocab_size` (e.g. "<|user|>" → vocab_size − 53).
Result<int64_t> GlmSpecialTokenId(std::string_view content, int64_t vocab_size);

std::string TinyConfigJson(const TinyPreset& preset);
std::string TinyGenerationConfigJson(const TinyPreset& preset);

}  // namespace glint
