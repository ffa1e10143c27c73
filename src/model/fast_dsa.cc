// DSA sublayer of the fast path (fast_layers.h): NoPE MLA in the absorbed form over the positions the KPool
// indexer selects (model/dsa.h has the equations; docs/model-dsa.md the numerics). int8 MLA projections (kv_b_proj
// split per head into k_absorb = Wk_hᵀ and v_up = Wv_h), exact bf16 indexer projections, fp32 attention over the
// cached latents (kernels/mla_ops.h) and the reference's selection rule (SelectTopPools / ExpandPools).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/timer.h"
#include "kernels/mla_ops.h"
#include "kernels/reference.h"
#include "kernels/vector_ops.h"
#include "model/fast_layers.h"
#include "model/dsa_cache.h"
#include "model/fast_compact_attention.h"
#include "model/fast_indexer.h"
#include "model/indexer.h"

namespace glint {
namespace {

constexpr float kKeyNormEps = 1e-6f;  // indexer k_norm LayerNorm eps (pitfall 9)
constexpr int64_t kHeadsPerTask = 8;  // attention tasks: one token × 8 heads

// Appends one token's indexer key and pooling logits at `position` (cache.tokens ≤ position): a filling pool keeps
// them as pending rows; the token that completes a pool pools its kpool rows into the pool's key (model card §7.5).
void AppendIndexerKey(const DsaCache& cache, const float* key, const float* gate, const float* ape,
                      int64_t position, float* pool_rows /* [2 · kpool + 1, e] */) {
  const int64_t e = cache.index_head_dim, kpool = cache.kpool, row = position % kpool;
  if (row < kpool - 1) {
    std::copy_n(key, e, cache.PendingKey(row));
    std::copy_n(gate, e, cache.PendingGate(row));
    return;
  }
  float* keys = pool_rows;
  float* gates = pool_rows + kpool * e;
  for (int64_t j = 0; j < kpool - 1; ++j) {
    std::copy_n(cache.PendingKey(j), e, keys + j * e);
    std::copy_n(cache.PendingGate(j), e, gates + j * e);
  }
  std::copy_n(key, e, keys + (kpool - 1) * e);
  std::copy_n(gate, e, gates + (kpool - 1) * e);
  float* pooled = pool_rows + 2 * kpool * e;
  PoolKeys(keys, gates, ape, kpool, e, pooled);
  cache.StorePooledKey(position / kpool, pooled);  // rounded to the cache's dtype
}

// The latent rows of a cache as a page table: one page per block (rows of a block are contiguous).
std::vector<const float*> LatentPages(const DsaCache& cache, int64_t tokens) {
  std::vector<const float*> pages;
  for (int64_t p = 0; p < tokens; p += cache.block_tokens) pages.push_back(cache.LatentRow(p));
  return pages;
}

Status CheckForced(const std::vector<int64_t>& positions, int64_t query) {
  if (positions.empty()) return InvalidArgument("forced attended positions for the query at ", query, " are empty");
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0 || positions[i] > query || (i > 0 && positions[i] <= positions[i - 1])) {
      return InvalidArgument("forced attended position ", positions[i], " for the query at ", query,
                             ": positions must be strictly ascending within 0..", query);
    }
  }
  return Status::Ok();
}

}  // namespace

