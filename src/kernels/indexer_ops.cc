// Highway implementation of indexer_ops.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/indexer_ops.cc"
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
// foreach_target.h re-includes this file once per target and must come first.
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/indexer_ops.h"
// clang-format on

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "quant/formats.h"

HWY_BEFORE_NAMESPACE();
namespace glint::indexer {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kPools = 4;  // pools per tile; two heads per pass, so 8 int32 accumulators stay in registers

// One score epilogue term, shared by the kernel and the reference so the int8 path is bit-exact.
HWY_INLINE float Int8Term(int32_t dot, float scale, float query_scale, float key_scale, float weight) {
  return weight * std::max(static_cast<float>(dot) * (scale * query_scale * key_scale), 0.0f);
}

// dots[a · kPools + i] = Σ_c q[a][c] · k[i][c] for 2 query heads × 4 pools (k rows repeat a valid row in a
// partial tile). Full vectors first, then a scalar tail; integer sums, so the order does not matter.
HWY_INLINE void DotTileInt8(const int16_t* const* q, const int8_t* const* k, int64_t dim, int32_t* dots) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const int64_t lanes = hn::Lanes(d16);
  auto a0 = hn::Zero(d32), a1 = hn::Zero(d32), a2 = hn::Zero(d32), a3 = hn::Zero(d32);
  auto b0 = hn::Zero(d32), b1 = hn::Zero(d32), b2 = hn::Zero(d32), b3 = hn::Zero(d32);
  auto odd = hn::Zero(d32);  // second half of the widening products where the target has one (x86: unused)
  int64_t c = 0;
  for (; c + lanes <= dim; c += lanes) {
    const auto k0 = hn::PromoteTo(d16, hn::LoadU(d8, k[0] + c)), k1 = hn::PromoteTo(d16, hn::LoadU(d8, k[1] + c));
    const auto k2 = hn::PromoteTo(d16, hn::LoadU(d8, k[2] + c)), k3 = hn::PromoteTo(d16, hn::LoadU(d8, k[3] + c));
    const auto q0 = hn::LoadU(d16, q[0] + c), q1 = hn::LoadU(d16, q[1] + c);
    auto o0 = hn::Zero(d32), o1 = hn::Zero(d32), o2 = hn::Zero(d32), o3 = hn::Zero(d32);
    auto p0 = hn::Zero(d32), p1 = hn::Zero(d32), p2 = hn::Zero(d32), p3 = hn::Zero(d32);
    a0 = hn::ReorderWidenMulAccumulate(d32, q0, k0, a0, o0), a1 = hn::ReorderWidenMulAccumulate(d32, q0, k1, a1, o1);
    a2 = hn::ReorderWidenMulAccumulate(d32, q0, k2, a2, o2), a3 = hn::ReorderWidenMulAccumulate(d32, q0, k3, a3, o3);
    b0 = hn::ReorderWidenMulAccumulate(d32, q1, k0, b0, p0), b1 = hn::ReorderWidenMulAccumulate(d32, q1, k1, b1, p1);
    b2 = hn::ReorderWidenMulAccumulate(d32, q1, k2, b2, p2), b3 = hn::ReorderWidenMulAccumulate(d32, q1, k3, b3, p3);
    // Fold the odd halves in now (a no-op add of zeros on x86) so only 8 accumulators live across iterations.
    a0 = hn::Add(a0, o0), a1 = hn::Add(a1, o1), a2 = hn::Add(a2, o2), a3 = hn::Add(a3, o3);
    b0 = hn::Add(b0, p0), b1 = hn::Add(b1, p1), b2 = hn::Add(b2, p2), b3 = hn::Add(b3, p3);
  }
  (void)odd;
  const auto sum = [&](auto v) { return static_cast<int32_t>(hn::GetLane(hn::SumOfLanes(d32, v))); };
  dots[0] = sum(a0), dots[1] = sum(a1), dots[2] = sum(a2), dots[3] = sum(a3);
  dots[4] = sum(b0), dots[5] = sum(b1), dots[6] = sum(b2), dots[7] = sum(b3);
  for (; c < dim; ++c) {
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t i = 0; i < kPools; ++i) dots[a * kPools + i] += int32_t{q[a][c]} * int32_t{k[i][c]};
    }
  }
}

