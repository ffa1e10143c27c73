// The int8 pool scores on AMX tiles (indexer_ops.h: ScoresInt8Amx). Every function carries GLINT_TARGET_AMX, so
// nothing here runs on a CPU without AMX: Int8AmxSupported() is checked first.
//
// Why tiles: at 1M positions one query scores 262,144 pools × 32 heads × 128 dims = 1.07 G multiply-adds against
// 34 MB of keys. VNNI does 64 per instruction (16.8 M instructions, ≈ 3 ms on 2 cores at one per cycle, twice the
// ≈ 1.5 ms the keys take to stream at 23 GB/s); `tdpbssd` does 16 × 16 × 64 = 16,384 in ≈ 16 cycles, so the
// products become a small part of the memory time and the kernel can stream at the bandwidth.
//
// The product C[16 pools][16 heads] += A[16 pools][64 dims] · B[16 quads][16 heads × 4] (signed × signed bytes,
// exact int32): A is the cache's key rows as they are (row stride = dim bytes; no layout change), B the query
// packed once per query (PackQueryForAmx). Tiles: C tmm0, tmm1 (two head groups), A tmm2 (a 64-dim chunk) and tmm3
// (the last chunk when dim % 64 ≠ 0), B tmm4, tmm5 (the two groups' 64-dim chunk) and tmm6, tmm7 (the last chunk).
// The epilogue wants, per head, a vector over pools (the reference adds a pool's terms in ascending head order),
// so the stored C [pools][heads] is transposed 16 × 16 in registers, then Int8Term's arithmetic in its order:
// bit-exact with ScoresInt8Reference.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, see gemm_i8_avx512.cc
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/amx_tiles.h"
#include "kernels/indexer_ops.h"
#include "kernels/isa.h"

namespace glint::indexer {
namespace {

using internal::TileLoad;
using internal::TileStore;
using internal::TileZero;

constexpr int64_t kTilePools = 16, kTileHeads = 16, kChunkDims = 64;
constexpr int kC = 0, kA = 2, kALast = 3, kB = 4, kBLast = 6;

GLINT_TARGET_AMX void ConfigureTiles(int64_t last_chunk_dims) {
  internal::TileConfig config;
  config.Set(kC, 16, 64);
  config.Set(kC + 1, 16, 64);
  config.Set(kA, 16, 64);
  config.Set(kB, 16, 64);
  config.Set(kB + 1, 16, 64);
  if (last_chunk_dims > 0) {
    config.Set(kALast, 16, static_cast<int>(last_chunk_dims));
    config.Set(kBLast, static_cast<int>(last_chunk_dims / 4), 64);
    config.Set(kBLast + 1, static_cast<int>(last_chunk_dims / 4), 64);
  }
  internal::LoadTileConfig(config);
}

// rows[i] = row i of a 16 × 16 int32 matrix; on return rows[j] = its column j.
GLINT_TARGET_AMX inline void Transpose16x16(__m512i* rows) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {  // per 128-bit lane: pairs of rows interleaved
    t[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {  // u[g + q], lane L: column 4L + q of rows g..g+3
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int q = 0; q < 4; ++q) {  // the 4 × 4 transpose of 128-bit lanes across the 4 row groups
    const __m512i x0 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x44), x1 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xEE);
    const __m512i x2 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x44);
    const __m512i x3 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xEE);
    rows[q] = _mm512_shuffle_i32x4(x0, x2, 0x88);
    rows[4 + q] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
    rows[8 + q] = _mm512_shuffle_i32x4(x1, x3, 0x88);
    rows[12 + q] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
  }
}

struct Walk {
  const int8_t* query;  // PackQueryForAmx
  const float* query_scales;
  const float* head_weights;
  int64_t heads, dim, chunks, groups;
  float scale;
};

