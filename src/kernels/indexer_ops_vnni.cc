// The int8 pool scores with AVX-512 VNNI (indexer_ops.h: ScoresInt8Vnni). The function carries its target
// attribute itself, so nothing here runs on a CPU without VNNI: Int8VnniSupported() is checked first.
//
// The scores are a small GEMM, dots[m][h] = Σ_c key_m[c] · query_h[c] (16 pools × 32 heads × 128 dims per cache
// block), laid out as the weight kernels do it (gemm_tile_avx512.h) with the query in the weights' place:
//   * one 64-byte operand holds 16 heads × 4 dims of the query (packed once per query, PackQueryForVnni);
//   * `vpdpbusd` multiplies it by 4 codes of one key broadcast to every lane — an embedded {1to16} broadcast
//     straight from the cache row, so no gather and no shuffle feeds the products;
//   * 16 keys are 16 int32 accumulators with heads in lanes; each query operand serves all 16.
// vpdpbusd multiplies unsigned by signed bytes, so the query codes (−127..127) go in biased to q + 128 (1..255):
//   Σ_c (q_c + 128) · k_c = Σ_c q_c · k_c + 128 · Σ_c k_c,
// with the key sums Σ k_c from one vpdpbusd against bytes of 1 per 64 codes of each key. All of it is exact int32
// (|Σ| ≤ 255 · 127 · dim < 2^31 for dim < 66,000).
// The epilogue must add the heads' fp32 terms in ascending head order per key (Int8Term's arithmetic in its
// order, so the scores are bit-exact with ScoresInt8Reference): a 16 × 16 transpose turns the accumulators to
// keys in lanes, and the terms are added one head at a time, as the reference does.
// Cost per 16 keys at the release's 32 heads × 128 dims: 1,024 vpdpbusd against 64 + 2 × 64 shuffles and 32 × 7
// epilogue operations (the gather-based kernel it replaced spent ≈ 8× longer, one 16-lane gather per 4 dims per
// 8 heads).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, see gemm_i8_avx512.cc
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/indexer_ops.h"
#include "kernels/isa.h"
#include "kernels/transpose_avx512.h"

