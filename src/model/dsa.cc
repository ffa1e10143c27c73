#include "model/dsa.h"

#include <cmath>
#include <limits>

#include "kernels/reference.h"

namespace glint {
namespace {

Status CheckMatrix(const Matrix& m, const char* name, int64_t rows, int64_t cols) {
  if (m.rows != rows || m.cols != cols || static_cast<int64_t>(m.data.size()) != rows * cols) {
    return InvalidArgument("DSA weight ", name, " is [", m.rows, ", ", m.cols, "] with ", m.data.size(),
                           " values; the config needs [", rows, ", ", cols, "]");
  }
  return Status::Ok();
}

Status CheckVector(const std::vector<float>& v, const char* name, int64_t size) {
  if (static_cast<int64_t>(v.size()) != size) {
    return InvalidArgument("DSA weight ", name, " has ", v.size(), " values; the config needs ", size);
  }
  return Status::Ok();
}

// ParseModelConfig guarantees these; a hand-built config might not, and a zero here would divide by zero.
Status CheckConfig(const ModelConfig& c) {
  if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.q_lora_rank <= 0 || c.kv_lora_rank <= 0 ||
      c.qk_head_dim <= 0 || c.v_head_dim <= 0 || c.index_n_heads <= 0 || c.index_head_dim <= 0 || c.index_kpool <= 0 ||
      c.index_topk <= 0 || c.index_topk % c.index_kpool != 0) {
    return InvalidArgument("the config's DSA sizes are not usable (hidden ", c.hidden_size, ", heads ",
                           c.num_attention_heads, ", q_lora ", c.q_lora_rank, ", kv_lora ", c.kv_lora_rank, ", qk ",
                           c.qk_head_dim, ", v ", c.v_head_dim, ", index heads ", c.index_n_heads, " × ",
                           c.index_head_dim, ", index_topk ", c.index_topk, ", index_kpool ", c.index_kpool,
                           "): all must be positive and index_topk a multiple of index_kpool");
  }
  return Status::Ok();
}

Status CheckForcedPositions(const std::vector<std::vector<int64_t>>* forced, int64_t first_position, int64_t tokens) {
  if (forced == nullptr) return InvalidArgument("KeySelection::kForced needs DsaOptions::forced_positions");
  if (static_cast<int64_t>(forced->size()) != tokens) {
    return InvalidArgument("forced_positions has ", forced->size(), " queries; expected one per new token (", tokens,
                           ")");
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<int64_t>& positions = (*forced)[t];
    const int64_t query = first_position + t;
    if (positions.empty()) {
      return InvalidArgument("forced_positions[", t, "] (query at position ", query, ") is empty");
    }
    for (size_t i = 0; i < positions.size(); ++i) {
      if (positions[i] < 0 || positions[i] > query || (i > 0 && positions[i] <= positions[i - 1])) {
        return InvalidArgument("forced_positions[", t, "][", i, "] = ", positions[i], " for the query at position ",
                               query, ": positions must be strictly ascending within 0..", query);
      }
    }
  }
  return Status::Ok();
}

Status CheckOptions(const DsaOptions& options, int64_t first_position, int64_t tokens) {
  if (options.form != MlaForm::kNaive && options.form != MlaForm::kAbsorbed) {
    return InvalidArgument("unknown MlaForm ", static_cast<int>(options.form));
  }
  switch (options.selection) {
    case KeySelection::kIndexer:
    case KeySelection::kDense:
      return Status::Ok();
    case KeySelection::kForced:
      return CheckForcedPositions(options.forced_positions, first_position, tokens);
  }
  return InvalidArgument("unknown KeySelection ", static_cast<int>(options.selection));
}

// Everything is checked before anything is written; the cache's memory is prepared (a standalone cache grows)
// last, once the call is known to proceed.
Status CheckCall(const DsaWeights& weights, const ModelConfig& config, const float* hidden, int64_t tokens,
                 DsaCache& cache, const DsaOptions& options, const float* out) {
  if (tokens <= 0) return InvalidArgument("DsaForward needs at least one new token, got ", tokens);
  if (hidden == nullptr || out == nullptr) return InvalidArgument("DsaForward: null hidden or out buffer");
  GLINT_RETURN_IF_ERROR(CheckConfig(config));
  GLINT_RETURN_IF_ERROR(ValidateDsaWeights(weights, config));
  GLINT_RETURN_IF_ERROR(CheckOptions(options, cache.tokens, tokens));
  return PrepareDsaCache(cache, config, tokens);
}

// Rows of kv = kv_b_proj c_j [heads, qk + v] for the positions the naive form attends, computed once per call.
class MaterializedKv {
 public:
  MaterializedKv(const DsaWeights& weights, const DsaCache& cache)
      : weights_(weights), cache_(cache), row_of_(cache.tokens, -1) {}

