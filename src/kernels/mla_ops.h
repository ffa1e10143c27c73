// Absorbed MLA attention over selected latent positions for one query token (model-glm53.md §6), fp32,
// Highway-dispatched; the specification is ref::LatentAttention (kernels/reference.h). (The DSA indexer's pool
// scores are kernels/indexer_ops.h.)
//
//   scores[h, i] = scale · q̃_h · c_{pos_i};   p = softmax_i(scores[h, ·]);   ō_h = Σ_i p[h, i] · c_{pos_i}
//
// Both products are register-tiled GEMMs with the heads in the vector lanes (up to 4 vectors of heads × 6 positions
// or values of the rank per tile on AVX-512), so each latent value is read once per tile of heads instead of once
// per head, and every score and output is one lane's chain of fused multiply-adds in order: the bits do not depend
// on how a token's heads are split over calls. The output walks the positions in blocks that stay in L2
// (AttendBlockRows).
// Latent rows are reached through LatentRows, a page table (a contiguous cache is one page), so the kernel does not
// care how the engine pages its cache.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "kernels/isa.h"

namespace glint::mla {

// Rows of values of type T through a page table: fp32 latents (LatentRows) or a bf16 cache's (LatentRowsBf16).
template <typename T>
struct PagedRows {
  const T* const* pages = nullptr;  // [pages] → rows_per_page rows of row_stride values
  int64_t rows_per_page = 0;
  int64_t row_stride = 0;
  const T* Row(int64_t position) const {
    return pages[position / rows_per_page] + (position % rows_per_page) * row_stride;
  }
};
using LatentRows = PagedRows<float>;

// q_latent [heads, rank]; positions [count] (any order, count ≥ 1); out [heads, rank];
// scratch: AttendScratchFloats(heads, count, rank) floats, 8-byte aligned. Calls of 16 heads (a vector's worth) or
// more use the lanes fully: fewer heads leave lanes idle in the score phase.
void Attend(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
            int64_t count, float scale, float* out, float* scratch);
int64_t AttendScratchFloats(int64_t heads, int64_t count, int64_t rank);

// The same attention with bf16 dot products (`--mla-attention bf16`, docs/fast-path.md "MLA attention in bf16";
// AVX512-BF16's vdpbf16ps: two products per fp32 lane, twice vfmadd's work per instruction): q̃ and the selected
// latents rounded to bf16 (nearest even), the scores summed in fp32, the softmax in fp32 (as Attend), the
// probabilities rounded to bf16, the output summed in fp32. Specification: ref::LatentAttentionBf16. The heads sit in
// the lanes as in Attend (a lane holds one head's bf16 pair), so each head's bits do not depend on the other heads of
// the call, and calls of 16 heads or more use the lanes fully. Only where AttendBf16Supported(); scratch:
// AttendBf16ScratchFloats(heads, count, rank) floats (any alignment).
// Denormal inputs and products are flushed to zero by the instructions (not by the reference): ≤ 2⁻¹²⁶ each.
bool AttendBf16Supported();
void AttendBf16(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
                int64_t count, float scale, float* out, float* scratch);
int64_t AttendBf16ScratchFloats(int64_t heads, int64_t count, int64_t rank);

// Latent rows already in bf16 (a `--kv-cache-dtype bf16` cache).
using LatentRowsBf16 = PagedRows<uint16_t>;
// AttendBf16 over rows that are bf16 already, read in place (no conversion: the same results as AttendBf16 given the
// rows widened to fp32). rank must be a multiple of 32 (each row is read in 32-value steps). Scratch:
// AttendBf16InPlaceScratchFloats(heads, count, rank) floats.
void AttendBf16InPlace(const float* q_latent, int64_t heads, int64_t rank, const LatentRowsBf16& rows,
                       const int64_t* positions, int64_t count, float scale, float* out, float* scratch);
int64_t AttendBf16InPlaceScratchFloats(int64_t heads, int64_t count, int64_t rank);

// AttendBf16 with both products on AMX-BF16 tiles (tdpbf16ps, 16 × 16 × 32 products an instruction; mla_ops_amx.cc),
// checked against ref::LatentAttentionBf16 on the software tiles (`tiles` = kEmulated) and on the tile unit where
// the tests find AMX-BF16. What `--mla-attention bf16` runs where the kernels are AMX (AttentionPrecision::kBf16Amx):
// 1.5–3.4× AttendBf16 on a 2-vCPU Xeon (kernel bench MlaAttend, 16–64 heads over 256–2,051 positions; docs/fast-path.md
// "AMX"). The same rounding of inputs and probabilities as AttendBf16, its sums in another order: the same error
// bound, not the same bits. Runs where AmxBf16UnavailableReason(tiles) is empty (a check failure elsewhere). Scratch:
// AttendBf16AmxScratchFloats(heads, count, rank) floats (any alignment). The InPlace form reads a bf16 cache's rows
// (any rank).
void AttendBf16Amx(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
                   int64_t count, float scale, float* out, float* scratch, AmxTiles tiles = AmxTiles::kHardware);
void AttendBf16AmxInPlace(const float* q_latent, int64_t heads, int64_t rank, const LatentRowsBf16& rows,
                          const int64_t* positions, int64_t count, float scale, float* out, float* scratch,
                          AmxTiles tiles = AmxTiles::kHardware);
int64_t AttendBf16AmxScratchFloats(int64_t heads, int64_t count, int64_t rank);

// Which kernel the fast path attends with (`--mla-attention`): fp32 (Attend, the default) or bf16 (AttendBf16).
// ParseAttentionPrecision refuses bf16 where the CPU lacks AVX512-BF16, naming what is missing. kBf16Amx is bf16 on
// AMX-BF16 tiles (AttendBf16Amx): never parsed, the fast path's choice for bf16 where its kernels are AMX
// (AttentionOnTiles, at FastModel's load).
enum class AttentionPrecision { kFp32, kBf16, kBf16Amx };
Result<AttentionPrecision> ParseAttentionPrecision(std::string_view name);  // "fp32" or "bf16"
std::string_view AttentionPrecisionName(AttentionPrecision precision);      // "fp32", "bf16", "bf16 on AMX tiles"
// bf16 attention on tiles where `isa` is the AMX level and the tile unit does bf16 (AMX-BF16), else `precision`.
AttentionPrecision AttentionOnTiles(AttentionPrecision precision, Isa isa);
// Attend, AttendBf16 or AttendBf16Amx, with the scratch each needs.
void AttendWith(AttentionPrecision precision, const float* q_latent, int64_t heads, int64_t rank,
                const LatentRows& rows, const int64_t* positions, int64_t count, float scale, float* out,
                float* scratch);
int64_t AttendScratchFloats(AttentionPrecision precision, int64_t heads, int64_t count, int64_t rank);

// The softmax of every head's scores in place (fp32, the maximum subtracted): SoftmaxRows over scores [heads, count]
// for AttendBf16Amx; SoftmaxColumns over st [count, hp] with a head per lane (hp a multiple of the widest vector's
// lanes, 16), each head's sum in position order, as Attend and AttendBf16 keep their scores.
void SoftmaxRows(int64_t heads, int64_t count, float* scores);
void SoftmaxColumns(int64_t hp, int64_t count, float* st);

// Positions per block of the output phase: every head passes over one block of latent rows (sized to stay in L2)
// before the next. A multiple of 4 positions. Exposed so tests can cross the block edges.
int64_t AttendBlockRows(int64_t rank);

}  // namespace glint::mla
