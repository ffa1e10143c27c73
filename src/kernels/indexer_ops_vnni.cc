// The int8 pool scores with AVX-512 VNNI (indexer_ops.h: ScoresInt8Vnni). The function carries its target
// attribute itself, so nothing here runs on a CPU without VNNI: Int8VnniSupported() is checked first.
//
// Layout trick: the pooled keys of a cache block are rows [pools, dim] of int8. One vpgatherdd takes 4 consecutive
// codes of each of 16 rows (16 keys × 4 dims, one key per 32-bit lane), so vpdpbusd against a query's 4 codes
// broadcast to every lane adds 4 products to each of 16 keys' dot products at once: the dot products end up one
// key per lane, with no horizontal sum, and one gather feeds every head of a group (up to 8 accumulators).
// vpdpbusd multiplies unsigned by signed bytes, so the query codes (−127..127) are biased to q + 128 (1..255):
//   Σ_c (q_c + 128) · k_c = Σ_c q_c · k_c + 128 · Σ_c k_c,
// and the key sums Σ k_c come from one more vpdpbusd against bytes of 1. All of it is exact int32
// (|Σ| ≤ 255 · 127 · dim < 2^31 for dim < 66,000); the fp32 epilogue is Int8Term's arithmetic, in its order.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, see gemm_i8_avx512.cc
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/indexer_ops.h"
#include "kernels/isa.h"

namespace glint::indexer {
namespace {

#define GLINT_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

constexpr int64_t kKeysPerTile = 16;  // one key per 32-bit lane of a zmm register

// Scores of up to 16 keys (`mask`), heads [h0, h0 + kGroup) of which `heads_here` are real; the others repeat the
// group's first head and are not added. `total` accumulates the weighted terms in ascending head order.
template <int kGroup>
GLINT_TARGET_VNNI inline __m512 AddHeadGroup(const uint32_t* biased, const float* query_scales,
                                             const float* head_weights, const int8_t* keys, __mmask16 mask,
                                             __m512 key_scales, int64_t h0, int64_t heads_here, int64_t dim,
                                             float scale, __m512 total) {
  const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(static_cast<int>(dim)));
  const __m512i ones = _mm512_set1_epi8(1);
  const int64_t words = dim / 4;  // 4 codes per 32-bit word
  const uint32_t* q[kGroup];
  for (int a = 0; a < kGroup; ++a) q[a] = biased + (h0 + (a < heads_here ? a : 0)) * words;
  __m512i acc[kGroup];
  for (int a = 0; a < kGroup; ++a) acc[a] = _mm512_setzero_si512();
  __m512i key_sums = _mm512_setzero_si512();
  for (int64_t w = 0; w < words; ++w) {
    const __m512i k = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, rows, keys + 4 * w, 1);
    key_sums = _mm512_dpbusd_epi32(key_sums, ones, k);
    for (int a = 0; a < kGroup; ++a) {
      acc[a] = _mm512_dpbusd_epi32(acc[a], _mm512_set1_epi32(static_cast<int>(q[a][w])), k);
    }
  }
  const __m512i bias = _mm512_slli_epi32(key_sums, 7);  // 128 · Σ k
  for (int a = 0; a < heads_here; ++a) {
    const int64_t h = h0 + a;
    const __m512 dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[a], bias));
    // weight · max(dot · ((scale · t_h) · s_m), 0), as Int8Term; max(0, x) keeps a NaN x as std::max(x, 0) does.
    const __m512 factor = _mm512_mul_ps(_mm512_set1_ps(scale * query_scales[h]), key_scales);
    const __m512 positive = _mm512_max_ps(_mm512_setzero_ps(), _mm512_mul_ps(dot, factor));
    total = _mm512_add_ps(total, _mm512_mul_ps(_mm512_set1_ps(head_weights[h]), positive));
  }
  return total;
}

template <int kGroup>
GLINT_TARGET_VNNI void ScoresWithGroup(const uint8_t* biased_codes, const float* query_scales,
                                       const float* head_weights, const int8_t* keys, const float* key_scales,
                                       int64_t pools, int64_t heads, int64_t dim, float scale, float* scores) {
  const auto* biased = reinterpret_cast<const uint32_t*>(biased_codes);
  for (int64_t m = 0; m < pools; m += kKeysPerTile) {
    const int64_t n = std::min(kKeysPerTile, pools - m);
    const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
    const __m512 s = _mm512_maskz_loadu_ps(mask, key_scales + m);
    __m512 total = _mm512_setzero_ps();
    for (int64_t h0 = 0; h0 < heads; h0 += kGroup) {
      total = AddHeadGroup<kGroup>(biased, query_scales, head_weights, keys + m * dim, mask, s, h0,
                                   std::min<int64_t>(kGroup, heads - h0), dim, scale, total);
    }
    _mm512_mask_storeu_ps(scores + m, mask, total);
  }
}

}  // namespace

bool Int8VnniSupported(int64_t dim) { return dim % 4 == 0 && IsaSupported(Isa::kAvx512); }

void BiasQueryCodes(const int16_t* codes, int64_t heads, int64_t dim, uint8_t* biased) {
  for (int64_t i = 0; i < heads * dim; ++i) biased[i] = static_cast<uint8_t>(codes[i] + 128);
}

void ScoresInt8Vnni(const uint8_t* biased_codes, const float* query_scales, const float* head_weights,
                    const int8_t* keys, const float* key_scales, int64_t pools, int64_t heads, int64_t dim, float scale,
                    float* scores) {
  // 8 heads share a gather where there are that many (the release has 32); fewer waste less with 4.
  if (heads >= 8) {
    ScoresWithGroup<8>(biased_codes, query_scales, head_weights, keys, key_scales, pools, heads, dim, scale, scores);
  } else {
    ScoresWithGroup<4>(biased_codes, query_scales, head_weights, keys, key_scales, pools, heads, dim, scale, scores);
  }
}

}  // namespace glint::indexer