  void Ensure(const std::vector<int64_t>& positions) {
    const int64_t width = weights_.kv_b_proj.rows, rank = weights_.kv_b_proj.cols;
    for (int64_t j : positions) {
      if (row_of_[j] >= 0) continue;
      row_of_[j] = static_cast<int64_t>(rows_.size()) / width;
      rows_.resize(rows_.size() + width);
      latent_.resize(rank);
      cache_.LoadLatent(j, latent_.data());
      ref::Linear(latent_.data(), 1, weights_.kv_b_proj.data.data(), width, rank, rows_.data() + row_of_[j] * width);
    }
  }
  // [heads, qk + v] for position j; valid until the next Ensure.
  const float* Row(int64_t j) const { return rows_.data() + row_of_[j] * weights_.kv_b_proj.rows; }

 private:
  const DsaWeights& weights_;
  const DsaCache& cache_;
  std::vector<int64_t> row_of_;  // [cache.tokens] row in rows_, −1 = not yet computed
  std::vector<float> rows_;      // [computed, heads · (qk + v)]
  std::vector<float> latent_;    // [kv_lora] one decoded cache row
};

// o [heads, v] for one query q [heads, qk] over `positions`, naive form: scores against materialised k_h(j).
void AttendNaive(const ModelConfig& c, const float* q, const std::vector<int64_t>& positions, MaterializedKv& kv,
                 float* o) {
  const int64_t qk = c.qk_head_dim, v = c.v_head_dim, block = qk + v, n = static_cast<int64_t>(positions.size());
  const double scale = 1.0 / std::sqrt(static_cast<double>(qk));
  kv.Ensure(positions);
  std::vector<float> p(n);     // [n] scores, then probabilities
  std::vector<double> sum(v);  // [v] Σ_j p_j v_h(j)
  for (int64_t h = 0; h < c.num_attention_heads; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      p[i] = static_cast<float>(ref::Dot(q + h * qk, kv.Row(positions[i]) + h * block, qk) * scale);
    }
    ref::Softmax(p.data(), n);
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const float* value = kv.Row(positions[i]) + h * block + qk;
      for (int64_t d = 0; d < v; ++d) sum[d] += static_cast<double>(p[i]) * value[d];
    }
    for (int64_t d = 0; d < v; ++d) o[h * v + d] = static_cast<float>(sum[d]);
  }
}

// The same o, absorbed form: with Wk_h = kv_b_proj rows [h·(qk+v), h·(qk+v)+qk) and Wv_h the next v rows,
// q_h · (Wk_h c_j) = (Wk_hᵀ q_h) · c_j and Σ_j p_j Wv_h c_j = Wv_h Σ_j p_j c_j — only the product order changes.
void AttendAbsorbed(const DsaWeights& w, const ModelConfig& c, const DsaCache& cache, const float* q,
                    const std::vector<int64_t>& positions, float* o) {
  const int64_t qk = c.qk_head_dim, v = c.v_head_dim, block = qk + v, rank = c.kv_lora_rank;
  const int64_t n = static_cast<int64_t>(positions.size());
  const double scale = 1.0 / std::sqrt(static_cast<double>(qk));
  std::vector<double> sum(rank);         // [kv_lora] accumulator
  std::vector<float> q_latent(rank);     // [kv_lora] q̃_h = Wk_hᵀ q_h
  std::vector<float> o_latent(rank);     // [kv_lora] ō_h = Σ_j p_j c_j
  std::vector<float> p(n);               // [n] scores, then probabilities
  std::vector<float> latents(n * rank);  // [n, kv_lora] the attended rows, decoded from the cache's dtype
  for (int64_t i = 0; i < n; ++i) cache.LoadLatent(positions[i], latents.data() + i * rank);
  for (int64_t h = 0; h < c.num_attention_heads; ++h) {
    const float* wk = w.kv_b_proj.Row(h * block);       // [qk, kv_lora]
    const float* wv = w.kv_b_proj.Row(h * block + qk);  // [v, kv_lora]
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t d = 0; d < qk; ++d) {
      const double qd = q[h * qk + d];
      for (int64_t r = 0; r < rank; ++r) sum[r] += qd * wk[d * rank + r];
    }
    for (int64_t r = 0; r < rank; ++r) q_latent[r] = static_cast<float>(sum[r]);
    for (int64_t i = 0; i < n; ++i) {
      p[i] = static_cast<float>(ref::Dot(q_latent.data(), latents.data() + i * rank, rank) * scale);
    }
    ref::Softmax(p.data(), n);
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const float* latent = latents.data() + i * rank;
      for (int64_t r = 0; r < rank; ++r) sum[r] += static_cast<double>(p[i]) * latent[r];
    }
    for (int64_t r = 0; r < rank; ++r) o_latent[r] = static_cast<float>(sum[r]);
    ref::Linear(o_latent.data(), 1, wv, v, rank, o + h * v);
  }
}

}  // namespace