void ScoresInt8(const int16_t* query_codes, const float* query_scales, const float* head_weights, const int8_t* keys,
                const float* key_scales, int64_t pools, int64_t heads, int64_t dim, float scale, float* scores) {
  int32_t dots[2 * kPools];
  const int8_t* k[kPools];
  const int16_t* q[2];
  for (int64_t m = 0; m < pools; m += kPools) {
    const int64_t np = std::min(kPools, pools - m);
    for (int64_t i = 0; i < kPools; ++i) k[i] = keys + (m + std::min(i, np - 1)) * dim;
    float total[kPools] = {0, 0, 0, 0};
    for (int64_t h = 0; h < heads; h += 2) {
      const int64_t nh = std::min<int64_t>(2, heads - h);
      q[0] = query_codes + h * dim, q[1] = query_codes + (h + nh - 1) * dim;
      DotTileInt8(q, k, dim, dots);
      for (int64_t a = 0; a < nh; ++a) {
        for (int64_t i = 0; i < np; ++i) {
          total[i] +=
              Int8Term(dots[a * kPools + i], scale, query_scales[h + a], key_scales[m + i], head_weights[h + a]);
        }
      }
    }
    for (int64_t i = 0; i < np; ++i) scores[m + i] = total[i];
  }
}

// fp32 products with heads in lanes (indexer_ops.h ScoresFp32): a tile of kKeys keys × one 32-head block keeps
// kKeys · kVectors accumulators; each of a key's values is broadcast into one multiply-add per vector of heads, so
// no horizontal sum runs per (head, key) — one per key and block at the end. kKeys fits the accumulators and the
// block's query vectors into the target's registers (AVX-512: 8 keys × 2 vectors; AVX2: 2 × 4).
template <class D>
struct Fp32Tiling {
  static constexpr int64_t kVectors = kFp32HeadBlock / static_cast<int64_t>(hn::MaxLanes(D()));
  static constexpr int64_t kKeys = kVectors <= 2 ? 8 : kVectors == 4 ? 2 : 1;
};

// total[j] += Σ_{h in the block} w_h · relu(scale · Σ_c q_h[c] · key_j[c]) for the kKeys keys of `key`.
template <class D>
HWY_INLINE void Fp32BlockTile(D d, const float* block, const float* weights, const float* const* key, int64_t dim,
                              float scale, float* total) {
  using T = Fp32Tiling<D>;
  constexpr int64_t kKeys = T::kKeys, kVectors = T::kVectors;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<D> acc[kKeys][kVectors];
  for (int64_t j = 0; j < kKeys; ++j) {
    for (int64_t v = 0; v < kVectors; ++v) acc[j][v] = hn::Zero(d);
  }
  for (int64_t c = 0; c < dim; ++c) {
    hn::Vec<D> q[kVectors];
    for (int64_t v = 0; v < kVectors; ++v) q[v] = hn::LoadU(d, block + c * kFp32HeadBlock + v * lanes);
    for (int64_t j = 0; j < kKeys; ++j) {
      const auto k = hn::Set(d, key[j][c]);
      for (int64_t v = 0; v < kVectors; ++v) acc[j][v] = hn::MulAdd(q[v], k, acc[j][v]);
    }
  }
  const auto zero = hn::Zero(d), scale_v = hn::Set(d, scale);
  for (int64_t j = 0; j < kKeys; ++j) {
    auto sum = hn::Zero(d);
    for (int64_t v = 0; v < kVectors; ++v) {
      const auto dot = hn::Mul(scale_v, acc[j][v]);
      // relu as std::max(0.0f, dot): a NaN dot gives 0. Padding heads have weight 0 and dot 0.
      const auto positive = hn::IfThenElse(hn::Gt(dot, zero), dot, zero);
      sum = hn::MulAdd(hn::LoadU(d, weights + v * lanes), positive, sum);
    }
    total[j] += hn::GetLane(hn::SumOfLanes(d, sum));
  }
}

// scores of `pools` keys given as rows of fp32 (row(m, slot) returns key m's dim values, valid until the next
// call for that slot).
template <class Rows>
HWY_INLINE void ScoresFp32Rows(const float* packed_query, int64_t pools, int64_t heads, int64_t dim, float scale,
                               float* scores, Rows&& row) {
  const hn::ScalableTag<float> d;
  constexpr int64_t kKeys = Fp32Tiling<decltype(d)>::kKeys;
  const int64_t blocks = (heads + kFp32HeadBlock - 1) / kFp32HeadBlock;
  const float* weights = packed_query + blocks * dim * kFp32HeadBlock;
  const float* key[kKeys];
  for (int64_t m = 0; m < pools; m += kKeys) {
    const int64_t n = std::min(kKeys, pools - m);
    for (int64_t j = 0; j < kKeys; ++j) key[j] = row(m + std::min(j, n - 1), j);  // a partial tile repeats a row
    float total[kKeys] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      Fp32BlockTile(d, packed_query + b * dim * kFp32HeadBlock, weights + b * kFp32HeadBlock, key, dim, scale, total);
    }
    for (int64_t j = 0; j < n; ++j) scores[m + j] = total[j];
  }
}

void ScoresFp32(const float* packed_query, const float* keys, int64_t pools, int64_t heads, int64_t dim, float scale,
                float* scores) {
  ScoresFp32Rows(packed_query, pools, heads, dim, scale, scores, [&](int64_t m, int64_t) { return keys + m * dim; });
}