// C tiles of head groups g, g + 1 (when `pair`) for the 16 key rows at `keys` (row stride dim).
template <bool kPair>
GLINT_TARGET_AMX void GroupProducts(const Walk& w, const int8_t* keys, int64_t g, int32_t* c) {
  TileZero<kC>();
  if constexpr (kPair) TileZero<kC + 1>();
  const int64_t group_bytes = w.chunks * 1024;
  for (int64_t chunk = 0; chunk < w.chunks; ++chunk) {
    const int8_t* b = w.query + g * group_bytes + chunk * 1024;
    if (chunk + 1 < w.chunks || w.dim % kChunkDims == 0) {
      TileLoad<kA>(keys + chunk * kChunkDims, w.dim);
      TileLoad<kB>(b, 64);
      asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "n"(kC), "n"(kA), "n"(kB));
      if constexpr (kPair) {
        TileLoad<kB + 1>(b + group_bytes, 64);
        asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "n"(kC + 1), "n"(kA), "n"(kB + 1));
      }
    } else {
      TileLoad<kALast>(keys + chunk * kChunkDims, w.dim);
      TileLoad<kBLast>(b, 64);
      asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "n"(kC), "n"(kALast), "n"(kBLast));
      if constexpr (kPair) {
        TileLoad<kBLast + 1>(b + group_bytes, 64);
        asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "n"(kC + 1), "n"(kALast), "n"(kBLast + 1));
      }
    }
  }
  TileStore<kC>(c, 64);
  if constexpr (kPair) TileStore<kC + 1>(c + 256, 64);
}

// total += Σ_h w_h · max(dot_h · ((scale · t_h) · s_m), 0) over the heads of group g, ascending, as Int8Term.
GLINT_TARGET_AMX __m512 AddGroupTerms(const Walk& w, const int32_t* c, int64_t g, __m512 key_scales, __m512 total) {
  __m512i columns[16];
  for (int i = 0; i < 16; ++i) columns[i] = _mm512_load_si512(c + 16 * i);
  Transpose16x16(columns);  // columns[n] = head 16g + n's dot products of the 16 pools
  const int64_t heads_here = std::min(kTileHeads, w.heads - g * kTileHeads);
  for (int64_t n = 0; n < heads_here; ++n) {
    const int64_t h = g * kTileHeads + n;
    const __m512 dot = _mm512_cvtepi32_ps(columns[n]);
    const __m512 factor = _mm512_mul_ps(_mm512_set1_ps(w.scale * w.query_scales[h]), key_scales);
    const __m512 positive = _mm512_max_ps(_mm512_setzero_ps(), _mm512_mul_ps(dot, factor));  // keeps a NaN
    total = _mm512_add_ps(total, _mm512_mul_ps(_mm512_set1_ps(w.head_weights[h]), positive));
  }
  return total;
}

// The scores of the 16 key rows at `keys` (the first `pools` real).
GLINT_TARGET_AMX void ScoreTile(const Walk& w, const int8_t* keys, const float* key_scales, int64_t pools,
                                float* scores) {
  alignas(64) int32_t c[2 * 256];
  const __mmask16 mask = static_cast<__mmask16>((1u << pools) - 1);
  const __m512 s = _mm512_maskz_loadu_ps(mask, key_scales);
  __m512 total = _mm512_setzero_ps();
  for (int64_t g = 0; g < w.groups; g += 2) {
    if (g + 1 < w.groups) {
      GroupProducts<true>(w, keys, g, c);
      total = AddGroupTerms(w, c, g, s, total);
      total = AddGroupTerms(w, c + 256, g + 1, s, total);
    } else {
      GroupProducts<false>(w, keys, g, c);
      total = AddGroupTerms(w, c, g, s, total);
    }
  }
  _mm512_mask_storeu_ps(scores, mask, total);
}

// Spans asked for ahead of the one scored. A release block's keys are 2 KiB, scored in ≈ 0.2 µs at a core's share
// of the bandwidth, about one DRAM latency: one block ahead leaves the loads barely in flight, three keep the
// bytes a core needs (bandwidth × latency ≈ 2 KiB) outstanding with room for a late one.
constexpr size_t kPrefetchSpans = 3;

