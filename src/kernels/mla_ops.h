// Absorbed MLA attention over selected latent positions for one query token (model-glm53.md §6), fp32,
// Highway-dispatched; the specification is ref::LatentAttention (kernels/reference.h). (The DSA indexer's pool
// scores are kernels/indexer_ops.h.)
//
//   scores[h, i] = scale · q̃_h · c_{pos_i};   p = softmax_i(scores[h, ·]);   ō_h = Σ_i p[h, i] · c_{pos_i}
//
// Both products are register-tiled GEMMs (4 heads × 4 positions of dot products; 8 heads × 2 vectors of rank per
// pass over the positions), so each latent row is read from cache a few times per query instead of once per head.
// Both walk the positions in pieces that every head tile passes over before the next: the scores in groups of rows
// that stay in L1 (16 KB), the output in blocks that stay in L2 (AttendBlockRows).
// Latent rows are reached through LatentRows, a page table (a contiguous cache is one page), so the kernel does not
// care how the engine pages its cache.
#pragma once

#include <cstdint>

namespace glint::mla {

struct LatentRows {
  const float* const* pages = nullptr;  // [pages] → rows_per_page rows of row_stride floats
  int64_t rows_per_page = 0;
  int64_t row_stride = 0;
  const float* Row(int64_t position) const {
    return pages[position / rows_per_page] + (position % rows_per_page) * row_stride;
  }
};

// q_latent [heads, rank]; positions [count] (any order, count ≥ 1); out [heads, rank];
// scratch: AttendScratchFloats(heads, count) floats.
void Attend(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
            int64_t count, float scale, float* out, float* scratch);
int64_t AttendScratchFloats(int64_t heads, int64_t count);

// Positions per block of the output phase: every head passes over one block of latent rows (sized to stay in L2)
// before the next. A multiple of 4 positions. Exposed so tests can cross the block edges.
int64_t AttendBlockRows(int64_t rank);

}  // namespace glint::mla
