// DSA sublayer of the fast path (fast_layers.h): NoPE MLA in the absorbed form over the positions the KPool
// indexer selects (model/dsa.h has the equations; docs/model-dsa.md the numerics). int8 MLA projections (kv_b_proj
// split per head into k_absorb = Wk_hᵀ and v_up = Wv_h), exact bf16 indexer projections, fp32 attention over the
// cached latents (kernels/mla_ops.h; compact --kv-cache-dtype latents: fast_compact_attention.h) and the
// reference's selection rule (SelectTopPools / ExpandPools) found in O(n) over all workers (fast_indexer.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/timer.h"
#include "fast/fast_compact_attention.h"
#include "fast/fast_indexer.h"
#include "fast/fast_layers.h"
#include "kernels/mla_ops.h"
#include "kernels/reference.h"
#include "kernels/vector_ops.h"
#include "model/dsa_cache.h"
#include "model/indexer.h"

namespace glint {
namespace {

constexpr float kKeyNormEps = 1e-6f;                // indexer k_norm LayerNorm eps (pitfall 9)
constexpr int64_t kTokensPerWorkerForAllHeads = 4;  // from this many tokens per worker, a task takes all the heads

// Appends one token's indexer key and pooling logits at `position` (cache.tokens ≤ position): a filling pool keeps
// them as pending rows; the token that completes a pool pools its kpool rows into the pool's key (model card §7.5).
void AppendIndexerKey(const DsaCache& cache, const float* key, const float* gate, const float* ape, int64_t position,
                      float* pool_rows /* [2 · kpool + 1, e] */) {
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
  cache.StorePooledKey(position / kpool, pooled);  // rounded to the cache's dtype (--kv-cache-dtype)
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

// The forced positions of pass row t, or null: the indexer chooses.
const std::vector<int64_t>* ForcedAt(std::span<const std::vector<int64_t>* const> forced, int64_t t) {
  return forced.empty() ? nullptr : forced[t];
}

// Before anything is written: each segment's cache has room for its rows and starts at the segment's first
// position, and every forced selection is valid. Returns n, the rows of the pass.
Result<int64_t> CheckSegments(const ModelConfig& c, std::span<const Segment> segments, std::span<DsaCache> caches,
                              std::span<const std::vector<int64_t>* const> forced) {
  if (caches.size() != segments.size()) {
    return InvalidArgument("FastDsa: ", caches.size(), " caches for ", segments.size(), " segments");
  }
  int64_t n = 0;
  for (const Segment& s : segments) n = std::max(n, s.row + s.count);
  if (!forced.empty() && static_cast<int64_t>(forced.size()) != n) {
    return InvalidArgument("FastDsa: forced selections for ", forced.size(), " rows, the pass has ", n);
  }
  for (size_t si = 0; si < segments.size(); ++si) {
    const Segment& s = segments[si];
    GLINT_RETURN_IF_ERROR(PrepareDsaCache(caches[si], c, s.count));
    if (caches[si].tokens != s.first_position) {
      return FailedPrecondition("a DSA cache holds ", caches[si].tokens, " positions but the segment starts at ",
                                s.first_position);
    }
    for (int64_t i = 0; i < s.count; ++i) {
      if (const auto* positions = ForcedAt(forced, s.row + i)) {
        GLINT_RETURN_IF_ERROR(CheckForced(*positions, s.first_position + i));
      }
    }
  }
  return n;
}

// The projections of h for n rows, in the pass's DSA buffers.
struct DsaProjections {
  int64_t qa_width = 0, index_width = 0;
  float* qa_kva = nullptr;    // [n, q_lora + rank]: q_resid = RMSNorm(q_a h), then the latent c = RMSNorm(kv_a h)
  float* q = nullptr;         // [n, H·qk]: q = q_b q_resid
  float* index_in = nullptr;  // [n, 2e + I]: indexer key ik (LayerNorm'd), pooling gate ig, head weights · I^-1/2
};

// Step 1: [q_a; kv_a] (int8) then their RMSNorms; q = q_b q_resid; the indexer's [wk; gate; weights] (bf16).
DsaProjections Project(FastContext& ctx, const FastDsaWeights& w, const float* h, int64_t n) {
  const ModelConfig& c = ctx.config;
  const int64_t q_lora = c.q_lora_rank, rank = c.kv_lora_rank, e = c.index_head_dim, index_heads = c.index_n_heads;
  DsaProjections p;
  p.qa_width = q_lora + rank;
  p.index_width = 2 * e + index_heads;
  p.qa_kva = ctx.act.dsa.qa_kva.Floats(n * p.qa_width);
  p.q = ctx.act.dsa.q.Floats(n * c.num_attention_heads * c.qk_head_dim);
  p.index_in = ctx.act.dsa.index_in.Floats(n * p.index_width);
  ctx.Linear(w.qa_kva, h, c.hidden_size, n, p.qa_kva, p.qa_width);
  ctx.Linear(w.index_in, h, c.hidden_size, n, p.index_in, p.index_width);
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(index_heads));
  const PassPart previous = ctx.profile.Enter(PassPart::kRest);  // the projections' norms
  ctx.pool.Run(n, [&](int64_t t, int) {
    float* row = p.qa_kva + t * p.qa_width;
    vec::RmsNorm(row, w.q_a_norm, q_lora, c.rms_norm_eps, row);
    vec::RmsNorm(row + q_lora, w.kv_a_norm, rank, c.rms_norm_eps, row + q_lora);
    float* index_row = p.index_in + t * p.index_width;
    ref::LayerNorm(index_row, w.k_norm_weight, w.k_norm_bias, e, kKeyNormEps, index_row);
    vec::Scale(head_scale, index_row + 2 * e, index_heads, index_row + 2 * e);
  });
  ctx.profile.Leave(previous);
  ctx.Linear(w.q_b, p.qa_kva, p.qa_width, n, p.q, c.num_attention_heads * c.qk_head_dim);
  return p;
}

// Step 2: the new latents and indexer keys join the caches, which then hold the segments' rows.
void AppendToCaches(const ModelConfig& c, const FastDsaWeights& w, const DsaProjections& p,
                    std::span<const Segment> segments, std::span<DsaCache> caches) {
  const int64_t e = c.index_head_dim;
  std::vector<float> pool_rows((2 * c.index_kpool + 1) * e);  // [2 · kpool + 1, e] keys, gates, pooled key
  for (size_t si = 0; si < segments.size(); ++si) {
    const Segment& s = segments[si];
    DsaCache& cache = caches[si];
    for (int64_t i = 0; i < s.count; ++i) {
      const int64_t t = s.row + i;
      cache.StoreLatent(s.first_position + i, p.qa_kva + t * p.qa_width + c.q_lora_rank);
      const float* index_row = p.index_in + t * p.index_width;
      AppendIndexerKey(cache, index_row, index_row + e, w.ape, s.first_position + i, pool_rows.data());
    }
    cache.tokens += s.count;
  }
}

// A pass row: its segment and its index in it.
struct PassRow {
  size_t segment;
  int64_t i;
};

std::vector<PassRow> PassRows(std::span<const Segment> segments) {
  std::vector<PassRow> rows;
  for (size_t si = 0; si < segments.size(); ++si) {
    for (int64_t i = 0; i < segments[si].count; ++i) rows.push_back({si, i});
  }
  return rows;
}

// What the attention of each pass row reads: its attended positions, and the indexer's margin (NaN when forced).
struct RowSelections {
  std::vector<std::vector<int64_t>> positions;  // [n][|S|] ascending
  std::vector<float> margins;                   // [n]
};

// The indexer's choice for the query at `position` (model card §7): in the dense regime (n_pool ≤ K) every visible
// pool, margin +inf; else the K best pools by score Σ_i w_i · relu(iq_i · pooled_key) · e^-1/2, scored with the
// kernel of the cache's dtype and selected in O(n) (fast_indexer.h); `spread`: score over the pool's workers.
// index_q [I·e], head_weights [I]. Adds the pooled-key bytes read to *key_bytes.
PoolSelection SelectPools(const ModelConfig& c, Isa isa, const DsaCache& cache, const float* index_q,
                          const float* head_weights, int64_t position, WorkerPool* spread, int64_t* key_bytes) {
  const int64_t top_pools = c.IndexTopkPools(), visible = VisiblePools(position, c.index_kpool);
  PoolSelection pools;
  if (visible <= top_pools) {  // dense regime: every visible pool, i.e. tokens 0..position
    pools.pools.resize(visible);
    std::iota(pools.pools.begin(), pools.pools.end(), int64_t{0});
    pools.margin = std::numeric_limits<float>::infinity();
    return pools;
  }
  *key_bytes += IndexerKeyBytes(cache, position);
  return FastSelectPools(cache, {index_q, head_weights, c.index_n_heads, position, isa}, top_pools, spread);
}

// Step 3: the attended positions of every row — forced, or chosen by the indexer. The indexer query
// iq = wq_b q_resid is computed only when some chosen query is past the dense regime.
RowSelections Select(FastContext& ctx, const FastDsaWeights& w, const DsaProjections& p,
                     std::span<const Segment> segments, std::span<DsaCache> caches,
                     std::span<const std::vector<int64_t>* const> forced, std::span<const PassRow> rows, int64_t n) {
  const ModelConfig& c = ctx.config;
  const int64_t kpool = c.index_kpool, e = c.index_head_dim, index_heads = c.index_n_heads;
  RowSelections selections{std::vector<std::vector<int64_t>>(n),
                           std::vector<float>(n, std::numeric_limits<float>::quiet_NaN())};
  bool need_query = false;
  for (const PassRow& row : rows) {
    const Segment& s = segments[row.segment];
    const bool is_forced = ForcedAt(forced, s.row + row.i) != nullptr;
    need_query = need_query || (!is_forced && VisiblePools(s.first_position + row.i, kpool) > c.IndexTopkPools());
  }
  float* index_q = nullptr;  // [n, I·e]
  if (need_query) {
    index_q = ctx.act.dsa.index_q.Floats(n * index_heads * e);
    ctx.Linear(w.index_q, p.qa_kva, p.qa_width, n, index_q, index_heads * e);
  }
  std::vector<int64_t> key_bytes(rows.size(), 0);  // [rows] pooled-key bytes each row's scoring read
  const auto select_row = [&](int64_t r, WorkerPool* spread) {
    const Segment& s = segments[rows[r].segment];
    const int64_t t = s.row + rows[r].i, position = s.first_position + rows[r].i;
    if (const std::vector<int64_t>* positions = ForcedAt(forced, t)) {
      selections.positions[t] = *positions;
      return;
    }
    const float* query = index_q != nullptr ? index_q + t * index_heads * e : nullptr;  // null: dense regime
    const PoolSelection pools = SelectPools(c, ctx.isa, caches[rows[r].segment], query,
                                            p.index_in + t * p.index_width + 2 * e, position, spread, &key_bytes[r]);
    selections.positions[t] = ExpandPools(pools.pools, position, kpool);
    selections.margins[t] = pools.margin;
  };
  // Decode (fewer rows than workers): each row's pools are scored by all workers in turn; prefill: a row per task.
  Stopwatch clock;
  const ScopedPart part(ctx.profile, PassPart::kIndexer);
  if (static_cast<int64_t>(rows.size()) < ctx.pool.size()) {
    for (size_t r = 0; r < rows.size(); ++r) select_row(static_cast<int64_t>(r), &ctx.pool);
  } else {
    ctx.pool.Run(static_cast<int64_t>(rows.size()), [&](int64_t r, int) { select_row(r, nullptr); });
  }
  ctx.indexer_seconds += clock.Seconds();
  for (int64_t bytes : key_bytes) ctx.indexer_key_bytes += static_cast<uint64_t>(bytes);
  return selections;
}

void AttendInPlace(FastContext& ctx, std::span<const Segment> segments, std::span<const DsaCache> caches,
                   std::span<const PassRow> rows, const RowSelections& selections, const float* q_latent, float scale,
                   float* o_latent);

// Step 4, absorbed attention: q̃_h = Wk_hᵀ q_h; ō_h = Σ_j softmax(q̃_h · c_j / √qk) c_j over the selected latents;
// o_h = Wv_h ō_h; out = o_proj o.
void AbsorbedAttention(FastContext& ctx, const FastDsaWeights& w, const DsaProjections& p,
                       std::span<const Segment> segments, std::span<const DsaCache> caches,
                       std::span<const PassRow> rows, const RowSelections& selections, int64_t n, float* out) {
  const ModelConfig& c = ctx.config;
  const int64_t heads = c.num_attention_heads, rank = c.kv_lora_rank, qk = c.qk_head_dim, v_dim = c.v_head_dim;
  float* q_latent = ctx.act.dsa.q_latent.Floats(n * heads * rank);  // [n, H·rank]
  float* o_latent = ctx.act.dsa.o_latent.Floats(n * heads * rank);  // [n, H·rank]
  float* o = ctx.act.dsa.o.Floats(n * heads * v_dim);               // [n, H·v]
  ctx.LinearPerHead(w.k_absorb, heads, p.q, heads * qk, qk, n, q_latent, heads * rank);
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk));
  const PassPart previous = ctx.profile.Enter(PassPart::kMlaAttention);
  if (caches[0].dtype != KvCacheDtype::kFloat32) {  // compact latents: decoded once per query, then attended
    std::vector<CompactRow> compact;
    for (const PassRow& row : rows) compact.push_back({&caches[row.segment], segments[row.segment].row + row.i});
    AttendCompact(ctx, compact, selections.positions, q_latent, scale, o_latent);
  } else {
    AttendInPlace(ctx, segments, caches, rows, selections, q_latent, scale, o_latent);
  }
  ctx.profile.Leave(previous);
  ctx.LinearPerHead(w.v_up, heads, o_latent, heads * rank, rank, n, o, heads * v_dim);
  ctx.Linear(w.o_proj, o, heads * v_dim, n, out, c.hidden_size);
}

