#include "io/checkpoint_schema.h"

namespace glint {
namespace {

class SpecBuilder {
 public:
  explicit SpecBuilder(std::vector<TensorSpec>& out) : out_(out) {}
  void Add(std::string name, std::vector<int64_t> shape, TensorStorage storage, TensorGroup group, int layer = -1,
           int expert = -1) {
    out_.push_back({std::move(name), std::move(shape), storage, group, layer, expert});
  }

 private:
  std::vector<TensorSpec>& out_;
};

// NoPE MLA + KPool indexer under `prefix` + "self_attn.".
void AddDsa(SpecBuilder& add, const ModelConfig& c, const std::string& prefix, int layer, bool mtp) {
  const std::string p = prefix + "self_attn.";
  const TensorGroup mla = mtp ? TensorGroup::kMtp : TensorGroup::kMla;
  const TensorGroup indexer = mtp ? TensorGroup::kMtp : TensorGroup::kIndexer;
  const int64_t d = c.hidden_size;
  const int64_t heads = c.num_attention_heads;
  add.Add(p + "q_a_proj.weight", {c.q_lora_rank, d}, TensorStorage::kFp8Block, mla, layer);
  add.Add(p + "q_a_layernorm.weight", {c.q_lora_rank}, TensorStorage::kBf16, mla, layer);
  add.Add(p + "q_b_proj.weight", {heads * c.qk_head_dim, c.q_lora_rank}, TensorStorage::kFp8Block, mla, layer);
  add.Add(p + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank, d}, TensorStorage::kFp8Block, mla, layer);
  add.Add(p + "kv_a_layernorm.weight", {c.kv_lora_rank}, TensorStorage::kBf16, mla, layer);
  // kv_b_proj is BF16 in the release although the other MLA projections are FP8 (pitfall 11).
  add.Add(p + "kv_b_proj.weight", {heads * (c.qk_head_dim + c.v_head_dim), c.kv_lora_rank}, TensorStorage::kBf16, mla,
          layer);
  add.Add(p + "o_proj.weight", {d, heads * c.v_head_dim}, TensorStorage::kFp8Block, mla, layer);
  const std::string ip = p + "indexer.";
  add.Add(ip + "wq_b.weight", {c.index_n_heads * c.index_head_dim, c.q_lora_rank}, TensorStorage::kBf16, indexer,
          layer);
  add.Add(ip + "wk.weight", {c.index_head_dim, d}, TensorStorage::kBf16, indexer, layer);
  add.Add(ip + "k_norm.weight", {c.index_head_dim}, TensorStorage::kBf16, indexer, layer);
  add.Add(ip + "k_norm.bias", {c.index_head_dim}, TensorStorage::kBf16, indexer, layer);
  add.Add(ip + "weights_proj.weight", {c.index_n_heads, d}, TensorStorage::kBf16, indexer, layer);
  add.Add(ip + "index_kpool_compress_gate", {c.index_head_dim, d}, TensorStorage::kBf16, indexer, layer);
  add.Add(ip + "index_kpool_compress_ape", {c.index_kpool, c.index_head_dim}, TensorStorage::kBf16, indexer, layer);
}

void AddKda(SpecBuilder& add, const ModelConfig& c, const std::string& prefix, int layer) {
  const std::string p = prefix + "self_attn.";
  const int64_t d = c.hidden_size;
  const int64_t width = c.KdaWidth();   // heads × head_dim
  const int64_t rank = c.kda_head_dim;  // the low-rank gate projections are head_dim wide (128 in the release)
  const TensorGroup g = TensorGroup::kKda;
  for (const char* name : {"q_proj", "k_proj", "v_proj"}) {
    add.Add(p + name + ".weight", {width, d}, TensorStorage::kBf16, g, layer);
  }
  add.Add(p + "o_proj.weight", {d, width}, TensorStorage::kBf16, g, layer);
  add.Add(p + "f_a_proj.weight", {rank, d}, TensorStorage::kBf16, g, layer);
  add.Add(p + "f_b_proj.weight", {width, rank}, TensorStorage::kBf16, g, layer);
  add.Add(p + "g_a_proj.weight", {rank, d}, TensorStorage::kBf16, g, layer);
  add.Add(p + "g_b_proj.weight", {width, rank}, TensorStorage::kBf16, g, layer);
  add.Add(p + "b_proj.weight", {c.kda_num_heads, d}, TensorStorage::kBf16, g, layer);
  for (const char* name : {"q_conv1d", "k_conv1d", "v_conv1d"}) {
    add.Add(p + name + ".weight", {width, 1, c.kda_conv_kernel}, TensorStorage::kF32, g, layer);
  }
  add.Add(p + "A_log", {c.kda_num_heads}, TensorStorage::kF32, g, layer);
  add.Add(p + "dt_bias", {width}, TensorStorage::kF32, g, layer);
  add.Add(p + "o_norm.weight", {c.kda_head_dim}, TensorStorage::kBf16, g, layer);
}

void AddSwiGlu(SpecBuilder& add, const std::string& p, int64_t d, int64_t width, TensorGroup g, int layer,
               int expert = -1) {
  add.Add(p + "gate_proj.weight", {width, d}, TensorStorage::kFp8Block, g, layer, expert);
  add.Add(p + "up_proj.weight", {width, d}, TensorStorage::kFp8Block, g, layer, expert);
  add.Add(p + "down_proj.weight", {d, width}, TensorStorage::kFp8Block, g, layer, expert);
}

void AddMoe(SpecBuilder& add, const ModelConfig& c, const std::string& prefix, int layer, bool mtp) {
  const std::string p = prefix + "mlp.";
  const int64_t d = c.hidden_size;
  const TensorGroup router = mtp ? TensorGroup::kMtp : TensorGroup::kRouterMhcNorms;
  add.Add(p + "gate.weight", {c.n_routed_experts, d}, TensorStorage::kBf16, router, layer);
  add.Add(p + "gate.e_score_correction_bias", {c.n_routed_experts}, TensorStorage::kF32, router, layer);
  if (c.n_shared_experts > 0) {
    AddSwiGlu(add, p + "shared_experts.", d, c.SharedIntermediate(),
              mtp ? TensorGroup::kMtp : TensorGroup::kSharedExperts, layer);
  }
  for (int e = 0; e < c.n_routed_experts; ++e) {
    AddSwiGlu(add, p + "experts." + std::to_string(e) + ".", d, c.moe_intermediate_size,
              mtp ? TensorGroup::kMtp : TensorGroup::kRoutedExperts, layer, e);
  }
}

}  // namespace

