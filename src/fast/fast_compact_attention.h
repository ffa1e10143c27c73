// Absorbed MLA attention of the fast path over a cache whose latents are stored compactly (bf16, fp8, int8;
// quant/kv_rows.h): the selected rows of each query are decoded to fp32 once, then attended by the same kernel
// as fp32 rows (mla::Attend). Decoding ~2K selected rows of 512 values costs a few percent of the attention's
// heads × rows × rank multiply-adds; the fp32 cache path (fast_dsa.cc) reads rows in place instead, and so does
// --mla-attention bf16 over a bf16 cache (mla::AttendBf16InPlace: the stored rows are the kernel's operands).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fast/fast_layers.h"
#include "model/dsa_cache.h"

namespace glint {

// A pass row whose query attends a compact cache: its cache and its row t in the pass.
struct CompactRow {
  const DsaCache* cache = nullptr;
  int64_t t = 0;
};

// Heads per attention task in decode (a pass with too few queries to give each worker whole queries), at least 16:
// both kernels keep the heads in the vector lanes, and at 2,051 positions on one Zen 5 thread mla::Attend runs at
// ≈ 190 GFLOPS with 32 or 64 heads a call, ≈ 135 with 16 and ≈ 90 with 8 (lanes idle); mla::AttendBf16 ≈ 300 with 64,
// ≈ 190–280 with 16, ≈ 100–150 with 8. In fp32 a worker's share. With bf16 over a bf16 cache 16 (read in place, nothing
// to repeat per call). With bf16 over rows that each call rounds to bf16 itself (an fp32, fp8 or int8 cache) a worker's
// share: every call would round the query's rows again. Each head's output is the same bits whatever the split.
int64_t DecodeHeadsPerTask(const FastContext& ctx, bool rows_rounded_per_call);

// selected[t]: attended positions of pass row t; q_latent, o_latent: [n, heads · kv_lora]; scale = qk^-1/2.
void AttendCompact(FastContext& ctx, std::span<const CompactRow> rows,
                   const std::vector<std::vector<int64_t>>& selected, const float* q_latent, float scale,
                   float* o_latent);

}  // namespace glint