// Step 4 over fp32 caches: the latent rows are read in place through a page table.
void AttendInPlace(FastContext& ctx, std::span<const Segment> segments, std::span<const DsaCache> caches,
                   std::span<const PassRow> rows, const RowSelections& selections, const float* q_latent, float scale,
                   float* o_latent) {
  const int64_t heads = ctx.config.num_attention_heads, rank = ctx.config.kv_lora_rank;
  // A call reads its latent rows once per tile of heads, and fp32 keeps 16 heads in a vector, so a task takes all of
  // a token's heads when there are tokens enough to keep the workers busy (mla::Attend at 2,051 positions, 1 thread:
  // ≈ 190 GFLOPS with 32 or 64 heads, ≈ 135 with 16; docs/fast-path.md); a decode pass's few tokens are split into
  // smaller tasks (DecodeHeadsPerTask). Each head's output is the same bits whatever the split (mla_ops_test).
  const int64_t tokens_for_all_heads = kTokensPerWorkerForAllHeads * ctx.pool.size();
  const int64_t heads_per_task =
      static_cast<int64_t>(rows.size()) >= tokens_for_all_heads ? heads : DecodeHeadsPerTask(ctx, true);
  const int64_t head_groups = (heads + heads_per_task - 1) / heads_per_task;
  std::vector<std::vector<const float*>> latent_pages(segments.size());  // [segments][blocks]
  for (size_t si = 0; si < segments.size(); ++si) latent_pages[si] = LatentPages(caches[si], caches[si].tokens);
  ctx.pool.Run(static_cast<int64_t>(rows.size()) * head_groups, [&](int64_t task, int worker) {
    const int64_t r = task / head_groups, group = task % head_groups;
    const size_t si = rows[r].segment;
    const int64_t t = segments[si].row + rows[r].i;
    const int64_t h0 = group * heads_per_task, nh = std::min(heads_per_task, heads - h0);
    const mla::LatentRows latents{latent_pages[si].data(), caches[si].block_tokens, rank};
    const std::vector<int64_t>& positions = selections.positions[t];
    const int64_t count = static_cast<int64_t>(positions.size());
    float* scratch = ctx.WorkerFloats(worker, mla::AttendScratchFloats(ctx.attention, nh, count, rank));
    mla::AttendWith(ctx.attention, q_latent + (t * heads + h0) * rank, nh, rank, latents, positions.data(), count,
                    scale, o_latent + (t * heads + h0) * rank, scratch);
  });
}

}  // namespace

Status FastDsa(FastContext& ctx, const FastDsaWeights& w, const float* h, std::span<const Segment> segments,
               std::span<DsaCache> caches, std::span<const std::vector<int64_t>* const> forced, float* out,
               DsaTrace* selections) {
  GLINT_ASSIGN_OR_RETURN(const int64_t n, CheckSegments(ctx.config, segments, caches, forced));
  const DsaProjections projections = Project(ctx, w, h, n);
  {
    const ScopedPart part(ctx.profile, PassPart::kIndexer);  // the latents' copy is small beside the key pooling
    AppendToCaches(ctx.config, w, projections, segments, caches);
  }
  const std::vector<PassRow> rows = PassRows(segments);
  RowSelections chosen = Select(ctx, w, projections, segments, caches, forced, rows, n);
  AbsorbedAttention(ctx, w, projections, segments, caches, rows, chosen, n, out);
  if (selections != nullptr) *selections = {std::move(chosen.positions), std::move(chosen.margins)};
  return Status::Ok();
}

}  // namespace glint
