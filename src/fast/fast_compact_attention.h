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

// selected[t]: attended positions of pass row t; q_latent, o_latent: [n, heads · kv_lora]; scale = qk^-1/2.
void AttendCompact(FastContext& ctx, std::span<const CompactRow> rows,
                   const std::vector<std::vector<int64_t>>& selected, const float* q_latent, float scale,
                   float* o_latent);

}  // namespace glint