// Asks for the span's keys and scales (a block is its own arena item: the hardware prefetcher stops at its end).
inline void Prefetch(const Int8KeySpan& span, int64_t dim) {
  const auto* bytes = reinterpret_cast<const char*>(span.keys);
  for (int64_t offset = 0; offset < span.pools * dim; offset += 64) __builtin_prefetch(bytes + offset, 0, 0);
  __builtin_prefetch(span.scales, 0, 0);
}

}  // namespace

bool Int8AmxSupported(int64_t dim) { return dim % 4 == 0 && dim <= kAmxMaxDim && IsaSupported(Isa::kAmx); }

int64_t AmxQueryBytes(int64_t heads, int64_t dim) {
  return (heads + kTileHeads - 1) / kTileHeads * ((dim + kChunkDims - 1) / kChunkDims) * 1024;
}

void PackQueryForAmx(const int16_t* codes, int64_t heads, int64_t dim, int8_t* packed) {
  const int64_t chunks = (dim + kChunkDims - 1) / kChunkDims;
  std::memset(packed, 0, static_cast<size_t>(AmxQueryBytes(heads, dim)));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t c = 0; c < dim; ++c) {
      const int64_t g = h / kTileHeads, n = h % kTileHeads, chunk = c / kChunkDims, quad = (c % kChunkDims) / 4;
      packed[((g * chunks + chunk) * 16 + quad) * 64 + n * 4 + c % 4] = static_cast<int8_t>(codes[h * dim + c]);
    }
  }
}

GLINT_TARGET_AMX void ScoresInt8Amx(const int8_t* packed_query, const float* query_scales, const float* head_weights,
                                    std::span<const Int8KeySpan> spans, int64_t heads, int64_t dim, float scale,
                                    float* scores) {
  const Walk w{packed_query,
               query_scales,
               head_weights,
               heads,
               dim,
               (dim + kChunkDims - 1) / kChunkDims,
               (heads + kTileHeads - 1) / kTileHeads,
               scale};
  ConfigureTiles(dim % kChunkDims);
  // A tile that would cross a span's end is copied here, zero rows after the last real one.
  alignas(64) int8_t gathered_keys[kTilePools * kAmxMaxDim];
  alignas(64) float gathered_scales[kTilePools];
  for (size_t i = 0; i < std::min(kPrefetchSpans, spans.size()); ++i) Prefetch(spans[i], dim);
  size_t next = 0;  // the span the next tile starts in
  int64_t offset = 0, out = 0;
  while (next < spans.size()) {
    const Int8KeySpan& span = spans[next];
    if (offset == 0 && next + kPrefetchSpans < spans.size()) Prefetch(spans[next + kPrefetchSpans], dim);
    if (span.pools - offset >= kTilePools || next + 1 == spans.size()) {
      const int64_t n = std::min(kTilePools, span.pools - offset);
      if (n == kTilePools) {
        ScoreTile(w, span.keys + offset * dim, span.scales + offset, n, scores + out);
      } else {  // the last span's partial tile: zero rows pad it (never read past the span)
        std::memset(gathered_keys, 0, static_cast<size_t>(kTilePools * dim));
        std::memcpy(gathered_keys, span.keys + offset * dim, static_cast<size_t>(n * dim));
        ScoreTile(w, gathered_keys, span.scales + offset, n, scores + out);
      }
      out += n, offset += n;
    } else {  // gather 16 rows (or what is left) across spans
      int64_t n = 0;
      std::memset(gathered_keys, 0, static_cast<size_t>(kTilePools * dim));
      while (n < kTilePools && next < spans.size()) {
        const int64_t take = std::min(kTilePools - n, spans[next].pools - offset);
        std::memcpy(gathered_keys + n * dim, spans[next].keys + offset * dim, static_cast<size_t>(take * dim));
        std::memcpy(gathered_scales + n, spans[next].scales + offset, static_cast<size_t>(take) * sizeof(float));
        n += take, offset += take;
        if (offset == spans[next].pools) ++next, offset = 0;
      }
      ScoreTile(w, gathered_keys, gathered_scales, n, scores + out);
      out += n;
      continue;
    }
    if (offset == span.pools) ++next, offset = 0;
  }
  internal::ReleaseTiles();
}

}  // namespace glint::indexer
