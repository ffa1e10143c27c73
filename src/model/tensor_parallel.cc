#include "model/tensor_parallel.h"

#include <algorithm>

#include "io/checkpoint_schema.h"

namespace glint {
namespace {

using Regions = std::map<std::string, TensorRegion>;

TensorRegion Rows(int64_t begin, int64_t end) { return {begin, end, 0, -1}; }
TensorRegion Columns(int64_t begin, int64_t end) { return {0, -1, begin, end}; }

// KDA heads [h0, h1): width rows [h0·d, h1·d) of the per-channel tensors, rows [h0, h1) of the per-head ones,
// o_proj columns.
void KdaRegions(const std::string& p, const IndexRange& heads, int64_t d, Regions& regions) {
  const int64_t b = heads.begin * d, e = heads.end * d;
  for (const char* name : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "f_b_proj.weight", "g_b_proj.weight",
                           "q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight", "dt_bias"}) {
    regions[p + name] = Rows(b, e);
  }
  regions[p + "o_proj.weight"] = Columns(b, e);
  regions[p + "b_proj.weight"] = Rows(heads.begin, heads.end);
  regions[p + "A_log"] = Rows(heads.begin, heads.end);
}

// MLA heads [h0, h1): q_b rows qk per head, kv_b rows (qk + v) per head, o_proj columns v per head.
void MlaRegions(const std::string& p, const IndexRange& heads, const ModelConfig& c, Regions& regions) {
  const int64_t qk = c.qk_head_dim, kv = c.qk_head_dim + c.v_head_dim, v = c.v_head_dim;
  regions[p + "q_b_proj.weight"] = Rows(heads.begin * qk, heads.end * qk);
  regions[p + "kv_b_proj.weight"] = Rows(heads.begin * kv, heads.end * kv);
  regions[p + "o_proj.weight"] = Columns(heads.begin * v, heads.end * v);
}

void MlpRegions(const std::string& p, const IndexRange& columns, Regions& regions) {
  regions[p + "gate_proj.weight"] = Rows(columns.begin, columns.end);
  regions[p + "up_proj.weight"] = Rows(columns.begin, columns.end);
  regions[p + "down_proj.weight"] = Columns(columns.begin, columns.end);
}

// Every routed expert the rank holds and the shared expert (when held) by columns.
void MoeRegions(const std::string& p, const ShardPlan& plan, const ModelConfig& c, Regions& regions) {
  const TensorSlices& s = plan.slices();
  for (int64_t e = plan.experts().begin; e < std::min(plan.experts().end, c.n_routed_experts); ++e) {
    MlpRegions(p + "mlp.experts." + std::to_string(e) + ".", s.expert_columns, regions);
  }
  if (c.n_shared_experts > 0 && plan.holds_shared_expert())
    MlpRegions(p + "mlp.shared_experts.", s.shared_columns, regions);
}

}  // namespace

std::map<std::string, TensorRegion> TensorParallelRegions(const ModelConfig& config, const ShardPlan& plan) {
  Regions regions;
  const TensorSlices& s = plan.slices();
  if (s.vocab_rows.count() != config.vocab_size) regions["lm_head.weight"] = Rows(s.vocab_rows.begin, s.vocab_rows.end);
  if (!plan.tensor_parallel()) return regions;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string p = LayerPrefix(l);
    if (config.attention_kinds[l] == AttentionKind::kKda && plan.kda_split) {
      KdaRegions(p + "self_attn.", s.kda_heads, config.kda_head_dim, regions);
    }
    if (config.attention_kinds[l] == AttentionKind::kDsa && plan.mla_split) {
      MlaRegions(p + "self_attn.", s.mla_heads, config, regions);
    }
    if (config.mlp_kinds[l] == MlpKind::kDense && plan.mlp_split) MlpRegions(p + "mlp.", s.mlp_columns, regions);
    if (config.mlp_kinds[l] == MlpKind::kMoe && plan.experts_by_columns) MoeRegions(p, plan, config, regions);
  }
  if (config.HasMtp()) {
    const std::string p = LayerPrefix(config.MtpLayerIndex());
    if (plan.mla_split) MlaRegions(p + "self_attn.", s.mla_heads, config, regions);
    if (plan.experts_by_columns) MoeRegions(p, plan, config, regions);
  }
  return regions;
}

namespace {

int64_t Values(const Matrix& m) { return static_cast<int64_t>(m.data.size()); }
int64_t Values(const std::vector<float>& v) { return static_cast<int64_t>(v.size()); }
int64_t Values(const MhcWeights& w) { return Values(w.fn) + Values(w.base) + Values(w.scale); }
int64_t Values(const MlpWeights& w) { return Values(w.gate_proj) + Values(w.up_proj) + Values(w.down_proj); }

int64_t Values(const MoeWeights& w) {
  int64_t n = Values(w.router) + Values(w.e_score_correction_bias);
  for (const MlpWeights& expert : w.experts) n += Values(expert);
  for (const MlpWeights& shared : w.shared) n += Values(shared);
  return n;
}

int64_t Values(const KdaWeights& w) {
  int64_t n = Values(w.a_log) + Values(w.dt_bias) + Values(w.o_norm);
  for (const Matrix* m : {&w.q_proj, &w.k_proj, &w.v_proj, &w.o_proj, &w.f_a_proj, &w.g_a_proj, &w.f_b_proj,
                          &w.g_b_proj, &w.b_proj, &w.q_conv, &w.k_conv, &w.v_conv}) {
    n += Values(*m);
  }
  return n;
}

int64_t Values(const DsaWeights& w) {
  const IndexerWeights& i = w.indexer;
  return Values(w.q_a_proj) + Values(w.q_a_layernorm) + Values(w.q_b_proj) + Values(w.kv_a_proj) +
         Values(w.kv_a_layernorm) + Values(w.kv_b_proj) + Values(w.o_proj) + Values(i.wq_b) + Values(i.wk) +
         Values(i.k_norm_weight) + Values(i.k_norm_bias) + Values(i.weights_proj) + Values(i.compress_gate) +
         Values(i.compress_ape);
}

}  // namespace

int64_t CountWeightValues(const ModelWeights& weights) {
  int64_t n = Values(weights.embed_tokens) + Values(weights.final_norm) + Values(weights.lm_head);
  for (const LayerWeights& layer : weights.layers) {
    n += Values(layer.input_layernorm) + Values(layer.post_attention_layernorm) + Values(layer.hc_attn) +
         Values(layer.hc_ffn) + Values(layer.kda) + Values(layer.dsa) + Values(layer.mlp) + Values(layer.moe);
  }
  if (const MtpWeights* m = weights.mtp.get(); m != nullptr) {
    n += Values(m->eh_proj) + Values(m->enorm) + Values(m->hnorm) + Values(m->input_layernorm) +
         Values(m->post_attention_layernorm) + Values(m->shared_head_norm) + Values(m->dsa) + Values(m->moe);
  }
  return n;
}

}  // namespace glint