Status FastDsa(FastContext& ctx, const FastDsaWeights& w, const float* h, std::span<const Segment> segments,
               const std::function<DsaCache&(const Segment&)>& cache_of,
               const std::function<const std::vector<int64_t>*(const Segment&, int64_t i)>& forced_of, float* out,
               std::vector<DsaRowSelection>* selections) {
  const ModelConfig& c = ctx.config;
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads, rank = c.kv_lora_rank;
  const int64_t q_lora = c.q_lora_rank, qk = c.qk_head_dim, v_dim = c.v_head_dim;
  const int64_t e = c.index_head_dim, index_heads = c.index_n_heads, kpool = c.index_kpool;
  int64_t n = 0;
  for (const Segment& s : segments) {
    n = std::max(n, s.row + s.count);
    GLINT_RETURN_IF_ERROR(PrepareDsaCache(cache_of(s), c, s.count));
    if (cache_of(s).tokens != s.first_position) {
      return FailedPrecondition("a DSA cache holds ", cache_of(s).tokens, " positions but the segment starts at ",
                                s.first_position);
    }
    for (int64_t i = 0; forced_of && i < s.count; ++i) {
      if (const auto* forced = forced_of(s, i)) GLINT_RETURN_IF_ERROR(CheckForced(*forced, s.first_position + i));
    }
  }

  // 1. Projections of h: [q_a; kv_a] (int8) then their RMSNorms; q = q_b q_resid; indexer [wk; gate; weights].
  const int64_t qa_width = q_lora + rank, index_width = 2 * e + index_heads;
  float* qa_kva = ctx.Buffer(kBufDsaQaKva, n * qa_width);            // [n, q_lora + rank]
  float* q = ctx.Buffer(kBufDsaQ, n * heads * qk);                   // [n, H·qk]
  float* index_in = ctx.Buffer(kBufDsaIndexIn, n * index_width);     // [n, 2e + I]: ik, ig, head weights
  ctx.Linear(w.qa_kva, h, hidden, n, qa_kva, qa_width);
  ctx.Linear(w.index_in, h, hidden, n, index_in, index_width);
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(index_heads));
  ctx.pool.Run(n, [&](int64_t t, int) {
    float* row = qa_kva + t * qa_width;
    vec::RmsNorm(row, w.q_a_norm, q_lora, c.rms_norm_eps, row);
    vec::RmsNorm(row + q_lora, w.kv_a_norm, rank, c.rms_norm_eps, row + q_lora);
    float* index_row = index_in + t * index_width;
    ref::LayerNorm(index_row, w.k_norm_weight, w.k_norm_bias, e, kKeyNormEps, index_row);
    vec::Scale(head_scale, index_row + 2 * e, index_heads, index_row + 2 * e);
  });
  ctx.Linear(w.q_b, qa_kva, qa_width, n, q, heads * qk);

  // 2. The new latents and indexer keys join the caches.
  std::vector<float> pool_rows((2 * kpool + 1) * e);  // [2 · kpool + 1, e] a completing pool's keys, gates, key
  for (const Segment& s : segments) {
    DsaCache& cache = cache_of(s);
    for (int64_t i = 0; i < s.count; ++i) {
      const int64_t t = s.row + i;
      cache.StoreLatent(s.first_position + i, qa_kva + t * qa_width + q_lora);
      AppendIndexerKey(cache, index_in + t * index_width, index_in + t * index_width + e, w.ape, s.first_position + i,
                       pool_rows.data());
    }
    cache.tokens += s.count;
  }

  // 3. Selections. The indexer query iq = wq_b q_resid is computed only when some query is past the dense regime.
  std::vector<std::vector<int64_t>> selected(n);
  std::vector<float> margins(n, std::numeric_limits<float>::quiet_NaN());
  const int64_t top_pools = c.IndexTopkPools();
  bool need_query = false;
  for (const Segment& s : segments) {
    for (int64_t i = 0; i < s.count; ++i) {
      const bool forced = forced_of && forced_of(s, i) != nullptr;
      need_query = need_query || (!forced && VisiblePools(s.first_position + i, kpool) > top_pools);
    }
  }
  float* index_q = nullptr;
  if (need_query) {
    index_q = ctx.Buffer(kBufDsaIndexQ, n * index_heads * e);  // [n, I·e]
    ctx.Linear(w.index_q, qa_kva, qa_width, n, index_q, index_heads * e);
  }
  std::vector<std::pair<size_t, int64_t>> rows;  // (segment, i) of every pass row
  for (size_t si = 0; si < segments.size(); ++si) {
    for (int64_t i = 0; i < segments[si].count; ++i) rows.push_back({si, i});
  }
  // Decode (fewer rows than workers): each row's pools are scored by all workers in turn; prefill: a row per task.
  std::vector<int64_t> key_bytes(rows.size(), 0);  // [rows] pooled-key bytes each row's scoring read
  const auto select_row = [&](int64_t r, WorkerPool* spread) {
    const Segment& s = segments[rows[r].first];
    const int64_t i = rows[r].second, t = s.row + i, position = s.first_position + i;
    const std::vector<int64_t>* forced = forced_of ? forced_of(s, i) : nullptr;
    if (forced != nullptr) {
      selected[t] = *forced;
      return;
    }
    const int64_t visible = VisiblePools(position, kpool);
    PoolSelection pools;
    if (visible <= top_pools) {  // dense regime: every visible pool, i.e. tokens 0..position
      pools.pools.resize(visible);
      std::iota(pools.pools.begin(), pools.pools.end(), int64_t{0});
      pools.margin = std::numeric_limits<float>::infinity();
    } else {
      const FastIndexerQuery query{index_q + t * index_heads * e, index_in + t * index_width + 2 * e, index_heads,
                                   position};
      pools = FastSelectPools(cache_of(s), query, top_pools, spread);
      key_bytes[r] = IndexerKeyBytes(cache_of(s), position);
    }
    selected[t] = ExpandPools(pools.pools, position, kpool);
    margins[t] = pools.margin;
  };
  Stopwatch indexer_clock;
  if (static_cast<int64_t>(rows.size()) < ctx.pool.size()) {
    for (size_t r = 0; r < rows.size(); ++r) select_row(static_cast<int64_t>(r), &ctx.pool);
  } else {
    ctx.pool.Run(static_cast<int64_t>(rows.size()), [&](int64_t r, int) { select_row(r, nullptr); });
  }
  ctx.indexer_seconds += indexer_clock.Seconds();
  for (int64_t bytes : key_bytes) ctx.indexer_key_bytes += static_cast<uint64_t>(bytes);

  // 4. Absorbed attention: q̃_h = Wk_hᵀ q_h; ō_h = Σ_j softmax(q̃_h · c_j / √qk) c_j; o_h = Wv_h ō_h; out = o_proj o.
  float* q_latent = ctx.Buffer(kBufDsaQLatent, n * heads * rank);  // [n, H·rank]
  float* o_latent = ctx.Buffer(kBufDsaOLatent, n * heads * rank);  // [n, H·rank]
  float* o = ctx.Buffer(kBufDsaO, n * heads * v_dim);              // [n, H·v]
  ctx.LinearPerHead(w.k_absorb, heads, q, heads * qk, qk, n, q_latent, heads * rank);
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk));
  const int64_t head_groups = (heads + kHeadsPerTask - 1) / kHeadsPerTask;
  if (cache_of(segments[0]).dtype != KvCacheDtype::kFloat32) {
    AttendCompact(ctx, segments, cache_of, rows, selected, q_latent, scale, o_latent);
  } else {
    std::vector<std::vector<const float*>> latent_pages(segments.size());
    for (size_t si = 0; si < segments.size(); ++si) {
      const DsaCache& cache = cache_of(segments[si]);
      latent_pages[si] = LatentPages(cache, cache.tokens);
    }
    ctx.pool.Run(static_cast<int64_t>(rows.size()) * head_groups, [&](int64_t task, int worker) {
      const int64_t r = task / head_groups, group = task % head_groups;
      const size_t si = rows[r].first;
      const Segment& s = segments[si];
      const int64_t t = s.row + rows[r].second;
      const int64_t h0 = group * kHeadsPerTask, nh = std::min(kHeadsPerTask, heads - h0);
      const mla::LatentRows latents{latent_pages[si].data(), cache_of(s).block_tokens, rank};
      const std::vector<int64_t>& positions = selected[t];
      const int64_t count = static_cast<int64_t>(positions.size());
      float* scratch = ctx.WorkerFloats(worker, mla::AttendScratchFloats(nh, count));
      mla::Attend(q_latent + (t * heads + h0) * rank, nh, rank, latents, positions.data(), count, scale,
                  o_latent + (t * heads + h0) * rank, scratch);
    });
  }
  ctx.LinearPerHead(w.v_up, heads, o_latent, heads * rank, rank, n, o, heads * v_dim);
  ctx.Linear(w.o_proj, o, heads * v_dim, n, out, hidden);

  if (selections != nullptr) {
    selections->resize(n);
    for (int64_t t = 0; t < n; ++t) (*selections)[t] = {std::move(selected[t]), margins[t]};
  }
  return Status::Ok();
}

}  // namespace glint