// bf16 keys widened to fp32 one tile at a time (a key per slot of a small buffer), then the fp32 tile.
void ScoresBf16(const float* packed_query, const uint16_t* keys, int64_t pools, int64_t heads, int64_t dim, float scale,
                float* scores) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::bfloat16_t, decltype(df)> dbf;
  constexpr int64_t kKeys = Fp32Tiling<decltype(df)>::kKeys;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  thread_local std::vector<float> widened;
  widened.resize(kKeys * dim);
  const auto* bf = reinterpret_cast<const hwy::bfloat16_t*>(keys);
  ScoresFp32Rows(packed_query, pools, heads, dim, scale, scores, [&](int64_t m, int64_t slot) {
    float* out = widened.data() + slot * dim;
    int64_t c = 0;
    for (; c + lanes <= dim; c += lanes) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dbf, bf + m * dim + c)), df, out + c);
    for (; c < dim; ++c) out[c] = hwy::F32FromBF16(bf[m * dim + c]);
    return static_cast<const float*>(out);
  });
}

// fp8 (E4M3FN) codes to their fp32 values, exactly Fp8E4m3Table's: a normal code's exponent and mantissa bits move
// into place with the bias difference (127 − 7) added; a subnormal one (exponent 0) is m · 2^-9, exact in fp32;
// 0x7F / 0xFF are NaN; the sign bit is copied (0x80 is −0).
template <class DF>
HWY_INLINE hn::Vec<DF> Fp8ToFloat(DF df, hn::Vec<hn::RebindToUnsigned<DF>> code) {
  const hn::RebindToUnsigned<DF> du;
  const auto magnitude = hn::And(code, hn::Set(du, 0x7f));
  const auto sign = hn::ShiftLeft<24>(hn::And(code, hn::Set(du, 0x80)));
  const auto normal = hn::BitCast(df, hn::Add(hn::ShiftLeft<20>(magnitude), hn::Set(du, (127u - 7u) << 23)));
  const auto subnormal = hn::Mul(hn::ConvertTo(df, magnitude), hn::Set(df, 1.0f / 512.0f));
  auto value = hn::IfThenElse(hn::RebindMask(df, hn::Lt(magnitude, hn::Set(du, 8))), subnormal, normal);
  value = hn::IfThenElse(hn::RebindMask(df, hn::Eq(magnitude, hn::Set(du, 0x7f))),
                         hn::Set(df, std::numeric_limits<float>::quiet_NaN()), value);
  return hn::Or(value, hn::BitCast(df, sign));
}

void DecodeFp8(const uint8_t* codes, int64_t n, float scale, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto s = hn::Set(df, scale);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(Fp8ToFloat(df, hn::PromoteTo(du, hn::LoadU(d8, codes + i))), s), df, out + i);
  }
  const float* table = Fp8E4m3Table();
  for (; i < n; ++i) out[i] = table[codes[i]] * scale;
}

// fp8 keys decoded to fp32 a tile at a time (value = table[code] · the row's scale, as DecodeKvRow), then the fp32
// tile.
void ScoresFp8(const float* packed_query, const uint8_t* keys, const float* key_scales, int64_t pools, int64_t heads,
               int64_t dim, float scale, float* scores) {
  constexpr int64_t kKeys = Fp32Tiling<hn::ScalableTag<float>>::kKeys;
  thread_local std::vector<float> decoded;
  decoded.resize(kKeys * dim);
  ScoresFp32Rows(packed_query, pools, heads, dim, scale, scores, [&](int64_t m, int64_t slot) {
    float* out = decoded.data() + slot * dim;
    DecodeFp8(keys + m * dim, dim, key_scales[m], out);
    return static_cast<const float*>(out);
  });
}