namespace glint::indexer {
namespace {

using internal::Transpose16x16;

#define GLINT_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define GLINT_INLINE_VNNI GLINT_TARGET_VNNI inline __attribute__((always_inline))

constexpr int64_t kKeysPerTile = 16;    // one key per accumulator (and, after the transpose, per lane)
constexpr int64_t kHeadsPerBlock = 16;  // one head per 32-bit lane of a query operand

int64_t HeadBlocks(int64_t heads) { return (heads + kHeadsPerBlock - 1) / kHeadsPerBlock; }

// 128 · Σ_c key_j[c] for the 16 keys at `keys` (row stride dim), key j in lane j.
GLINT_INLINE_VNNI __m512i KeyBias(const int8_t* keys, int64_t dim) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i sums[kKeysPerTile];
  for (int j = 0; j < kKeysPerTile; ++j) {
    sums[j] = _mm512_setzero_si512();
    for (int64_t c = 0; c < dim; c += 64) {
      const __mmask64 valid = dim - c >= 64 ? ~__mmask64{0} : (__mmask64{1} << (dim - c)) - 1;
      sums[j] = _mm512_dpbusd_epi32(sums[j], ones, _mm512_maskz_loadu_epi8(valid, keys + j * dim + c));
    }
  }
  Transpose16x16(sums);  // lane j of sums[l]: key j's partial sum l
  __m512i total = sums[0];
  for (int l = 1; l < 16; ++l) total = _mm512_add_epi32(total, sums[l]);
  return _mm512_slli_epi32(total, 7);
}

// dots[j] lane l = Σ_c (q_{16b+l}[c] + 128) · key_j[c] for the head block at `packed_block` and the 16 keys at
// `keys` (row stride dim; kDim = dim when it is known at compile time, 0 otherwise). With kDim known every key's
// codes are at a constant offset from one pointer, so the 16 accumulators, the query operand and the broadcasts fit
// the registers; GCC 12 keeps the accumulators in place only when this is its own function and an empty asm pins
// them before the stores (as gemm_tile_avx512.h: checked with objdump, no stack traffic in the loop).
template <int64_t kDim>
GLINT_TARGET_VNNI __attribute__((noinline)) void HeadBlockDots(const uint8_t* packed_block, const int8_t* keys,
                                                               int64_t dim, __m512i* dots) {
  const int64_t d = kDim != 0 ? kDim : dim;
  __m512i acc[kKeysPerTile];
#pragma GCC unroll 16
  for (int j = 0; j < kKeysPerTile; ++j) acc[j] = _mm512_setzero_si512();
  for (int64_t w = 0; w < d / 4; ++w) {
    const __m512i query = _mm512_loadu_si512(packed_block + w * 64);
#pragma GCC unroll 16
    for (int j = 0; j < kKeysPerTile; ++j) {
      // acc[j] += query · key j's dims 4w..4w+3 broadcast to every head's lane ({1to16} from memory). Written
      // out because GCC 12 moves each accumulator to a scratch register and back around the intrinsic (two
      // register copies per product, seen with objdump), and does not fold the broadcast into the instruction.
      asm("vpdpbusd %2%{1to16%}, %1, %0"
          : "+v"(acc[j])
          : "v"(query), "m"(*reinterpret_cast<const int32_t*>(keys + j * d + 4 * w)));
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < kKeysPerTile; ++j) asm volatile("" : "+v"(acc[j]));
#pragma GCC unroll 16
  for (int j = 0; j < kKeysPerTile; ++j) _mm512_store_si512(dots + j, acc[j]);
}

// scores[0, 16) of the 16 keys at `keys` (row stride dim).
template <int64_t kDim>
GLINT_TARGET_VNNI void ScoreTile(const uint8_t* packed, const float* query_scales, const float* head_weights,
                                 const int8_t* keys, const float* key_scales, __mmask16 mask, int64_t heads,
                                 int64_t dim, float scale, float* scores) {
  const __m512 s = _mm512_maskz_loadu_ps(mask, key_scales);
  const __m512i bias = KeyBias(keys, dim);
  __m512 total = _mm512_setzero_ps();
  for (int64_t b = 0; b < HeadBlocks(heads); ++b) {
    __m512i dots[kKeysPerTile];
    HeadBlockDots<kDim>(packed + b * dim * kHeadsPerBlock, keys, dim, dots);
    Transpose16x16(dots);  // dots[l] lane j: head 16b + l against key j
    const int64_t heads_here = std::min(kHeadsPerBlock, heads - b * kHeadsPerBlock);
    for (int64_t l = 0; l < heads_here; ++l) {
      const int64_t h = b * kHeadsPerBlock + l;
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(dots[l], bias));
      // weight · max(dot · ((scale · t_h) · s_m), 0), as Int8Term; max(0, x) keeps a NaN x as std::max(x, 0) does.
      const __m512 factor = _mm512_mul_ps(_mm512_set1_ps(scale * query_scales[h]), s);
      const __m512 positive = _mm512_max_ps(_mm512_setzero_ps(), _mm512_mul_ps(dot, factor));
      total = _mm512_add_ps(total, _mm512_mul_ps(_mm512_set1_ps(head_weights[h]), positive));
    }
  }
  _mm512_mask_storeu_ps(scores, mask, total);
}

template <int64_t kDim>
GLINT_TARGET_VNNI void Scores(const uint8_t* packed_query, const float* query_scales, const float* head_weights,
                              const int8_t* keys, const float* key_scales, int64_t pools, int64_t heads, int64_t dim,
                              float scale, float* scores) {
  alignas(64) int8_t padded[kKeysPerTile * kVnniMaxDim];
  for (int64_t m = 0; m < pools; m += kKeysPerTile) {
    const int64_t n = std::min(kKeysPerTile, pools - m);
    const int8_t* tile = keys + m * dim;
    if (n < kKeysPerTile) {  // a partial tile: rows past n repeat row n − 1 (scored, never stored)
      for (int64_t j = 0; j < kKeysPerTile; ++j) std::memcpy(padded + j * dim, tile + std::min(j, n - 1) * dim, dim);
      tile = padded;
    }
    ScoreTile<kDim>(packed_query, query_scales, head_weights, tile, key_scales + m,
                    static_cast<__mmask16>((1u << n) - 1), heads, dim, scale, scores + m);
  }
}

}  // namespace

bool Int8VnniSupported(int64_t dim) { return dim % 4 == 0 && dim <= kVnniMaxDim && IsaSupported(Isa::kAvx512); }

int64_t VnniQueryBytes(int64_t heads, int64_t dim) { return HeadBlocks(heads) * kHeadsPerBlock * dim; }

void PackQueryForVnni(const int16_t* codes, int64_t heads, int64_t dim, uint8_t* packed) {
  const int64_t words = dim / 4;
  for (int64_t b = 0; b < HeadBlocks(heads); ++b) {
    for (int64_t w = 0; w < words; ++w) {
      for (int64_t l = 0; l < kHeadsPerBlock; ++l) {
        const int64_t h = b * kHeadsPerBlock + l;
        for (int64_t i = 0; i < 4; ++i) {
          const int code = h < heads ? codes[h * dim + 4 * w + i] : 0;  // padding heads are never added
          packed[((b * words + w) * kHeadsPerBlock + l) * 4 + i] = static_cast<uint8_t>(code + 128);
        }
      }
    }
  }
}

void ScoresInt8Vnni(const uint8_t* packed_query, const float* query_scales, const float* head_weights,
                    const int8_t* keys, const float* key_scales, int64_t pools, int64_t heads, int64_t dim, float scale,
                    float* scores) {
  // The release's index_head_dim is 128: its offsets are constants (HeadBlockDots); any other dim takes the same
  // arithmetic with a computed stride.
  if (dim == 128) {
    Scores<128>(packed_query, query_scales, head_weights, keys, key_scales, pools, heads, dim, scale, scores);
  } else {
    Scores<0>(packed_query, query_scales, head_weights, keys, key_scales, pools, heads, dim, scale, scores);
  }
}

}  // namespace glint::indexer
