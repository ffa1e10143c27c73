#include "model/tensor_parallel.h"

#include <algorithm>

namespace glint {
namespace {

// Rows [begin, end).
void KeepRows(Matrix& m, int64_t begin, int64_t end) {
  if (m.empty()) return;
  m.data.erase(m.data.begin() + end * m.cols, m.data.end());
  m.data.erase(m.data.begin(), m.data.begin() + begin * m.cols);
  m.data.shrink_to_fit();  // the other ranks' rows leave this rank's memory
  m.rows = end - begin;
}

// Columns [begin, end) of every row.
void KeepColumns(Matrix& m, int64_t begin, int64_t end) {
  if (m.empty()) return;
  const int64_t width = end - begin;
  for (int64_t r = 0; r < m.rows; ++r) {
    std::copy_n(m.data.begin() + r * m.cols + begin, width, m.data.begin() + r * width);
  }
  m.data.resize(m.rows * width);
  m.data.shrink_to_fit();
  m.cols = width;
}

void KeepValues(std::vector<float>& v, int64_t begin, int64_t end) {
  v.erase(v.begin() + end, v.end());
  v.erase(v.begin(), v.begin() + begin);
  v.shrink_to_fit();
}

// KDA heads [h0, h1): width rows [h0·d, h1·d) of the per-channel tensors, rows [h0, h1) of the per-head ones.
void SliceKda(KdaWeights& w, const IndexRange& heads, int64_t d) {
  const int64_t b = heads.begin * d, e = heads.end * d;
  for (Matrix* m : {&w.q_proj, &w.k_proj, &w.v_proj, &w.f_b_proj, &w.g_b_proj, &w.q_conv, &w.k_conv, &w.v_conv}) {
    KeepRows(*m, b, e);
  }
  KeepColumns(w.o_proj, b, e);
  KeepRows(w.b_proj, heads.begin, heads.end);
  KeepValues(w.a_log, heads.begin, heads.end);
  KeepValues(w.dt_bias, b, e);
}

// MLA heads [h0, h1): q_b rows qk per head, kv_b rows (qk + v) per head, o_proj columns v per head.
void SliceMla(DsaWeights& w, const IndexRange& heads, const ModelConfig& c) {
  const int64_t qk = c.qk_head_dim, kv = c.qk_head_dim + c.v_head_dim, v = c.v_head_dim;
  KeepRows(w.q_b_proj, heads.begin * qk, heads.end * qk);
  KeepRows(w.kv_b_proj, heads.begin * kv, heads.end * kv);
  KeepColumns(w.o_proj, heads.begin * v, heads.end * v);
}

void SliceMlp(MlpWeights& w, const IndexRange& columns) {
  KeepRows(w.gate_proj, columns.begin, columns.end);
  KeepRows(w.up_proj, columns.begin, columns.end);
  KeepColumns(w.down_proj, columns.begin, columns.end);
}

void SliceMoe(MoeWeights& w, const TensorSlices& s) {
  for (MlpWeights& expert : w.experts) SliceMlp(expert, s.expert_columns);  // empty (another rank's) stay empty
  for (MlpWeights& shared : w.shared) SliceMlp(shared, s.shared_columns);
}

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

void SliceToShard(const ModelConfig& config, const ShardPlan& plan, ModelWeights& weights) {
  if (!plan.tensor_parallel()) return;
  const TensorSlices& s = plan.slices();
  for (LayerWeights& layer : weights.layers) {
    if (layer.attention_kind == AttentionKind::kKda && plan.kda_split) SliceKda(layer.kda, s.kda_heads, config.kda_head_dim);
    if (layer.attention_kind == AttentionKind::kDsa && plan.mla_split) SliceMla(layer.dsa, s.mla_heads, config);
    if (layer.mlp_kind == MlpKind::kDense && plan.mlp_split) SliceMlp(layer.mlp, s.mlp_columns);
    if (layer.mlp_kind == MlpKind::kMoe && plan.experts_by_columns) SliceMoe(layer.moe, s);
  }
  if (weights.mtp != nullptr) {
    if (plan.mla_split) SliceMla(weights.mtp->dsa, s.mla_heads, config);
    if (plan.experts_by_columns) SliceMoe(weights.mtp->moe, s);
  }
}

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