int64_t FirstAtLeast(const float* values, int64_t count, float floor) {
  const hn::ScalableTag<float> df;
  const int64_t lanes = hn::Lanes(df);
  const auto f = hn::Set(df, floor);
  int64_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    const intptr_t first = hn::FindFirstTrue(df, hn::Ge(hn::LoadU(df, values + i), f));
    if (first >= 0) return i + first;
  }
  for (; i < count; ++i) {
    if (values[i] >= floor) return i;
  }
  return count;
}

}  // namespace HWY_NAMESPACE
}  // namespace glint::indexer
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glint::indexer {
HWY_EXPORT(ScoresInt8);
HWY_EXPORT(ScoresFp32);
HWY_EXPORT(ScoresBf16);
HWY_EXPORT(ScoresFp8);
HWY_EXPORT(DecodeFp8);
HWY_EXPORT(FirstAtLeast);

int64_t FirstAtLeast(const float* values, int64_t count, float floor) {
  return HWY_DYNAMIC_DISPATCH(FirstAtLeast)(values, count, floor);
}

int64_t FirstAtLeastReference(const float* values, int64_t count, float floor) {
  for (int64_t i = 0; i < count; ++i) {
    if (values[i] >= floor) return i;
  }
  return count;
}

void ScoresInt8(const int16_t* query_codes, const float* query_scales, const float* head_weights, const int8_t* keys,
                const float* key_scales, int64_t pools, int64_t heads, int64_t dim, float scale, float* scores) {
  HWY_DYNAMIC_DISPATCH(ScoresInt8)
  (query_codes, query_scales, head_weights, keys, key_scales, pools, heads, dim, scale, scores);
}

void ScoresFp8(const float* packed_query, const uint8_t* keys, const float* key_scales, int64_t pools, int64_t heads,
               int64_t dim, float scale, float* scores) {
  HWY_DYNAMIC_DISPATCH(ScoresFp8)(packed_query, keys, key_scales, pools, heads, dim, scale, scores);
}

void DecodeFp8(const uint8_t* codes, int64_t n, float scale, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeFp8)(codes, n, scale, out);
}

int64_t Fp32QueryFloats(int64_t heads, int64_t dim) {
  const int64_t blocks = (heads + kFp32HeadBlock - 1) / kFp32HeadBlock;
  return blocks * kFp32HeadBlock * (dim + 1);
}

void PackQueryFp32(const float* query, const float* head_weights, int64_t heads, int64_t dim, float* packed) {
  const int64_t blocks = (heads + kFp32HeadBlock - 1) / kFp32HeadBlock;
  float* weights = packed + blocks * dim * kFp32HeadBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t l = 0; l < kFp32HeadBlock; ++l) {
      const int64_t h = b * kFp32HeadBlock + l;
      for (int64_t c = 0; c < dim; ++c) packed[(b * dim + c) * kFp32HeadBlock + l] = h < heads ? query[h * dim + c] : 0;
      weights[h] = h < heads ? head_weights[h] : 0;
    }
  }
}

void ScoresFp32(const float* packed_query, const float* keys, int64_t pools, int64_t heads, int64_t dim, float scale,
                float* scores) {
  HWY_DYNAMIC_DISPATCH(ScoresFp32)(packed_query, keys, pools, heads, dim, scale, scores);
}

void ScoresBf16(const float* packed_query, const uint16_t* keys, int64_t pools, int64_t heads, int64_t dim, float scale,
                float* scores) {
  HWY_DYNAMIC_DISPATCH(ScoresBf16)(packed_query, keys, pools, heads, dim, scale, scores);
}

void QuantizeQuery(const float* query, int64_t heads, int64_t dim, int16_t* codes, float* scales) {
  for (int64_t h = 0; h < heads; ++h) {
    const float* q = query + h * dim;
    float amax = 0.0f;
    bool finite = true;
    for (int64_t c = 0; c < dim; ++c) finite = finite && std::isfinite(q[c]), amax = std::max(amax, std::fabs(q[c]));
    const float inverse = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
    scales[h] = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
    for (int64_t c = 0; c < dim; ++c) {
      codes[h * dim + c] = static_cast<int16_t>(std::clamp(std::nearbyint(q[c] * inverse), -127.0f, 127.0f));
    }
  }
}

void ScoresInt8Reference(const int16_t* query_codes, const float* query_scales, const float* head_weights,
                         const int8_t* keys, const float* key_scales, int64_t pools, int64_t heads, int64_t dim,
                         float scale, float* scores) {
  for (int64_t m = 0; m < pools; ++m) {
    float total = 0.0f;
    for (int64_t h = 0; h < heads; ++h) {
      int32_t dot = 0;
      for (int64_t c = 0; c < dim; ++c) dot += int32_t{query_codes[h * dim + c]} * int32_t{keys[m * dim + c]};
      total += HWY_STATIC_DISPATCH(Int8Term)(dot, scale, query_scales[h], key_scales[m], head_weights[h]);
    }
    scores[m] = total;
  }
}

void ScoresBf16Reference(const float* query, const float* head_weights, const uint16_t* keys, int64_t pools,
                         int64_t heads, int64_t dim, float scale, float* scores) {
  for (int64_t m = 0; m < pools; ++m) {
    double total = 0.0;
    for (int64_t h = 0; h < heads; ++h) {
      double dot = 0.0;
      for (int64_t c = 0; c < dim; ++c) dot += static_cast<double>(query[h * dim + c]) * Bf16ToFloat(keys[m * dim + c]);
      total += static_cast<double>(head_weights[h]) * std::max(scale * dot, 0.0);
    }
    scores[m] = static_cast<float>(total);
  }
}

}  // namespace glint::indexer
#endif  // HWY_ONCE