std::string_view TensorGroupName(TensorGroup group) {
  switch (group) {
    case TensorGroup::kEmbedding:
      return "embed + lm_head";
    case TensorGroup::kKda:
      return "KDA";
    case TensorGroup::kMla:
      return "MLA";
    case TensorGroup::kIndexer:
      return "DSA indexer";
    case TensorGroup::kDenseMlp:
      return "dense MLP";
    case TensorGroup::kRoutedExperts:
      return "routed experts";
    case TensorGroup::kSharedExperts:
      return "shared experts";
    case TensorGroup::kRouterMhcNorms:
      return "router + mHC + norms";
    case TensorGroup::kMtp:
      return "MTP layer";
    case TensorGroup::kVision:
      return "vision";
  }
  return "?";
}

std::string LayerPrefix(int64_t layer) {
  return std::string(kLanguageModelPrefix) + "layers." + std::to_string(layer) + ".";
}

std::vector<TensorSpec> ExpectedTensors(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  SpecBuilder add(specs);
  const std::string top(kLanguageModelPrefix);
  const int64_t d = c.hidden_size;
  const int64_t mix = (2 + c.hc_mult) * c.hc_mult;  // pre (hc) + post (hc) + comb (hc × hc) = 24 for hc_mult 4
  add.Add(top + "embed_tokens.weight", {c.vocab_size, d}, TensorStorage::kBf16, TensorGroup::kEmbedding);
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = LayerPrefix(layer);
    const TensorGroup misc = TensorGroup::kRouterMhcNorms;
    add.Add(p + "input_layernorm.weight", {d}, TensorStorage::kBf16, misc, layer);
    add.Add(p + "post_attention_layernorm.weight", {d}, TensorStorage::kBf16, misc, layer);
    for (const char* site : {"hc_attn_", "hc_ffn_"}) {
      add.Add(p + site + "fn", {mix, c.hc_mult * d}, TensorStorage::kF32, misc, layer);
      add.Add(p + site + "base", {mix}, TensorStorage::kF32, misc, layer);
      add.Add(p + site + "scale", {3}, TensorStorage::kF32, misc, layer);
    }
    if (c.attention_kinds[layer] == AttentionKind::kKda) {
      AddKda(add, c, p, layer);
    } else {
      AddDsa(add, c, p, layer, /*mtp=*/false);
    }
    if (c.mlp_kinds[layer] == MlpKind::kDense) {
      AddSwiGlu(add, p + "mlp.", d, c.intermediate_size, TensorGroup::kDenseMlp, layer);
    } else {
      AddMoe(add, c, p, layer, /*mtp=*/false);
    }
  }
  if (c.HasMtp()) {
    const int layer = static_cast<int>(c.MtpLayerIndex());
    const std::string p = LayerPrefix(layer);
    const TensorGroup g = TensorGroup::kMtp;
    add.Add(p + "eh_proj.weight", {d, 2 * d}, TensorStorage::kBf16, g, layer);
    for (const char* norm : {"enorm.weight", "hnorm.weight", "shared_head.norm.weight", "input_layernorm.weight",
                             "post_attention_layernorm.weight"}) {
      add.Add(p + norm, {d}, TensorStorage::kBf16, g, layer);
    }
    AddDsa(add, c, p, layer, /*mtp=*/true);
    AddMoe(add, c, p, layer, /*mtp=*/true);
  }
  add.Add(top + "norm.weight", {d}, TensorStorage::kBf16, TensorGroup::kRouterMhcNorms);
  add.Add("lm_head.weight", {c.vocab_size, d}, TensorStorage::kBf16, TensorGroup::kEmbedding);
  return specs;
}

std::vector<int64_t> ScaleShape(const std::vector<int64_t>& shape, int64_t block_rows, int64_t block_cols) {
  return {(shape[0] + block_rows - 1) / block_rows, (shape[1] + block_cols - 1) / block_cols};
}

bool IsVisionTensorName(std::string_view name) {
  return name.starts_with("model.visual.") || name.starts_with("visual.");
}

}  // namespace glint