Status ValidateDsaWeights(const DsaWeights& w, const ModelConfig& c) {
  const int64_t heads = c.num_attention_heads;
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.q_a_proj, "q_a_proj", c.q_lora_rank, c.hidden_size));
  GLINT_RETURN_IF_ERROR(CheckVector(w.q_a_layernorm, "q_a_layernorm", c.q_lora_rank));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.q_b_proj, "q_b_proj", heads * c.qk_head_dim, c.q_lora_rank));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.kv_a_proj, "kv_a_proj_with_mqa", c.kv_lora_rank, c.hidden_size));
  GLINT_RETURN_IF_ERROR(CheckVector(w.kv_a_layernorm, "kv_a_layernorm", c.kv_lora_rank));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.kv_b_proj, "kv_b_proj", heads * (c.qk_head_dim + c.v_head_dim), c.kv_lora_rank));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.o_proj, "o_proj", c.hidden_size, heads * c.v_head_dim));
  return ValidateIndexerWeights(w.indexer, c);
}

Status DsaForward(const DsaWeights& w, const ModelConfig& c, const float* hidden, int64_t tokens, DsaCache& cache,
                  const DsaOptions& options, float* out, DsaTrace* trace) {
  GLINT_RETURN_IF_ERROR(CheckCall(w, c, hidden, tokens, cache, options, out));
  const int64_t d = c.hidden_size, heads = c.num_attention_heads, rank = c.kv_lora_rank;
  const int64_t q_width = heads * c.qk_head_dim, o_width = heads * c.v_head_dim;
  const int64_t first = cache.tokens;

  // 1. Per-token projections; the new latents and indexer keys join the cache (nothing can fail from here on).
  std::vector<float> q_resid(tokens * c.q_lora_rank);  // [T, q_lora]
  std::vector<float> q(tokens * q_width);              // [T, heads · qk]
  std::vector<float> latent(rank);                     // [kv_lora] c_j before it is stored
  for (int64_t t = 0; t < tokens; ++t) {
    const float* h = hidden + t * d;
    float* qr = q_resid.data() + t * c.q_lora_rank;
    ref::Linear(h, 1, w.q_a_proj.data.data(), c.q_lora_rank, d, qr);
    ref::RmsNorm(qr, w.q_a_layernorm.data(), c.q_lora_rank, c.rms_norm_eps, qr);
    ref::Linear(qr, 1, w.q_b_proj.data.data(), q_width, c.q_lora_rank, q.data() + t * q_width);
    ref::Linear(h, 1, w.kv_a_proj.data.data(), rank, d, latent.data());
    ref::RmsNorm(latent.data(), w.kv_a_layernorm.data(), rank, c.rms_norm_eps, latent.data());
    cache.StoreLatent(first + t, latent.data());  // rounded to the cache's dtype: what attention reads back
  }
  AppendIndexerKeys(w.indexer, c, hidden, tokens, cache);
  cache.tokens = first + tokens;

  // 2. The attended positions of each query. The query at position p sees pools with last token ≤ p, all cached.
  std::vector<std::vector<int64_t>> selected(tokens);                          // [T][|S|]
  std::vector<float> margin(tokens, std::numeric_limits<float>::quiet_NaN());  // [T]
  std::vector<float> index_query(c.index_n_heads * c.index_head_dim);          // [I, e]
  std::vector<float> head_weights(c.index_n_heads);                            // [I]
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t position = first + t;
    switch (options.selection) {
      case KeySelection::kIndexer: {
        IndexerQuery(w.indexer, c, q_resid.data() + t * c.q_lora_rank, hidden + t * d, index_query.data(),
                     head_weights.data());
        IndexerSelection s = IndexerSelect(c, cache, index_query.data(), head_weights.data(), position);
        selected[t] = std::move(s.positions);
        margin[t] = s.margin;
        break;
      }
      case KeySelection::kDense:
        selected[t].resize(position + 1);
        for (int64_t j = 0; j <= position; ++j) selected[t][j] = j;
        break;
      case KeySelection::kForced:
        selected[t] = (*options.forced_positions)[t];
        break;
    }
  }

  // 3. Attention over the selected positions, then o_proj.
  std::vector<float> o(tokens * o_width);  // [T, heads · v]
  MaterializedKv kv(w, cache);
  for (int64_t t = 0; t < tokens; ++t) {
    if (options.form == MlaForm::kNaive) {
      AttendNaive(c, q.data() + t * q_width, selected[t], kv, o.data() + t * o_width);
    } else {
      AttendAbsorbed(w, c, cache, q.data() + t * q_width, selected[t], o.data() + t * o_width);
    }
  }
  ref::Linear(o.data(), tokens, w.o_proj.data.data(), d, o_width, out);

  if (trace != nullptr) {
    trace->selected = std::move(selected);
    trace->margin = std::move(margin);
  }
  return Status::Ok();
}

}  // namespace glint
