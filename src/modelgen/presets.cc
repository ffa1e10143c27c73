#include "modelgen/presets.h"

#include <nlohmann/json.hpp>

namespace glint {
namespace {

using OrderedJson = nlohmann::ordered_json;

TinyPreset DefaultPreset() {
  TinyPreset p;
  p.name = "default";
  p.description = "the embedded default model: hidden 256, 8 layers (KDA KDA KDA DSA ×2), 16 experts top-4, MTP";
  p.vocab_size = 2048;
  p.hidden_size = 256;
  p.num_hidden_layers = 8;
  p.first_k_dense_replace = 1;
  p.intermediate_size = 768;
  p.moe_intermediate_size = 128;
  p.n_routed_experts = 16;
  p.num_experts_per_tok = 4;
  p.n_shared_experts = 1;
  p.kda_num_heads = 4;
  p.kda_head_dim = 64;
  p.num_attention_heads = 4;
  p.q_lora_rank = 128;
  p.kv_lora_rank = 64;
  p.qk_head_dim = 64;
  p.index_n_heads = 4;
  p.index_head_dim = 64;
  p.index_topk = 64;  // dense regime up to 64 + 4 − 1 = 67 visible tokens; the sparse path runs past that
  p.index_kpool = 4;
  p.num_nextn_predict_layers = 1;
  p.train_tokenizer = true;
  return p;
}

TinyPreset BenchPreset() {
  TinyPreset p;
  p.name = "bench";
  p.description = "the release's layer widths with 4 layers (3 KDA + 1 DSA) and 64 experts, no MTP; ~8.5 GB";
  p.vocab_size = 154880;
  p.hidden_size = 4096;
  p.num_hidden_layers = 4;
  p.first_k_dense_replace = 1;
  p.intermediate_size = 12288;
  p.moe_intermediate_size = 2048;
  p.n_routed_experts = 64;
  p.num_experts_per_tok = 8;
  p.n_shared_experts = 1;
  p.kda_num_heads = 64;
  p.kda_head_dim = 128;
  p.num_attention_heads = 64;
  p.q_lora_rank = 1536;
  p.kv_lora_rank = 512;
  p.qk_head_dim = 256;
  p.index_n_heads = 32;
  p.index_head_dim = 128;
  p.index_topk = 2048;
  p.index_kpool = 4;
  p.num_nextn_predict_layers = 0;
  p.train_tokenizer = false;
  // The release's tower (0.56 B parameters, BF16): `glint bench-vision` times it at real widths.
  p.vision_depth = 24;
  p.vision_hidden_size = 1024;
  p.vision_num_heads = 16;
  p.vision_intermediate_size = 4096;
  p.vision_projection_intermediate_size = 10240;
  p.vision_image_size = 448;
  return p;
}

// The release's vision tower with the smallest trunk its merger fits: the merger writes out_hidden_size = the text
// hidden size (4096), so the trunk keeps hidden 4096 but has one KDA layer with a dense MLP and a small vocabulary.
// ≈ 1.2 GB (the tower's 1.1 GB in BF16): `glint bench-vision` at release widths without bench's 8.5 GB trunk.
TinyPreset VisionBenchPreset() {
  TinyPreset p = BenchPreset();  // the tower and the attention widths
  p.name = "vision-bench";
  p.description = "the release's vision tower (24 x 1024) on a 1-layer trunk of hidden 4096, vocab 2048; ~1.2 GB";
  p.vocab_size = 2048;
  p.num_hidden_layers = 1;  // layer 0: KDA with the dense MLP (first_k_dense_replace = 1)
  p.intermediate_size = 1024;
  p.moe_intermediate_size = 256;  // no MoE layer is made; the config still needs valid MoE fields
  p.n_routed_experts = 4;
  p.num_experts_per_tok = 2;
  p.kda_num_heads = 4;
  return p;
}

// Widths so small that a cache of 2^20 positions is a few tens of MB and a 300k-token prefill takes seconds: for
// the long-context boundary tests (docs/long-context.md). The release's max_position_embeddings and kpool.
TinyPreset LongContextPreset() {
  TinyPreset p;
  p.name = "long-context";
  p.description = "tiny widths for long-context tests: hidden 32, 4 layers (3 KDA + 1 DSA), 80 B of cache per token";
  p.vocab_size = 512;
  p.hidden_size = 32;
  p.num_hidden_layers = 4;
  p.first_k_dense_replace = 1;
  p.intermediate_size = 64;
  p.moe_intermediate_size = 32;
  p.n_routed_experts = 4;
  p.num_experts_per_tok = 2;
  p.n_shared_experts = 1;
  p.kda_num_heads = 1;
  p.kda_head_dim = 16;
  p.num_attention_heads = 2;
  p.q_lora_rank = 16;
  p.kv_lora_rank = 16;
  p.qk_head_dim = 16;
  p.index_n_heads = 2;
  p.index_head_dim = 16;
  p.index_topk = 16;  // K = 4 pools of 4: sparse from position 19 on
  p.index_kpool = 4;
  p.num_nextn_predict_layers = 0;
  p.train_tokenizer = false;
  return p;
}

// The long-context preset with pools of 128 tokens: the indexer's work in a prefill of N tokens is
// Σ_p p / kpool ≈ N² / (2 · kpool) pool scores, so a 300k-token prefill through the CLI takes tens of seconds (the
// pool-index widths are tested with kpool 4 in tests/unit/long_context_test.cc).
TinyPreset LongPrefillPreset() {
  TinyPreset p = LongContextPreset();
  p.name = "long-prefill";
  p.description = "long-context with pools of 128 tokens (index_topk 256; --block-size 128): a fast 300k prefill";
  p.index_topk = 256;
  p.index_kpool = 128;
  return p;
}

// Routed experts ≈ 20× everything else (≈ 300 MB of int8 experts, ≈ 15 MB resident): big enough that routed experts
// leaking into the resident set under --expert-memory would show in the peak RSS (tests/cli/expert_rss.sh).
TinyPreset ExpertHeavyPreset() {
  TinyPreset p = DefaultPreset();  // its attention widths and vocabulary; fewer layers, far wider MoE
  p.name = "expert-heavy";
  p.description =
      "hidden 512, 4 layers (3 KDA + 1 DSA), 64 experts of width 1024 top-8: routed experts ≈ 300 MB of "
      "the ≈ 315 MB container";
  p.hidden_size = 512;
  p.num_hidden_layers = 4;
  p.intermediate_size = 1024;
  p.moe_intermediate_size = 1024;
  p.n_routed_experts = 64;
  p.num_experts_per_tok = 8;
  p.num_nextn_predict_layers = 0;
  p.train_tokenizer = false;
  return p;
}

bool IsDsaLayer(int64_t layer) { return layer % 4 == 3; }

}  // namespace

Result<TinyPreset> FindTinyPreset(std::string_view name) {
  if (name == "default") return DefaultPreset();
  if (name == "bench") return BenchPreset();
  if (name == "vision-bench") return VisionBenchPreset();
  if (name == "long-context") return LongContextPreset();
  if (name == "long-prefill") return LongPrefillPreset();
  if (name == "expert-heavy") return ExpertHeavyPreset();
  return InvalidArgument("unknown preset '", name,
                         "'; expected one of: default, bench, vision-bench, long-context, long-prefill, expert-heavy");
}

std::vector<std::string> TinyPresetNames() {
  return {"default", "bench", "vision-bench", "long-context", "long-prefill", "expert-heavy"};
}

const std::vector<SpecialTokenSlot>& GlmSpecialTokenSlots() {
  // Offsets from 154880. Verified in model doc §11: <|endoftext|> 60, [gMASK] 58, [sMASK] 57, <sop> 56,
  // <|system|> 54, <|user|> 53, <|assistant|> 52, <|observation|> 51, image/video begin/end 50–47, <think> 39,
  // </think> 38, <tool_call> 37, </tool_call> 36, <arg_key> 33 … </arg_value> 30, <|image|> 26, <|video|> 25.
  // The others ([MASK], <eop>, audio, transcription, code, <tool_response>, /nothink, box) fill the gaps in the
  // order of GLM-4.5's special-token list, which agrees with every verified id; they are unverified for 5.3.
  static const std::vector<SpecialTokenSlot> slots = {
      {60, "<|endoftext|>"},
      {59, "[MASK]"},
      {58, "[gMASK]"},
      {57, "[sMASK]"},
      {56, "<sop>"},
      {55, "<eop>"},
      {54, "<|system|>"},
      {53, "<|user|>"},
      {52, "<|assistant|>"},
      {51, "<|observation|>"},
      {50, "<|begin_of_image|>"},
      {49, "<|end_of_image|>"},
      {48, "<|begin_of_video|>"},
      {47, "<|end_of_video|>"},
      {46, "<|begin_of_audio|>"},
      {45, "<|end_of_audio|>"},
      {44, "<|begin_of_transcription|>"},
      {43, "<|end_of_transcription|>"},
      {42, "<|code_prefix|>"},
      {41, "<|code_middle|>"},
      {40, "<|code_suffix|>"},
      {39, "<think>"},
      {38, "</think>"},
      {37, "<tool_call>"},
      {36, "</tool_call>"},
      {35, "<tool_response>"},
      {34, "</tool_response>"},
      {33, "<arg_key>"},
      {32, "</arg_key>"},
      {31, "<arg_value>"},
      {30, "</arg_value>"},
      {29, "/nothink"},
      {28, "<|begin_of_box|>"},
      {27, "<|end_of_box|>"},
      {26, "<|image|>"},
      {25, "<|video|>"},
  };
  return slots;
}

Result<int64_t> GlmSpecialTokenId(std::string_view content, int64_t vocab_size) {
  for (const auto& slot : GlmSpecialTokenSlots()) {
    if (slot.content == content) return vocab_size - slot.offset_from_end;
  }
  return NotFound("'", content, "' is not one of GLM's special tokens");
}

// A data table more than a procedure: the layer lists, then one JSON literal with a line per config.json key (the
// release's key order), so it stays whole although it is longer than 80 lines (docs/design.md, "Code shape").
std::string TinyConfigJson(const TinyPreset& p) {
  const int64_t v = p.vocab_size;
  OrderedJson layer_types = OrderedJson::array();
  OrderedJson mlp_layer_types = OrderedJson::array();
  OrderedJson indexer_types = OrderedJson::array();
  OrderedJson kda_layers = OrderedJson::array();
  OrderedJson full_attn_layers = OrderedJson::array();
  for (int64_t i = 0; i < p.num_hidden_layers; ++i) {
    layer_types.push_back(IsDsaLayer(i) ? "deepseek_sparse_attention" : "linear_attention");
    (IsDsaLayer(i) ? full_attn_layers : kda_layers).push_back(i);
    mlp_layer_types.push_back(i < p.first_k_dense_replace ? "dense" : "sparse");
    indexer_types.push_back("full");
  }
  const OrderedJson eos = {v - 60, v - 53, v - 51};  // <|endoftext|>, <|user|>, <|observation|>
  OrderedJson text = {
      {"model_type", "glm5_next_text"},
      {"dtype", "bfloat16"},
      {"vocab_size", v},
      {"hidden_size", p.hidden_size},
      {"num_hidden_layers", p.num_hidden_layers},
      {"intermediate_size", p.intermediate_size},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"num_attention_heads", p.num_attention_heads},
      {"num_key_value_heads", p.num_attention_heads},
      {"q_lora_rank", p.q_lora_rank},
      {"kv_lora_rank", p.kv_lora_rank},
      {"qk_nope_head_dim", p.qk_head_dim},
      {"qk_rope_head_dim", 0},
      {"qk_head_dim", p.qk_head_dim},
      {"v_head_dim", p.qk_head_dim},
      {"head_dim", 0},
      {"mla_use_nope", true},
      {"attention_bias", false},
      {"index_n_heads", p.index_n_heads},
      {"index_head_dim", p.index_head_dim},
      {"index_topk", p.index_topk},
      {"index_kpool", p.index_kpool},
      {"index_kpool_compress", true},
      {"index_kpool_always_select_tail", true},
      {"indexer_types", indexer_types},
      {"indexer_rope_interleave", true},
      {"index_share_for_mtp_iteration", true},
      {"layer_types", layer_types},
      {"mlp_layer_types", mlp_layer_types},
      {"first_k_dense_replace", p.first_k_dense_replace},
      {"linear_attn_config",
       {{"num_heads", p.kda_num_heads},
        {"head_dim", p.kda_head_dim},
        {"short_conv_kernel_size", 4},
        {"gate_lower_bound", -5.0},
        {"kda_layers", kda_layers},
        {"full_attn_layers", full_attn_layers}}},
      {"n_routed_experts", p.n_routed_experts},
      {"num_experts_per_tok", p.num_experts_per_tok},
      {"n_shared_experts", p.n_shared_experts},
      {"scoring_func", "sigmoid"},
      {"topk_method", "noaux_tc"},
      {"moe_router_dtype", "float32"},
      {"n_group", 1},
      {"topk_group", 1},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 2.5},
      {"hidden_act", "silu"},
      {"swiglu_limit", 10.0},
      {"mhc", true},
      {"hc_mult", 4},
      {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-06},
      {"rms_norm_eps", 1e-05},
      {"max_position_embeddings", 1048576},
      {"num_nextn_predict_layers", p.num_nextn_predict_layers},
      {"tie_word_embeddings", false},
      {"pad_token_id", v - 60},
      {"eos_token_id", eos},
  };
  // The vision tower (docs/vision.md; its tensors follow the text ones in model.safetensors). out_hidden_size
  // matches the text hidden size, as in the release.
  OrderedJson vision = {
      {"model_type", "glm5_next_vision"},
      {"depth", p.vision_depth},
      {"hidden_size", p.vision_hidden_size},
      {"num_heads", p.vision_num_heads},
      {"intermediate_size", p.vision_intermediate_size},
      {"patch_size", 14},
      {"temporal_patch_size", 2},
      {"spatial_merge_size", 2},
      {"out_hidden_size", p.hidden_size},
      {"projection_intermediate_size", p.vision_projection_intermediate_size},
      {"image_size", p.vision_image_size},
      {"rms_norm_eps", 1e-05},
      {"swiglu_limit", 10.0},
      {"attention_bias", true},
      {"hidden_act", "silu"},
      {"in_channels", 3},
  };
  OrderedJson root = {
      {"architectures", {"Glm5NextForConditionalGeneration"}},
      {"model_type", "glm5_next"},
      {"tie_word_embeddings", false},
      {"image_token_id", v - 26},
      {"video_token_id", v - 25},
      {"image_start_token_id", v - 50},
      {"image_end_token_id", v - 49},
      {"video_start_token_id", v - 48},
      {"video_end_token_id", v - 47},
      {"quantization_config",
       {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}}},
      {"text_config", text},
      {"vision_config", vision},
  };
  return root.dump(2) + "\n";
}

std::string TinyGenerationConfigJson(const TinyPreset& p) {
  const int64_t v = p.vocab_size;
  OrderedJson root = {
      {"_from_model_config", false},
      {"do_sample", true},
      {"temperature", 1.0},
      {"top_p", 0.95},
      {"eos_token_id", {v - 60, v - 53, v - 51}},
      {"pad_token_id", v - 60},
  };
  return root.dump(2) + "\n";
}

}  // namespace glint
