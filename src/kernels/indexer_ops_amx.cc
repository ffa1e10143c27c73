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
#include <memory>
#include <vector>

#include "kernels/amx_emulator.h"
#include "kernels/amx_tiles.h"
#include "kernels/indexer_ops.h"
#include "kernels/isa.h"
#include "kernels/transpose_avx512.h"

namespace glint::indexer {
namespace {

using internal::EmulatedTiles;
using internal::HardwareTiles;

constexpr int64_t kTilePools = 16, kTileHeads = 16, kChunkDims = 64;
constexpr int kC = 0, kA = 2, kALast = 3, kB = 4, kBLast = 6;

template <typename Tiles>
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
  Tiles::Configure(config);
}

struct Walk {
  const int8_t* query;  // PackQueryForAmx
  const float* query_scales;
  const float* head_weights;
  int64_t heads, dim, chunks, groups;
  float scale;
};

// C tmm0 (+ tmm1) += A · B for one 64-dim chunk: A (tile kATile) = the 16 key rows' chunk at `keys`, B (kBTile,
// + 1) = the head group's (and the next group's, `group_bytes` on) packed query chunk at `b`. Signed × signed.
template <typename Tiles, int kATile, int kBTile, bool kPair>
GLINT_TARGET_AMX inline void ChunkProducts(const int8_t* keys, int64_t dim, const int8_t* b, int64_t group_bytes) {
  Tiles::template Load<kATile>(keys, dim);
  Tiles::template Load<kBTile>(b, 64);
  Tiles::template DotSigned<kC, kATile, kBTile>();
  if constexpr (kPair) {
    Tiles::template Load<kBTile + 1>(b + group_bytes, 64);
    Tiles::template DotSigned<kC + 1, kATile, kBTile + 1>();
  }
}

// C tiles of head groups g, g + 1 (when `pair`) for the 16 key rows at `keys` (row stride dim).
template <typename Tiles, bool kPair>
GLINT_TARGET_AMX void GroupProducts(const Walk& w, const int8_t* keys, int64_t g, int32_t* c) {
  Tiles::template Zero<kC>();
  if constexpr (kPair) Tiles::template Zero<kC + 1>();
  const int64_t group_bytes = w.chunks * 1024;
  for (int64_t chunk = 0; chunk < w.chunks; ++chunk) {
    const int8_t* b = w.query + g * group_bytes + chunk * 1024;
    if (chunk + 1 < w.chunks || w.dim % kChunkDims == 0) {
      ChunkProducts<Tiles, kA, kB, kPair>(keys + chunk * kChunkDims, w.dim, b, group_bytes);
    } else {  // the last chunk's narrower tiles (dim % 64 dims)
      ChunkProducts<Tiles, kALast, kBLast, kPair>(keys + chunk * kChunkDims, w.dim, b, group_bytes);
    }
  }
  Tiles::template Store<kC>(c, 64);
  if constexpr (kPair) Tiles::template Store<kC + 1>(c + 256, 64);
}

// total += Σ_h w_h · max(dot_h · ((scale · t_h) · s_m), 0) over the heads of group g, ascending, as Int8Term.
GLINT_TARGET_AMX __m512 AddGroupTerms(const Walk& w, const int32_t* c, int64_t g, __m512 key_scales, __m512 total) {
  __m512i columns[16];
  for (int i = 0; i < 16; ++i) columns[i] = _mm512_loadu_si512(c + 16 * i);
  internal::Transpose16x16(columns);  // columns[n] = head 16g + n's dot products of the 16 pools
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

// One tile of up to 16 pools: its key rows (16 readable rows, row stride dim) and its scales (copied: the
// epilogue runs a tile later than the products, when a gathered tile's rows are gone).
struct Tile {
  const int8_t* keys = nullptr;
  alignas(64) float scales[kTilePools] = {};
  int64_t pools = 0;  // real rows, 1..16
  int64_t out = 0;    // index of its first score
};

// The C tiles of every head group of `tile` into c [groups][16 pools][16 heads].
template <typename Tiles>
GLINT_TARGET_AMX void TileProducts(const Walk& w, const Tile& tile, int32_t* c) {
  for (int64_t g = 0; g < w.groups; g += 2) {
    if (g + 1 < w.groups) {
      GroupProducts<Tiles, true>(w, tile.keys, g, c + g * 256);
    } else {
      GroupProducts<Tiles, false>(w, tile.keys, g, c + g * 256);
    }
  }
}

GLINT_TARGET_AMX void TileEpilogue(const Walk& w, const Tile& tile, const int32_t* c, float* scores) {
  const __mmask16 mask = static_cast<__mmask16>((1u << tile.pools) - 1);
  const __m512 s = _mm512_maskz_loadu_ps(mask, tile.scales);
  __m512 total = _mm512_setzero_ps();
  for (int64_t g = 0; g < w.groups; ++g) total = AddGroupTerms(w, c + g * 256, g, s, total);
  _mm512_mask_storeu_ps(scores + tile.out, mask, total);
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

// Cuts the spans into tiles of 16 pools: in place where 16 rows are inside one span, else copied (across span
// ends, or the last span's partial tile) into a scratch with zero rows after the last real one.
class TileCursor {
 public:
  TileCursor(std::span<const Int8KeySpan> spans, int64_t dim) : spans_(spans), dim_(dim) {
    for (size_t i = 0; i < std::min(kPrefetchSpans, spans.size()); ++i) Prefetch(spans[i], dim);
  }
  bool Next(Tile& tile) {
    while (next_ < spans_.size() && offset_ == spans_[next_].pools) Advance();
    if (next_ == spans_.size()) return false;
    const Int8KeySpan& span = spans_[next_];
    tile.out = out_;
    if (span.pools - offset_ >= kTilePools) {
      tile.keys = span.keys + offset_ * dim_, tile.pools = kTilePools;
      std::memcpy(tile.scales, span.scales + offset_, sizeof(tile.scales));
      offset_ += kTilePools;
    } else {
      std::memset(gathered_, 0, static_cast<size_t>(kTilePools * dim_));
      int64_t n = 0;
      while (n < kTilePools && next_ < spans_.size()) {
        const int64_t take = std::min(kTilePools - n, spans_[next_].pools - offset_);
        std::memcpy(gathered_ + n * dim_, spans_[next_].keys + offset_ * dim_, static_cast<size_t>(take * dim_));
        std::memcpy(tile.scales + n, spans_[next_].scales + offset_, static_cast<size_t>(take) * sizeof(float));
        n += take, offset_ += take;
        if (offset_ == spans_[next_].pools) Advance();
      }
      tile.keys = gathered_, tile.pools = n;
    }
    out_ += tile.pools;
    return true;
  }

 private:
  void Advance() {
    ++next_, offset_ = 0;
    if (next_ + kPrefetchSpans - 1 < spans_.size()) Prefetch(spans_[next_ + kPrefetchSpans - 1], dim_);
  }
  std::span<const Int8KeySpan> spans_;
  int64_t dim_;
  size_t next_ = 0;  // the span the next tile starts in
  int64_t offset_ = 0, out_ = 0;
  alignas(64) int8_t gathered_[kTilePools * kAmxMaxDim];
};

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

namespace {

// Software-pipelined by one tile: tile t + 1's products go to the tile unit before tile t's epilogue reads its
// stored C (reading a `tilestored` result at once stalls on the store; the tile unit and the vector ports are
// separate, so the two overlap). The C buffers alternate.
template <typename Tiles>
GLINT_TARGET_AMX void Scores(const int8_t* packed_query, const float* query_scales, const float* head_weights,
                             std::span<const Int8KeySpan> spans, int64_t heads, int64_t dim, float scale,
                             float* scores) {
  const int64_t groups = (heads + kTileHeads - 1) / kTileHeads;
  const Walk w{packed_query, query_scales, head_weights, heads, dim, (dim + kChunkDims - 1) / kChunkDims,
               groups,       scale};
  thread_local std::vector<int32_t> buffers;
  buffers.resize(2 * groups * 256);
  int32_t* c[2] = {buffers.data(), buffers.data() + groups * 256};
  auto cursor = std::make_unique<TileCursor>(spans, dim);
  Tile tiles[2];
  if (!cursor->Next(tiles[0])) return;
  ConfigureTiles<Tiles>(dim % kChunkDims);
  TileProducts<Tiles>(w, tiles[0], c[0]);
  for (int t = 0;; t ^= 1) {
    const bool more = cursor->Next(tiles[t ^ 1]);
    if (more) TileProducts<Tiles>(w, tiles[t ^ 1], c[t ^ 1]);
    TileEpilogue(w, tiles[t], c[t], scores);
    if (!more) break;
  }
  Tiles::Release();
}

}  // namespace

void ScoresInt8Amx(const int8_t* packed_query, const float* query_scales, const float* head_weights,
                   std::span<const Int8KeySpan> spans, int64_t heads, int64_t dim, float scale, float* scores,
                   AmxTiles tiles) {
  if (tiles == AmxTiles::kEmulated) {
    Scores<EmulatedTiles>(packed_query, query_scales, head_weights, spans, heads, dim, scale, scores);
  } else {
    Scores<HardwareTiles>(packed_query, query_scales, head_weights, spans, heads, dim, scale, scores);
  }
}

}  // namespace glint::indexer
