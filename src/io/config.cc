#include "io/config.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "base/file.h"
#include "base/json_depth.h"

namespace glint {
namespace {

using Json = nlohmann::json;

// The largest value a config size may have: several times the largest open checkpoints (GLM-5.3: 6144 wide,
// 288 experts, 80 layers; the largest open MoE models: 384 experts, 7168 wide, 154k vocabularies). Keys not
// listed are dimensions capped at 2^20.
int64_t LargestPlausible(std::string_view key) {
  static const std::map<std::string_view, int64_t> kLargest = {
      {"vocab_size", int64_t{1} << 21},  // = kMaxTokenizerVocabSize
      {"hidden_size", int64_t{1} << 16},
      {"num_hidden_layers", 1024},
      {"max_position_embeddings", int64_t{1} << 24},
      {"hc_mult", 16},
      {"hc_sinkhorn_iters", 1000},
      {"num_attention_heads", 1024},
      {"num_key_value_heads", 1024},
      {"num_heads", 1024},
      {"linear_num_heads", 1024},
      {"index_n_heads", 1024},
      {"head_dim", 4096},
      {"linear_head_dim", 4096},
      {"qk_nope_head_dim", 4096},
      {"qk_head_dim", 4096},
      {"v_head_dim", 4096},
      {"index_head_dim", 4096},
      {"short_conv_kernel_size", 64},
      {"linear_conv_kernel_dim", 64},
      {"q_lora_rank", int64_t{1} << 16},
      {"kv_lora_rank", int64_t{1} << 16},
      {"index_kpool", 4096},
      {"moe_intermediate_size", int64_t{1} << 18},
      {"n_routed_experts", 4096},
      {"depth", 1024},
      {"in_channels", 16},
      {"patch_size", 1024},
      {"temporal_patch_size", 64},
      {"spatial_merge_size", 64},
  };
  const auto it = kLargest.find(key);
  return it == kLargest.end() ? int64_t{1} << 20 : it->second;
}

// Typed access to one JSON object with errors that name the file, the key, what was found and what was expected.
class ObjectReader {
 public:
  ObjectReader(const Json& object, std::string context) : object_(object), context_(std::move(context)) {}

  bool Has(const char* key) const { return object_.contains(key) && !object_.at(key).is_null(); }
  const Json* Get(const char* key) const { return Has(key) ? &object_.at(key) : nullptr; }

