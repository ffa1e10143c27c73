#include "fast/fast_compact_attention.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "kernels/mla_ops.h"

namespace glint {
namespace {

// Decode: at least one AVX-512 vector of heads per call — both kernels keep the heads in the lanes (mla_ops.h), so
// fewer leave lanes idle.
constexpr int64_t kHeadsPerTask = 16;
constexpr int64_t kDecodeChunk = 256;  // rows decoded per task when one query's rows are split over workers

// 0, 1, …, count − 1: the positions of decoded rows in their dense page.
const int64_t* Identity(int64_t count) {
  thread_local std::vector<int64_t> identity;
  if (static_cast<int64_t>(identity.size()) < count) {
    identity.resize(count);
    std::iota(identity.begin(), identity.end(), int64_t{0});
  }
  return identity.data();
}

// Heads [h0, h0 + nh) of one query over `count` decoded rows [count, rank].
void AttendGroup(FastContext& ctx, int worker, const float* decoded, int64_t count, const float* q, int64_t nh,
                 float scale, float* out) {
  const int64_t rank = ctx.config.kv_lora_rank;
  const float* page = decoded;
  const mla::LatentRows latents{&page, std::max<int64_t>(count, 1), rank};
  float* scratch = ctx.WorkerFloats(worker, mla::AttendScratchFloats(ctx.attention, nh, count, rank));
  mla::AttendWith(ctx.attention, q, nh, rank, latents, Identity(count), count, scale, out, scratch);
}

// --mla-attention bf16 over a bf16 cache: the rows are what mla::AttendBf16 would round them to, so they are read in
// place through a page table per cache (no decoding, half the bytes of fp32 rows). Tasks as for fp32 caches: a query
// with all its heads when there are queries enough for the workers (prefill), 16 heads a task otherwise (decode).
void AttendBf16InPlace(FastContext& ctx, std::span<const CompactRow> rows,
                       const std::vector<std::vector<int64_t>>& selected, const float* q_latent, float scale,
                       float* o_latent) {
  const int64_t heads = ctx.config.num_attention_heads, rank = ctx.config.kv_lora_rank;
  std::map<const DsaCache*, std::vector<const uint16_t*>> pages;  // a page per block: its rows are contiguous
  for (const CompactRow& row : rows) {
    auto [it, inserted] = pages.try_emplace(row.cache);
    if (!inserted) continue;
    for (int64_t p = 0; p < row.cache->tokens; p += row.cache->block_tokens) {
      it->second.push_back(reinterpret_cast<const uint16_t*>(row.cache->LatentValues(p)));
    }
  }
  const int64_t heads_per_task =
      static_cast<int64_t>(rows.size()) >= ctx.pool.size() ? heads : DecodeHeadsPerTask(ctx, false);
  const int64_t head_groups = (heads + heads_per_task - 1) / heads_per_task;
  ctx.pool.Run(static_cast<int64_t>(rows.size()) * head_groups, [&](int64_t task, int worker) {
    const CompactRow& row = rows[task / head_groups];
    const int64_t h0 = task % head_groups * heads_per_task, nh = std::min(heads_per_task, heads - h0);
    const mla::LatentRowsBf16 latents{pages.at(row.cache).data(), row.cache->block_tokens, rank};
    const std::vector<int64_t>& positions = selected[row.t];
    const int64_t count = static_cast<int64_t>(positions.size());
    const float* q = q_latent + (row.t * heads + h0) * rank;
    float* out = o_latent + (row.t * heads + h0) * rank;
    if (ctx.attention == mla::AttentionPrecision::kBf16Amx) {
      float* scratch = ctx.WorkerFloats(worker, mla::AttendBf16AmxScratchFloats(nh, count, rank));
      mla::AttendBf16AmxInPlace(q, nh, rank, latents, positions.data(), count, scale, out, scratch);
    } else {
      float* scratch = ctx.WorkerFloats(worker, mla::AttendBf16InPlaceScratchFloats(nh, count, rank));
      mla::AttendBf16InPlace(q, nh, rank, latents, positions.data(), count, scale, out, scratch);
    }
  });
}

}  // namespace

int64_t DecodeHeadsPerTask(const FastContext& ctx, bool rows_rounded_per_call) {
  const bool fp32 = ctx.attention == mla::AttentionPrecision::kFp32;
  if (!fp32 && !rows_rounded_per_call) return kHeadsPerTask;
  const int64_t heads = ctx.config.num_attention_heads, workers = ctx.pool.size();
  return std::max(kHeadsPerTask, (heads + workers - 1) / workers);
}

void AttendCompact(FastContext& ctx, std::span<const CompactRow> rows,
                   const std::vector<std::vector<int64_t>>& selected, const float* q_latent, float scale,
                   float* o_latent) {
  const int64_t heads = ctx.config.num_attention_heads, rank = ctx.config.kv_lora_rank;
  // AttendBf16InPlace reads rows in 32-value steps; the tiles read any rank.
  const bool in_place = ctx.attention == mla::AttentionPrecision::kBf16Amx ||
                        (ctx.attention == mla::AttentionPrecision::kBf16 && rank % 32 == 0);
  if (in_place && !rows.empty() && rows[0].cache->dtype == KvCacheDtype::kBfloat16) {
    AttendBf16InPlace(ctx, rows, selected, q_latent, scale, o_latent);
    return;
  }
  const int64_t heads_per_group = DecodeHeadsPerTask(ctx, true);
  const int64_t groups = (heads + heads_per_group - 1) / heads_per_group;
  const auto group_of = [&](int64_t t, int64_t g, int worker, const float* decoded, int64_t count) {
    const int64_t h0 = g * heads_per_group, nh = std::min(heads_per_group, heads - h0);
    AttendGroup(ctx, worker, decoded, count, q_latent + (t * heads + h0) * rank, nh, scale,
                o_latent + (t * heads + h0) * rank);
  };
  if (static_cast<int64_t>(rows.size()) < ctx.pool.size()) {
    // Decode: few queries; each one's rows are decoded by all workers, then its head groups attend in parallel.
    thread_local std::vector<float> decoded;  // [count, rank]
    for (const CompactRow& row : rows) {
      const std::vector<int64_t>& positions = selected[row.t];
      const int64_t count = static_cast<int64_t>(positions.size());
      decoded.resize(count * rank);
      float* out = decoded.data();
      ctx.pool.ParallelFor(count, kDecodeChunk, [&](int64_t begin, int64_t end, int) {
        for (int64_t j = begin; j < end; ++j) row.cache->LoadLatent(positions[j], out + j * rank);
      });
      ctx.pool.Run(groups, [&](int64_t g, int worker) { group_of(row.t, g, worker, out, count); });
    }
    return;
  }
  // Prefill: a query per task, decoded once on its worker and attended by all its heads in one call (a call reads
  // the rows once per pass for its heads alone; each head's output is the same bits whatever the split).
  ctx.pool.Run(static_cast<int64_t>(rows.size()), [&](int64_t r, int worker) {
    thread_local std::vector<float> decoded;  // [count, rank]
    const CompactRow& row = rows[r];
    const std::vector<int64_t>& positions = selected[row.t];
    const int64_t count = static_cast<int64_t>(positions.size());
    decoded.resize(count * rank);
    for (int64_t j = 0; j < count; ++j) row.cache->LoadLatent(positions[j], decoded.data() + j * rank);
    AttendGroup(ctx, worker, decoded.data(), count, q_latent + row.t * heads * rank, heads, scale,
                o_latent + row.t * heads * rank);
  });
}

}  // namespace glint