  Result<int64_t> Int(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const Json* value = Get(key);
    if (value == nullptr) {
      if (fallback) return *fallback;
      return Missing(key, "an integer");
    }
    if (!value->is_number_integer()) return WrongType(key, *value, "an integer");
    return value->get<int64_t>();
  }
  // A positive integer no larger than any real checkpoint could have (LargestPlausible): a hostile or corrupt
  // config is refused here, before anything is sized from it.
  Result<int64_t> PositiveInt(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    GLINT_ASSIGN_OR_RETURN(int64_t value, Int(key, fallback));
    const int64_t largest = LargestPlausible(key);
    if (value <= 0) return InvalidArgument(context_, ": '", key, "' is ", value, "; expected a positive integer");
    if (value > largest) {
      return InvalidArgument(context_, ": '", key, "' is ", value, "; expected at most ", largest,
                             " (far beyond any real checkpoint; the file is corrupt or hostile)");
    }
    return value;
  }
  Result<float> Float(const char* key, std::optional<float> fallback = std::nullopt) const {
    const Json* value = Get(key);
    if (value == nullptr) {
      if (fallback) return *fallback;
      return Missing(key, "a number");
    }
    if (!value->is_number()) return WrongType(key, *value, "a number");
    return value->get<float>();
  }
  Result<bool> Bool(const char* key, std::optional<bool> fallback = std::nullopt) const {
    const Json* value = Get(key);
    if (value == nullptr) {
      if (fallback) return *fallback;
      return Missing(key, "true or false");
    }
    if (!value->is_boolean()) return WrongType(key, *value, "true or false");
    return value->get<bool>();
  }
  Result<std::string> String(const char* key, std::optional<std::string> fallback = std::nullopt) const {
    const Json* value = Get(key);
    if (value == nullptr) {
      if (fallback) return *fallback;
      return Missing(key, "a string");
    }
    if (!value->is_string()) return WrongType(key, *value, "a string");
    return value->get<std::string>();
  }
  Result<std::vector<int64_t>> IntList(const char* key) const {
    const Json* value = Get(key);
    if (value == nullptr) return Missing(key, "a list of integers");
    if (!value->is_array()) return WrongType(key, *value, "a list of integers");
    std::vector<int64_t> out;
    for (const Json& item : *value) {
      if (!item.is_number_integer()) return WrongType(key, *value, "a list of integers");
      out.push_back(item.get<int64_t>());
    }
    return out;
  }
  Result<std::vector<std::string>> StringList(const char* key) const {
    const Json* value = Get(key);
    if (value == nullptr) return Missing(key, "a list of strings");
    if (!value->is_array()) return WrongType(key, *value, "a list of strings");
    std::vector<std::string> out;
    for (const Json& item : *value) {
      if (!item.is_string()) return WrongType(key, *value, "a list of strings");
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  // An integer or a list of integers (eos_token_id).
  Result<std::vector<int64_t>> IntOrIntList(const char* key) const {
    const Json* value = Get(key);
    if (value == nullptr) return std::vector<int64_t>{};
    if (value->is_number_integer()) return std::vector<int64_t>{value->get<int64_t>()};
    return IntList(key);
  }

  Status Invalid(const char* key, const std::string& found, const std::string& expected) const {
    return InvalidArgument(context_, ": '", key, "' is ", found, "; expected ", expected);
  }
  Status Unsupported(const char* key, const std::string& found, const std::string& supported) const {
    return Unimplemented(context_, ": '", key, "' is ", found, "; glint supports only ", supported);
  }
  const std::string& context() const { return context_; }

 private:
  Status Missing(const char* key, const char* expected) const {
    return InvalidArgument(context_, ": missing '", key, "' (expected ", expected, ")");
  }
  Status WrongType(const char* key, const Json& value, const char* expected) const {
    std::string shown = value.dump();
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    return InvalidArgument(context_, ": '", key, "' is ", shown, "; expected ", expected);
  }

  const Json& object_;
  std::string context_;
};

std::string ListString(const std::vector<int64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]);
  return text + "]";
}

// Attention kinds: layer_types is authoritative; linear_attn_config's redundant lists must agree with it.
Status ReadAttentionKinds(const ObjectReader& text, ModelConfig& config) {
  const int64_t layers = config.num_hidden_layers;
  GLINT_ASSIGN_OR_RETURN(std::vector<std::string> layer_types, text.StringList("layer_types"));
  if (static_cast<int64_t>(layer_types.size()) != layers) {
    return text.Invalid("layer_types", StrCat(layer_types.size(), " entries"),
                        StrCat("one entry per layer (num_hidden_layers = ", layers, ")"));
  }
  for (int64_t i = 0; i < layers; ++i) {
    if (layer_types[i] == "linear_attention") {
      config.attention_kinds.push_back(AttentionKind::kKda);
    } else if (layer_types[i] == "deepseek_sparse_attention") {
      config.attention_kinds.push_back(AttentionKind::kDsa);
    } else {
      return text.Invalid("layer_types", StrCat("'", layer_types[i], "' at layer ", i),
                          "'linear_attention' or 'deepseek_sparse_attention'");
    }
  }
  // The redundant lists in linear_attn_config, 0-based (pitfall 16), must agree when present.
  if (const Json* linear = text.Get("linear_attn_config")) {
    ObjectReader reader(*linear, text.context() + " linear_attn_config");
    std::vector<int64_t> expected_kda, expected_full;
    for (int64_t i = 0; i < layers; ++i) {
      (config.attention_kinds[i] == AttentionKind::kKda ? expected_kda : expected_full).push_back(i);
    }
    if (reader.Has("kda_layers")) {
      GLINT_ASSIGN_OR_RETURN(auto kda_layers, reader.IntList("kda_layers"));
      if (kda_layers != expected_kda) {
        return reader.Invalid("kda_layers", ListString(kda_layers),
                              StrCat(ListString(expected_kda), " (0-based, from layer_types)"));
      }
    }
    if (reader.Has("full_attn_layers")) {
      GLINT_ASSIGN_OR_RETURN(auto full_layers, reader.IntList("full_attn_layers"));
      if (full_layers != expected_full) {
        return reader.Invalid("full_attn_layers", ListString(full_layers),
                              StrCat(ListString(expected_full), " (0-based, from layer_types)"));
      }
    }
  }
  return Status::Ok();
}

// MLP kinds: mlp_layer_types, else first_k_dense_replace, else HF's default of 3 dense layers.
Status ReadMlpKinds(const ObjectReader& text, ModelConfig& config) {
  const int64_t layers = config.num_hidden_layers;
  std::optional<int64_t> first_dense;
  if (text.Has("first_k_dense_replace")) {
    GLINT_ASSIGN_OR_RETURN(int64_t value, text.Int("first_k_dense_replace"));
    if (value < 0 || value > layers) {
      return text.Invalid("first_k_dense_replace", std::to_string(value), StrCat("0..", layers));
    }
    first_dense = value;
  }
  if (text.Has("mlp_layer_types")) {
    GLINT_ASSIGN_OR_RETURN(std::vector<std::string> mlp_types, text.StringList("mlp_layer_types"));
    if (static_cast<int64_t>(mlp_types.size()) != layers) {
      return text.Invalid("mlp_layer_types", StrCat(mlp_types.size(), " entries"),
                          StrCat("one entry per layer (num_hidden_layers = ", layers, ")"));
    }
    for (int64_t i = 0; i < layers; ++i) {
      if (mlp_types[i] == "dense") {
        config.mlp_kinds.push_back(MlpKind::kDense);
      } else if (mlp_types[i] == "sparse") {
        config.mlp_kinds.push_back(MlpKind::kMoe);
      } else {
        return text.Invalid("mlp_layer_types", StrCat("'", mlp_types[i], "' at layer ", i), "'dense' or 'sparse'");
      }
    }
    if (first_dense) {
      for (int64_t i = 0; i < layers; ++i) {
        const MlpKind implied = i < *first_dense ? MlpKind::kDense : MlpKind::kMoe;
        if (config.mlp_kinds[i] != implied) {
          return text.Invalid("mlp_layer_types", StrCat("'", mlp_types[i], "' at layer ", i),
                              StrCat("agreement with first_k_dense_replace = ", *first_dense));
        }
      }
    }
  } else {
    const int64_t dense = first_dense.value_or(std::min<int64_t>(3, layers));
    for (int64_t i = 0; i < layers; ++i) config.mlp_kinds.push_back(i < dense ? MlpKind::kDense : MlpKind::kMoe);
  }
  return Status::Ok();
}

Status ReadLayerKinds(const ObjectReader& text, ModelConfig& config) {
  GLINT_RETURN_IF_ERROR(ReadAttentionKinds(text, config));
  GLINT_RETURN_IF_ERROR(ReadMlpKinds(text, config));
  // Shared indexers are not in the release and HF's propagation is broken for interleaved KDA layers (§7.6).
  if (text.Has("indexer_types")) {
    GLINT_ASSIGN_OR_RETURN(std::vector<std::string> indexer_types, text.StringList("indexer_types"));
    for (size_t i = 0; i < indexer_types.size(); ++i) {
      if (indexer_types[i] != "full") {
        return text.Unsupported("indexer_types", StrCat("'", indexer_types[i], "' at layer ", i),
                                "'full' (every DSA layer runs its own indexer, as in the release)");
      }
    }
  }
  return Status::Ok();
}

Status ReadKdaConfig(const ObjectReader& text, ModelConfig& config) {
  // Nested linear_attn_config (release) or HF's flattened linear_* keys; both must agree when both are present.
  std::optional<ObjectReader> nested;
  if (const Json* linear = text.Get("linear_attn_config")) {
    if (!linear->is_object()) return text.Invalid("linear_attn_config", linear->dump(), "an object");
    nested.emplace(*linear, text.context() + " linear_attn_config");
  }
  struct Field {
    const char* nested_key;
    const char* flat_key;
    int64_t* target;
  };
  const Field fields[] = {{"num_heads", "linear_num_heads", &config.kda_num_heads},
                          {"head_dim", "linear_head_dim", &config.kda_head_dim},
                          {"short_conv_kernel_size", "linear_conv_kernel_dim", &config.kda_conv_kernel}};
  for (const Field& field : fields) {
    std::optional<int64_t> nested_value, flat_value;
    if (nested && nested->Has(field.nested_key)) {
      GLINT_ASSIGN_OR_RETURN(nested_value, nested->PositiveInt(field.nested_key));
    }
    if (text.Has(field.flat_key)) {
      GLINT_ASSIGN_OR_RETURN(flat_value, text.PositiveInt(field.flat_key));
    }
    if (nested_value && flat_value && *nested_value != *flat_value) {
      return text.Invalid(field.flat_key, std::to_string(*flat_value),
                          StrCat(*nested_value, " (linear_attn_config.", field.nested_key, ")"));
    }
    if (!nested_value && !flat_value) {
      if (config.NumLayersOf(AttentionKind::kKda) == 0) continue;
      return InvalidArgument(text.context(), ": missing linear_attn_config.", field.nested_key, " (or ", field.flat_key,
                             ")");
    }
    *field.target = nested_value ? *nested_value : *flat_value;
  }
  std::optional<float> bound;
  if (nested && nested->Has("gate_lower_bound")) {
    GLINT_ASSIGN_OR_RETURN(bound, nested->Float("gate_lower_bound"));
  } else if (text.Has("linear_lower_bound")) {
    GLINT_ASSIGN_OR_RETURN(bound, text.Float("linear_lower_bound"));
  }
  if (!bound && config.NumLayersOf(AttentionKind::kKda) > 0) {
    // Without a lower bound HF uses the unsafe −exp(A_log)·softplus gate, which the release does not (§5.1).
    return Unimplemented(text.context(), ": linear_attn_config.gate_lower_bound is missing; glint supports only the ",
                         "safe gate lower_bound·sigmoid(...) of the release");
  }
  if (bound) {
    if (!(*bound < 0)) return text.Invalid("gate_lower_bound", std::to_string(*bound), "a negative number");
    config.kda_gate_lower_bound = *bound;
  }
  return Status::Ok();
}

// mHC: the residual streams and their Sinkhorn projection.
Status ReadMhcConfig(const ObjectReader& text, ModelConfig& config) {
  GLINT_ASSIGN_OR_RETURN(bool mhc, text.Bool("mhc", true));
  if (!mhc) return text.Unsupported("mhc", "false", "true (four manifold-constrained residual streams)");
  GLINT_ASSIGN_OR_RETURN(config.hc_mult, text.PositiveInt("hc_mult", 4));
  GLINT_ASSIGN_OR_RETURN(config.hc_sinkhorn_iters, text.PositiveInt("hc_sinkhorn_iters", 20));
  GLINT_ASSIGN_OR_RETURN(config.hc_eps, text.Float("hc_eps", 1e-6f));
  if (!(config.hc_eps >= 0)) return text.Invalid("hc_eps", std::to_string(config.hc_eps), ">= 0");
  return Status::Ok();
}

// NoPE MLA.
Status ReadMlaConfig(const ObjectReader& text, ModelConfig& config) {
  GLINT_ASSIGN_OR_RETURN(config.num_attention_heads, text.PositiveInt("num_attention_heads"));
  GLINT_ASSIGN_OR_RETURN(int64_t kv_heads, text.PositiveInt("num_key_value_heads", config.num_attention_heads));
  if (kv_heads != config.num_attention_heads) {
    return text.Invalid("num_key_value_heads", std::to_string(kv_heads),
                        StrCat(config.num_attention_heads, " (MLA expands the latent to every head)"));
  }
  GLINT_ASSIGN_OR_RETURN(config.q_lora_rank, text.PositiveInt("q_lora_rank"));
  GLINT_ASSIGN_OR_RETURN(config.kv_lora_rank, text.PositiveInt("kv_lora_rank"));
  GLINT_ASSIGN_OR_RETURN(int64_t rope_dim, text.Int("qk_rope_head_dim", 0));
  if (rope_dim != 0) {
    return text.Unsupported("qk_rope_head_dim", std::to_string(rope_dim), "0 (GLM-5.3-Flash has no RoPE)");
  }
  GLINT_ASSIGN_OR_RETURN(int64_t nope_dim, text.PositiveInt("qk_nope_head_dim"));
  GLINT_ASSIGN_OR_RETURN(config.qk_head_dim, text.PositiveInt("qk_head_dim", nope_dim));
  if (config.qk_head_dim != nope_dim + rope_dim) {
    return text.Invalid("qk_head_dim", std::to_string(config.qk_head_dim),
                        StrCat("qk_nope_head_dim + qk_rope_head_dim = ", nope_dim + rope_dim));
  }
  GLINT_ASSIGN_OR_RETURN(config.v_head_dim, text.PositiveInt("v_head_dim"));
  GLINT_ASSIGN_OR_RETURN(bool use_nope, text.Bool("mla_use_nope", true));
  if (!use_nope) return text.Unsupported("mla_use_nope", "false", "true");
  GLINT_ASSIGN_OR_RETURN(bool attention_bias, text.Bool("attention_bias", false));
  if (attention_bias) return text.Unsupported("attention_bias", "true", "false");
  return Status::Ok();
}

// Indexer. index_kpool has no default on purpose: HF's default (16) differs from the release (4), pitfall 8.
Status ReadIndexerConfig(const ObjectReader& text, ModelConfig& config) {
  GLINT_ASSIGN_OR_RETURN(config.index_n_heads, text.PositiveInt("index_n_heads"));
  GLINT_ASSIGN_OR_RETURN(config.index_head_dim, text.PositiveInt("index_head_dim"));
  GLINT_ASSIGN_OR_RETURN(config.index_topk, text.PositiveInt("index_topk"));
  GLINT_ASSIGN_OR_RETURN(config.index_kpool, text.PositiveInt("index_kpool"));
  if (config.index_topk % config.index_kpool != 0) {
    return text.Invalid("index_topk", std::to_string(config.index_topk),
                        StrCat("a multiple of index_kpool = ", config.index_kpool));
  }
  GLINT_ASSIGN_OR_RETURN(bool compress, text.Bool("index_kpool_compress", true));
  if (!compress) return text.Unsupported("index_kpool_compress", "false", "true (HF always pools)");
  GLINT_ASSIGN_OR_RETURN(bool tail, text.Bool("index_kpool_always_select_tail", true));
  if (!tail) return text.Unsupported("index_kpool_always_select_tail", "false", "true");
  GLINT_ASSIGN_OR_RETURN(config.index_share_for_mtp_iteration, text.Bool("index_share_for_mtp_iteration", false));
  return Status::Ok();
}

// FFN: the dense MLP and the MoE (router, routed and shared experts).
Status ReadFfnConfig(const ObjectReader& text, ModelConfig& config) {
  GLINT_ASSIGN_OR_RETURN(config.intermediate_size, text.PositiveInt("intermediate_size"));
  GLINT_ASSIGN_OR_RETURN(config.moe_intermediate_size, text.PositiveInt("moe_intermediate_size"));
  GLINT_ASSIGN_OR_RETURN(config.n_routed_experts, text.PositiveInt("n_routed_experts"));
  GLINT_ASSIGN_OR_RETURN(config.num_experts_per_tok, text.PositiveInt("num_experts_per_tok"));
  if (config.num_experts_per_tok > config.n_routed_experts) {
    return text.Invalid("num_experts_per_tok", std::to_string(config.num_experts_per_tok),
                        StrCat("at most n_routed_experts = ", config.n_routed_experts));
  }
  GLINT_ASSIGN_OR_RETURN(config.n_shared_experts, text.Int("n_shared_experts", 1));
  if (config.n_shared_experts < 0 || config.n_shared_experts > 64) {
    return text.Invalid("n_shared_experts", std::to_string(config.n_shared_experts), "0 .. 64");
  }
  GLINT_ASSIGN_OR_RETURN(config.norm_topk_prob, text.Bool("norm_topk_prob", true));
  GLINT_ASSIGN_OR_RETURN(config.routed_scaling_factor, text.Float("routed_scaling_factor", 1.0f));
  GLINT_ASSIGN_OR_RETURN(config.swiglu_limit, text.Float("swiglu_limit", 10.0f));
  if (!(config.swiglu_limit > 0)) return text.Invalid("swiglu_limit", std::to_string(config.swiglu_limit), "> 0");
  GLINT_ASSIGN_OR_RETURN(std::string scoring, text.String("scoring_func", "sigmoid"));
  if (scoring != "sigmoid") return text.Unsupported("scoring_func", "'" + scoring + "'", "'sigmoid'");
  GLINT_ASSIGN_OR_RETURN(std::string topk_method, text.String("topk_method", "noaux_tc"));
  if (topk_method != "noaux_tc") return text.Unsupported("topk_method", "'" + topk_method + "'", "'noaux_tc'");
  GLINT_ASSIGN_OR_RETURN(int64_t n_group, text.PositiveInt("n_group", 1));
  GLINT_ASSIGN_OR_RETURN(int64_t topk_group, text.PositiveInt("topk_group", 1));
  if (n_group != 1 || topk_group != 1) {
    return text.Unsupported("n_group/topk_group", StrCat(n_group, "/", topk_group), "1/1 (as in the release)");
  }
  GLINT_ASSIGN_OR_RETURN(std::string act, text.String("hidden_act", "silu"));
  if (act != "silu") return text.Unsupported("hidden_act", "'" + act + "'", "'silu'");
  return Status::Ok();
}

// The MTP layer and the special token ids.
Status ReadMtpAndTokenIds(const ObjectReader& text, ModelConfig& config) {
  GLINT_ASSIGN_OR_RETURN(config.num_nextn_predict_layers, text.Int("num_nextn_predict_layers", 0));
  if (config.num_nextn_predict_layers < 0 || config.num_nextn_predict_layers > 1) {
    return text.Unsupported("num_nextn_predict_layers", std::to_string(config.num_nextn_predict_layers), "0 or 1");
  }

  // Tokens.
  GLINT_ASSIGN_OR_RETURN(bool tie, text.Bool("tie_word_embeddings", false));
  if (tie) return text.Unsupported("tie_word_embeddings", "true", "false (the release has its own lm_head)");
  GLINT_ASSIGN_OR_RETURN(config.pad_token_id, text.Int("pad_token_id", -1));
  GLINT_ASSIGN_OR_RETURN(config.eos_token_ids, text.IntOrIntList("eos_token_id"));
  if (text.Has("bos_token_id")) {
    GLINT_ASSIGN_OR_RETURN(int64_t bos, text.Int("bos_token_id"));
    config.bos_token_id = bos;
  }
  auto check_id = [&](const char* key, int64_t id) -> Status {
    if (id < 0 || id >= config.vocab_size) {
      return text.Invalid(key, std::to_string(id), StrCat("a token id in [0, ", config.vocab_size, ")"));
    }
    return Status::Ok();
  };
  if (config.pad_token_id != -1) GLINT_RETURN_IF_ERROR(check_id("pad_token_id", config.pad_token_id));
  for (int64_t id : config.eos_token_ids) GLINT_RETURN_IF_ERROR(check_id("eos_token_id", id));
  if (config.bos_token_id) GLINT_RETURN_IF_ERROR(check_id("bos_token_id", *config.bos_token_id));
  return Status::Ok();
}

Status ReadText(const ObjectReader& text, ModelConfig& config) {
  if (text.Has("model_type")) {
    GLINT_ASSIGN_OR_RETURN(std::string model_type, text.String("model_type"));
    if (model_type != "glm5_next_text" && model_type != "glm5_next") {
      return text.Unsupported("model_type", "'" + model_type + "'", "'glm5_next_text' (GLM-5.3-Flash)");
    }
  }
  GLINT_ASSIGN_OR_RETURN(config.vocab_size, text.PositiveInt("vocab_size"));
  GLINT_ASSIGN_OR_RETURN(config.hidden_size, text.PositiveInt("hidden_size"));
  GLINT_ASSIGN_OR_RETURN(config.num_hidden_layers, text.PositiveInt("num_hidden_layers"));
  GLINT_ASSIGN_OR_RETURN(config.rms_norm_eps, text.Float("rms_norm_eps", 1e-5f));
  if (!(config.rms_norm_eps > 0)) return text.Invalid("rms_norm_eps", std::to_string(config.rms_norm_eps), "> 0");
  GLINT_ASSIGN_OR_RETURN(config.max_position_embeddings, text.PositiveInt("max_position_embeddings", 1048576));
  GLINT_RETURN_IF_ERROR(ReadLayerKinds(text, config));
  GLINT_RETURN_IF_ERROR(ReadMhcConfig(text, config));
  GLINT_RETURN_IF_ERROR(ReadKdaConfig(text, config));
  GLINT_RETURN_IF_ERROR(ReadMlaConfig(text, config));
  GLINT_RETURN_IF_ERROR(ReadIndexerConfig(text, config));
  GLINT_RETURN_IF_ERROR(ReadFfnConfig(text, config));
  GLINT_RETURN_IF_ERROR(ReadMtpAndTokenIds(text, config));
  return Status::Ok();
}

// vision_config (docs/vision.md). Only what the tower implements is accepted: SiLU gates, a head_dim the 2D rotary
// can split (a multiple of 4), and an out_hidden_size equal to the text width when that is known.
Status ReadVision(const Json& vision_json, const std::string& context, int64_t text_hidden_size, VisionConfig& vision) {
  if (!vision_json.is_object()) return InvalidArgument(context, ": vision_config is not an object");
  ObjectReader reader(vision_json, context + " vision_config");
  vision.present = true;
  GLINT_ASSIGN_OR_RETURN(vision.depth, reader.PositiveInt("depth"));
  GLINT_ASSIGN_OR_RETURN(vision.hidden_size, reader.PositiveInt("hidden_size"));
  GLINT_ASSIGN_OR_RETURN(vision.num_heads, reader.PositiveInt("num_heads"));
  GLINT_ASSIGN_OR_RETURN(vision.intermediate_size, reader.PositiveInt("intermediate_size"));
  GLINT_ASSIGN_OR_RETURN(vision.patch_size, reader.PositiveInt("patch_size"));
  GLINT_ASSIGN_OR_RETURN(vision.temporal_patch_size, reader.PositiveInt("temporal_patch_size", 2));
  GLINT_ASSIGN_OR_RETURN(vision.spatial_merge_size, reader.PositiveInt("spatial_merge_size", 2));
  GLINT_ASSIGN_OR_RETURN(vision.out_hidden_size, reader.PositiveInt("out_hidden_size"));
  GLINT_ASSIGN_OR_RETURN(vision.projection_intermediate_size,
                         reader.PositiveInt("projection_intermediate_size", vision.intermediate_size));
  GLINT_ASSIGN_OR_RETURN(vision.in_channels, reader.PositiveInt("in_channels", 3));
  GLINT_ASSIGN_OR_RETURN(vision.attention_bias, reader.Bool("attention_bias", false));
  GLINT_ASSIGN_OR_RETURN(vision.rms_norm_eps, reader.Float("rms_norm_eps", 1e-5f));
  if (!(vision.rms_norm_eps > 0 && vision.rms_norm_eps < 1)) {
    return reader.Invalid("rms_norm_eps", std::to_string(vision.rms_norm_eps), "a number in (0, 1)");
  }
  // Required: HF's Glm5NextVisionMLP and merger read it unconditionally.
  GLINT_ASSIGN_OR_RETURN(vision.swiglu_limit, reader.Float("swiglu_limit"));
  if (!(vision.swiglu_limit > 0 && std::isfinite(vision.swiglu_limit))) {
    return reader.Invalid("swiglu_limit", std::to_string(vision.swiglu_limit), "a finite number > 0");
  }
  GLINT_ASSIGN_OR_RETURN(std::string act, reader.String("hidden_act", "silu"));
  if (act != "silu") return reader.Unsupported("hidden_act", "'" + act + "'", "'silu'");
  if (vision.hidden_size % vision.num_heads != 0 || vision.HeadDim() % 4 != 0) {
    return reader.Invalid("num_heads", std::to_string(vision.num_heads),
                          StrCat("a divisor of hidden_size ", vision.hidden_size,
                                 " leaving a head_dim that is a multiple of 4 (the 2D rotary's h and w halves)"));
  }
  if (text_hidden_size > 0 && vision.out_hidden_size != text_hidden_size) {
    return reader.Invalid("out_hidden_size", std::to_string(vision.out_hidden_size),
                          StrCat("the text hidden_size ", text_hidden_size, " (image rows replace token embeddings)"));
  }
  // The tower's largest matrices, counted in doubles: a config of plausible fields whose products are absurd.
  const double h = static_cast<double>(vision.hidden_size), o = static_cast<double>(vision.out_hidden_size);
  const double params =
      static_cast<double>(vision.depth) * h * (4 * h + 3 * static_cast<double>(vision.intermediate_size)) +
      h * static_cast<double>(vision.PatchValues()) + o * h * static_cast<double>(vision.MergeArea()) +
      o * (o + 3 * static_cast<double>(vision.projection_intermediate_size));
  if (params > 0x1p36) {
    return InvalidArgument(context, " vision_config: the tower would hold ", params,
                           " parameters; expected at most 2^36 (the release has 5.6e8)");
  }
  return Status::Ok();
}

// Refuses a config whose weights would not fit any machine: each field may be plausible alone while their
// product (e.g. 4096 experts × 2^18 wide × 1024 layers) describes petabytes that a loader would try to allocate.
// The estimate counts the big matrices (embeddings, attention projections, experts) in doubles, so it cannot
// overflow; the bound, 2^41 parameters (2.2 T), is twice the largest open checkpoints.
Status CheckTotalParameters(const ModelConfig& c, const std::string& context) {
  const double d = static_cast<double>(c.hidden_size);
  const double heads = static_cast<double>(c.num_attention_heads);
  const double attention =
      d * static_cast<double>(c.q_lora_rank + c.kv_lora_rank) +
      static_cast<double>(c.q_lora_rank) * heads * static_cast<double>(c.qk_head_dim) +
      static_cast<double>(c.kv_lora_rank) * heads * static_cast<double>(c.qk_head_dim + c.v_head_dim) +
      heads * static_cast<double>(c.v_head_dim) * d + 4.0 * d * static_cast<double>(c.kda_num_heads * c.kda_head_dim);
  const double experts = 3.0 * d * static_cast<double>(c.moe_intermediate_size) *
                         static_cast<double>(c.n_routed_experts + c.n_shared_experts);
  const double dense = 3.0 * d * static_cast<double>(c.intermediate_size);
  const double layers = static_cast<double>(c.num_hidden_layers + 1);  // + the MTP layer
  const double total = 2.0 * static_cast<double>(c.vocab_size) * d + layers * (attention + std::max(experts, dense));
  constexpr double kLargest = 2199023255552.0;  // 2^41
  if (total > kLargest) {
    return InvalidArgument(context, ": the sizes describe about ", static_cast<int64_t>(total / 1e9),
                           " billion parameters; expected at most ", static_cast<int64_t>(kLargest / 1e9),
                           " billion (no real checkpoint is larger; the file is corrupt or hostile)");
  }
  return Status::Ok();
}

// The image placeholder and its markers: top-level keys of the release config (beside vision_config), each optional.
Status ReadImageTokenIds(const ObjectReader& outer, ModelConfig& config) {
  const std::pair<const char*, int64_t*> keys[] = {{"image_token_id", &config.image_tokens.image},
                                                   {"image_start_token_id", &config.image_tokens.start},
                                                   {"image_end_token_id", &config.image_tokens.end}};
  for (const auto& [key, id] : keys) {
    if (!outer.Has(key)) continue;
    GLINT_ASSIGN_OR_RETURN(*id, outer.Int(key));
    if (*id < 0 || *id >= config.vocab_size) {
      return outer.Invalid(key, std::to_string(*id), StrCat("a token id in [0, ", config.vocab_size, ")"));
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view AttentionKindName(AttentionKind kind) { return kind == AttentionKind::kKda ? "KDA" : "DSA"; }
std::string_view MlpKindName(MlpKind kind) { return kind == MlpKind::kDense ? "dense" : "MoE"; }

int ModelConfig::NumLayersOf(AttentionKind kind) const {
  return static_cast<int>(std::count(attention_kinds.begin(), attention_kinds.end(), kind));
}
int ModelConfig::NumLayersOf(MlpKind kind) const {
  return static_cast<int>(std::count(mlp_kinds.begin(), mlp_kinds.end(), kind));
}

Result<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source) {
  const std::string context(source);
  if (!JsonDepthWithin(json_text, kMaxJsonFileDepth)) {
    return InvalidArgument(context, ": JSON nested more than ", kMaxJsonFileDepth, " levels deep");
  }
  Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgument(context, ": not valid JSON");
  if (!root.is_object()) return InvalidArgument(context, ": not a JSON object");
  ObjectReader outer(root, context);

  if (outer.Has("architectures")) {
    GLINT_ASSIGN_OR_RETURN(auto architectures, outer.StringList("architectures"));
    const std::set<std::string> known = {"Glm5NextForConditionalGeneration", "Glm5NextForCausalLM"};
    bool found = std::any_of(architectures.begin(), architectures.end(), [&](auto& a) { return known.count(a); });
    if (!found) {
      return outer.Unsupported("architectures", architectures.empty() ? "[]" : "'" + architectures.front() + "'",
                               "'Glm5NextForConditionalGeneration' (GLM-5.3-Flash)");
    }
  }
  ModelConfig config;
  const Json* text_json = outer.Get("text_config");
  if (text_json != nullptr && !text_json->is_object())
    return InvalidArgument(context, ": text_config is not an object");
  // Release layout: nested text_config. Text-only exports: the same keys at top level.
  ObjectReader text(text_json != nullptr ? *text_json : root,
                    text_json != nullptr ? context + " text_config" : context);
  GLINT_RETURN_IF_ERROR(ReadText(text, config));
  GLINT_RETURN_IF_ERROR(CheckTotalParameters(config, context));

  if (const Json* quant = outer.Get("quantization_config")) {
    if (!quant->is_object()) return InvalidArgument(context, ": quantization_config is not an object");
    ObjectReader reader(*quant, context + " quantization_config");
    GLINT_ASSIGN_OR_RETURN(std::string method, reader.String("quant_method"));
    if (method != "fp8") return reader.Unsupported("quant_method", "'" + method + "'", "'fp8'");
    GLINT_ASSIGN_OR_RETURN(std::string scheme, reader.String("activation_scheme", "dynamic"));
    if (scheme != "dynamic") return reader.Unsupported("activation_scheme", "'" + scheme + "'", "'dynamic'");
    GLINT_ASSIGN_OR_RETURN(auto block, reader.IntList("weight_block_size"));
    if (block.size() != 2 || block[0] <= 0 || block[1] <= 0) {
      return reader.Invalid("weight_block_size", ListString(block), "[rows, cols] with positive entries");
    }
    config.fp8 = true;
    config.fp8_block_rows = block[0];
    config.fp8_block_cols = block[1];
  }
  if (const Json* vision = outer.Get("vision_config")) {
    GLINT_RETURN_IF_ERROR(ReadVision(*vision, context, config.hidden_size, config.vision));
  }
  GLINT_RETURN_IF_ERROR(ReadImageTokenIds(outer, config));
  return config;
}

Result<VisionConfig> ParseVisionConfig(std::string_view json_text, std::string_view source, int64_t text_hidden_size) {
  const std::string context(source);
  if (!JsonDepthWithin(json_text, kMaxJsonFileDepth)) {
    return InvalidArgument(context, ": JSON nested more than ", kMaxJsonFileDepth, " levels deep");
  }
  Json root = Json::parse(json_text, nullptr, false);
  if (root.is_discarded()) return InvalidArgument(context, ": not valid JSON");
  VisionConfig vision;
  GLINT_RETURN_IF_ERROR(ReadVision(root, context, text_hidden_size, vision));
  return vision;
}

Result<ModelConfig> LoadModelConfig(const std::string& path) {
  const std::string file = IsDirectory(path) ? JoinPath(path, "config.json") : path;
  GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(file, size_t{16} << 20));
  return ParseModelConfig(text, file);
}

Result<GenerationConfig> ParseGenerationConfig(std::string_view json_text, const ModelConfig& model,
                                               std::string_view source) {
  const std::string context(source);
  if (!JsonDepthWithin(json_text, kMaxJsonFileDepth)) {
    return InvalidArgument(context, ": JSON nested more than ", kMaxJsonFileDepth, " levels deep");
  }
  Json root = Json::parse(json_text, nullptr, false);
  if (root.is_discarded() || !root.is_object()) return InvalidArgument(context, ": not a JSON object");
  ObjectReader reader(root, context);
  GenerationConfig generation;
  GLINT_ASSIGN_OR_RETURN(generation.temperature, reader.Float("temperature", 1.0f));
  GLINT_ASSIGN_OR_RETURN(generation.top_p, reader.Float("top_p", 1.0f));
  GLINT_ASSIGN_OR_RETURN(generation.top_k, reader.Int("top_k", 0));
  GLINT_ASSIGN_OR_RETURN(generation.do_sample, reader.Bool("do_sample", true));
  if (!(generation.temperature >= 0))
    return reader.Invalid("temperature", std::to_string(generation.temperature), ">= 0");
  if (!(generation.top_p > 0 && generation.top_p <= 1)) {
    return reader.Invalid("top_p", std::to_string(generation.top_p), "a number in (0, 1]");
  }
  if (generation.top_k < 0) return reader.Invalid("top_k", std::to_string(generation.top_k), ">= 0");
  GLINT_ASSIGN_OR_RETURN(generation.eos_token_ids, reader.IntOrIntList("eos_token_id"));
  for (int64_t id : generation.eos_token_ids) {
    if (id < 0 || id >= model.vocab_size) {
      return reader.Invalid("eos_token_id", std::to_string(id), StrCat("a token id in [0, ", model.vocab_size, ")"));
    }
  }
  if (generation.eos_token_ids.empty()) generation.eos_token_ids = model.eos_token_ids;
  return generation;
}

Result<GenerationConfig> LoadGenerationConfig(const std::string& model_dir, const ModelConfig& model) {
  const std::string file = JoinPath(model_dir, "generation_config.json");
  if (!PathExists(file)) {
    GenerationConfig defaults;
    defaults.eos_token_ids = model.eos_token_ids;
    return defaults;
  }
  GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(file, size_t{1} << 20));
  return ParseGenerationConfig(text, model, file);
}

}  // namespace glint
