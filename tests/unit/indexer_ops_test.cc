// The fast indexer's kernels against their specifications (kernels/indexer_ops.h): int8 scores bit for bit, bf16
// scores within fp32 rounding of a dim-term dot product; and the O(n) top-pool selection against the reference
// SelectTopPools bit for bit, ties, signed zeros, infinities and NaNs included.
#include "kernels/indexer_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "hwy/targets.h"
#include "base/worker_pool.h"
#include "fast/fast_indexer.h"
#include "kernels/isa.h"
#include "kernels/reference.h"
#include "model/dsa_cache.h"
#include "model/indexer.h"
#include "quant/formats.h"
#include "quant/kv_rows.h"

namespace glint {
namespace {

struct Shape {
  int64_t pools, heads, dim;
};
// Partial tiles of pools (not a multiple of 4), an odd head count, dims with a scalar tail.
constexpr Shape kShapes[] = {{1, 1, 16}, {7, 3, 64}, {64, 32, 128}, {33, 4, 72}, {5, 2, 17}};

TEST(IndexerOps, Int8ScoresAreBitExact) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const Shape& s : kShapes) {
    std::vector<float> query(s.heads * s.dim), weights(s.heads), key_scales(s.pools);
    std::vector<int8_t> keys(s.pools * s.dim);
    for (float& v : query) v = uniform(rng);
    for (float& v : weights) v = uniform(rng);
    for (float& v : key_scales) v = 0.01f * (1.5f + uniform(rng));
    for (int8_t& k : keys) k = static_cast<int8_t>(code(rng));
    keys[0] = -127;  // the extreme codes
    std::vector<int16_t> codes(s.heads * s.dim);
    std::vector<float> query_scales(s.heads);
    indexer::QuantizeQuery(query.data(), s.heads, s.dim, codes.data(), query_scales.data());
    std::vector<float> fast(s.pools), reference(s.pools);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.dim));
    indexer::ScoresInt8(codes.data(), query_scales.data(), weights.data(), keys.data(), key_scales.data(), s.pools,
                        s.heads, s.dim, scale, fast.data());
    indexer::ScoresInt8Reference(codes.data(), query_scales.data(), weights.data(), keys.data(), key_scales.data(),
                                 s.pools, s.heads, s.dim, scale, reference.data());
    for (int64_t m = 0; m < s.pools; ++m) {
      EXPECT_EQ(std::memcmp(&fast[m], &reference[m], sizeof(float)), 0)
          << "pool " << m << " of " << s.pools << "×" << s.heads << "×" << s.dim << ": " << fast[m] << " vs "
          << reference[m];
    }
  }
}

// One case of the int8 kernel sweeps: random query, weights, key scales and codes; the extreme code −127 in the
// last key, query head 1 zero (scale 0) and, in some cases, head 3 non-finite (NaN) where there are that many heads.
struct SweepCase {
  std::vector<float> query, weights, key_scales;  // [heads, dim], [heads], [pools]
  std::vector<int8_t> keys;                       // [pools, dim]
};
SweepCase MakeSweepCase(std::mt19937& rng, int64_t pools, int64_t heads, int64_t dim) {
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  SweepCase c{std::vector<float>(heads * dim), std::vector<float>(heads), std::vector<float>(pools),
              std::vector<int8_t>(pools * dim)};
  for (float& v : c.query) v = uniform(rng);
  for (float& v : c.weights) v = uniform(rng);
  for (float& v : c.key_scales) v = 0.01f * (1.5f + uniform(rng));
  for (int8_t& k : c.keys) k = static_cast<int8_t>(code(rng));
  c.keys[pools * dim - 1] = -127;
  if (heads >= 3) std::fill(c.query.begin() + dim, c.query.begin() + 2 * dim, 0.0f);
  // A NaN head makes every score NaN (the bits then compare equal whatever the other heads did), so only a few
  // cases carry one: the rest check every head's dot product.
  if (heads >= 5 && pools % 7 == 3) c.query[3 * dim] = std::numeric_limits<float>::quiet_NaN();
  return c;
}

// The VNNI kernel against the specification, bit for bit, over a sweep: every partial tile of 16 keys (pools
// 1..40), head counts below, at and past a 16-head block and two (the release's 32), dims multiple of 4 below, at
// and past the 64 codes of a key-sum load (72, 200: a masked tail); codes at the extremes (−127 for keys and the
// query's amax head), a zero query head (scale 0) and a non-finite one (NaN).
TEST(IndexerOps, Int8VnniScoresAreBitExact) {
  if (!indexer::Int8VnniSupported(4)) GTEST_SKIP() << "this CPU has no AVX-512 VNNI (isa.h kAvx512)";
  std::mt19937 rng(3);
  for (int64_t dim : {4, 16, 64, 72, 128, 200}) {
    for (int64_t heads : {1, 3, 5, 9, 16, 17, 32, 33}) {
      for (int64_t pools = 1; pools <= 40; pools += (pools < 18 ? 1 : 7)) {
        const SweepCase sc = MakeSweepCase(rng, pools, heads, dim);
        const std::vector<float>&query = sc.query, &weights = sc.weights, &key_scales = sc.key_scales;
        const std::vector<int8_t>& keys = sc.keys;
        std::vector<int16_t> codes(heads * dim);
        std::vector<uint8_t> packed(indexer::VnniQueryBytes(heads, dim));
        std::vector<float> query_scales(heads);
        indexer::QuantizeQuery(query.data(), heads, dim, codes.data(), query_scales.data());
        indexer::PackQueryForVnni(codes.data(), heads, dim, packed.data());
        std::vector<float> fast(pools + 1, 7.0f), reference(pools);
        const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
        indexer::ScoresInt8Vnni(packed.data(), query_scales.data(), weights.data(), keys.data(), key_scales.data(),
                                pools, heads, dim, scale, fast.data());
        indexer::ScoresInt8Reference(codes.data(), query_scales.data(), weights.data(), keys.data(), key_scales.data(),
                                     pools, heads, dim, scale, reference.data());
        for (int64_t m = 0; m < pools; ++m) {
          ASSERT_EQ(std::memcmp(&fast[m], &reference[m], sizeof(float)), 0)
              << "pool " << m << " of " << pools << "×" << heads << "×" << dim << ": " << fast[m] << " vs "
              << reference[m];
        }
        ASSERT_EQ(fast[pools], 7.0f) << "the kernel wrote past its " << pools << " scores";
      }
    }
  }
}

// The AMX kernel against the specification, bit for bit: pools 1..70 (partial tiles, several tiles) cut into
// spans of random sizes (a cache block each, tiles crossing span ends, empty spans), heads below, at and past a
// tile's 16 and a pair of tiles (32, 33), dims below, at and past a 64-dim chunk; extreme codes, a zero and a NaN
// query head, as the VNNI sweep. On the tile unit where AMX exists, and on the software model of the tiles
// (amx_emulator.h) wherever AVX-512 does.
void CheckAmxScoresBitExact(AmxTiles tiles) {
  std::mt19937 rng(5);
  for (int64_t dim : {4, 16, 64, 72, 128, 200}) {
    for (int64_t heads : {1, 3, 5, 16, 17, 32, 33}) {
      for (int64_t pools = 1; pools <= 70; pools += (pools < 20 ? 1 : 11)) {
        const SweepCase sc = MakeSweepCase(rng, pools, heads, dim);
        const std::vector<float>&query = sc.query, &weights = sc.weights, &key_scales = sc.key_scales;
        const std::vector<int8_t>& keys = sc.keys;
        std::vector<int16_t> codes(heads * dim);
        std::vector<float> query_scales(heads);
        indexer::QuantizeQuery(query.data(), heads, dim, codes.data(), query_scales.data());
        std::vector<int8_t> packed(indexer::AmxQueryBytes(heads, dim));
        indexer::PackQueryForAmx(codes.data(), heads, dim, packed.data());
        // Each span's keys copied to their own allocation, so a read past a span's end is ASan's to see.
        std::vector<std::vector<int8_t>> span_keys;
        std::vector<indexer::Int8KeySpan> spans;
        for (int64_t m = 0; m < pools;) {
          const int64_t count = std::min<int64_t>(pools - m, rng() % 3 == 0 ? 0 : 1 + rng() % 20);
          span_keys.emplace_back(keys.begin() + m * dim, keys.begin() + (m + count) * dim);
          spans.push_back({span_keys.back().data(), key_scales.data() + m, count});
          m += count;
        }
        for (size_t i = 0; i < spans.size(); ++i) spans[i].keys = span_keys[i].data();
        std::vector<float> fast(pools + 1, 7.0f), reference(pools);
        const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
        indexer::ScoresInt8Amx(packed.data(), query_scales.data(), weights.data(), spans, heads, dim, scale,
                               fast.data(), tiles);
        indexer::ScoresInt8Reference(codes.data(), query_scales.data(), weights.data(), keys.data(), key_scales.data(),
                                     pools, heads, dim, scale, reference.data());
        for (int64_t m = 0; m < pools; ++m) {
          ASSERT_EQ(std::memcmp(&fast[m], &reference[m], sizeof(float)), 0)
              << "pool " << m << " of " << pools << "×" << heads << "×" << dim << " (" << spans.size()
              << " spans): " << fast[m] << " vs " << reference[m];
        }
        ASSERT_EQ(fast[pools], 7.0f) << "the kernel wrote past its " << pools << " scores";
      }
    }
  }
}

TEST(IndexerOps, Int8AmxScoresAreBitExact) {
  if (!indexer::Int8AmxSupported(4)) GTEST_SKIP() << "no AMX here: " << AmxUnavailableReason();
  CheckAmxScoresBitExact(AmxTiles::kHardware);
}

TEST(IndexerOps, Int8AmxScoresAreBitExactOnEmulatedTiles) {
  const std::string_view why = AmxTilesUnavailableReason(AmxTiles::kEmulated);
  if (!why.empty()) GTEST_SKIP() << why;
  CheckAmxScoresBitExact(AmxTiles::kEmulated);
}

TEST(IndexerOps, Int8AmxNeedsDimMultipleOf4UpToTheBuffer) {
  EXPECT_FALSE(indexer::Int8AmxSupported(18));
  EXPECT_FALSE(indexer::Int8AmxSupported(indexer::kAmxMaxDim + 4));
}

TEST(IndexerOps, FirstAtLeastEqualsTheReference) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float palette[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, nan, inf, -inf};
  std::mt19937 rng(6);
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t n = rng() % 70;  // every tail length of every vector width
    std::vector<float> values(n);
    for (float& v : values) v = palette[rng() % 4 == 0 ? rng() % 8 : 3];  // mostly below every floor but -inf
    if (n > 0 && trial % 2 == 0) values[rng() % n] = palette[rng() % 8];
    for (float floor : {0.0f, -0.0f, 1.0f, 2.0f, inf, -inf, nan}) {
      ASSERT_EQ(indexer::FirstAtLeast(values.data(), n, floor), indexer::FirstAtLeastReference(values.data(), n, floor))
          << "n " << n << " floor " << floor << " trial " << trial;
    }
  }
}

TEST(IndexerOps, Int8VnniNeedsDimMultipleOf4) {
  EXPECT_FALSE(indexer::Int8VnniSupported(17));
  EXPECT_FALSE(indexer::Int8VnniSupported(6));
}

TEST(IndexerOps, QuantizedQueryIsWithinHalfAStep) {
  const std::vector<float> query = {0.5f, -1.0f, 0.25f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};  // 2 heads × 4
  std::vector<int16_t> codes(8);
  std::vector<float> scales(2);
  indexer::QuantizeQuery(query.data(), 2, 4, codes.data(), scales.data());
  EXPECT_EQ(codes[1], -127);
  EXPECT_EQ(scales[0], 1.0f / 127);
  EXPECT_EQ(scales[1], 0.0f);  // a zero head: scale 0, codes 0
  for (int c = 0; c < 4; ++c) {
    EXPECT_LE(std::fabs(codes[c] * scales[0] - query[c]), scales[0] / 2 * (1 + 1e-6f));
    EXPECT_EQ(codes[4 + c], 0);
  }
}

// The fp32 and bf16 kernels (heads in lanes) against the double references on every Highway target compiled:
// head counts below, at and past a 32-head block and two, partial tiles of keys (every count to 17, then 64 and
// 257), dims with and without a vector tail for the bf16 widening. Bound: fp32 accumulation of dim products then a
// sum of heads terms, |error| ≤ (dim + heads + 2) · 2^-24 · Σ_h |w_h| · scale · Σ_c |q_h[c] · k[c]|.
template <typename Key>
void ExpectFp32KernelMatchesTheReference(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t dim : {4, 17, 32, 128}) {
      for (int64_t heads : {1, 5, 31, 32, 33, 64}) {
        for (int64_t pools = 1; pools <= 257; pools += pools < 17 ? 1 : pools < 64 ? 47 : 193) {
          std::vector<float> query(heads * dim), weights(heads), keys_f(pools * dim);
          std::vector<Key> keys(pools * dim);
          for (float& v : query) v = normal(rng);
          for (float& v : weights) v = normal(rng);  // head weights can be negative
          for (int64_t i = 0; i < pools * dim; ++i) {
            if constexpr (std::is_same_v<Key, uint16_t>) {
              keys[i] = FloatToBf16(normal(rng)), keys_f[i] = Bf16ToFloat(keys[i]);
            } else {
              keys[i] = keys_f[i] = normal(rng);
            }
          }
          std::vector<float> packed(indexer::Fp32QueryFloats(heads, dim)), fast(pools + 1, 7.0f);
          indexer::PackQueryFp32(query.data(), weights.data(), heads, dim, packed.data());
          const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
          if constexpr (std::is_same_v<Key, uint16_t>) {
            indexer::ScoresBf16(packed.data(), keys.data(), pools, heads, dim, scale, fast.data());
          } else {
            indexer::ScoresFp32(packed.data(), keys.data(), pools, heads, dim, scale, fast.data());
          }
          std::vector<double> reference(pools);
          ref::IndexerScores(query.data(), weights.data(), keys_f.data(), pools, heads, dim, scale, reference.data());
          for (int64_t m = 0; m < pools; ++m) {
            double magnitude = 0;
            for (int64_t h = 0; h < heads; ++h) {
              double sum = 0;
              for (int64_t c = 0; c < dim; ++c) sum += std::fabs(query[h * dim + c] * keys_f[m * dim + c]);
              magnitude += std::fabs(weights[h]) * scale * sum;
            }
            ASSERT_NEAR(fast[m], reference[m], (dim + heads + 2) * std::ldexp(magnitude, -24))
                << "pool " << m << " of " << pools << "×" << heads << "×" << dim;
          }
          ASSERT_EQ(fast[pools], 7.0f) << "the kernel wrote past its " << pools << " scores";
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(IndexerOps, Fp32ScoresMatchTheDoubleReference) { ExpectFp32KernelMatchesTheReference<float>(2); }
TEST(IndexerOps, Bf16ScoresMatchTheDoubleReference) { ExpectFp32KernelMatchesTheReference<uint16_t>(4); }

// Every fp8 code decodes to exactly Fp8E4m3Table's value times the scale (NaN codes to NaN), on every target.
TEST(IndexerOps, Fp8DecodeIsTheTableForEveryCode) {
  std::vector<uint8_t> codes(256 + 5);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 97 % 256 ^ (i >= 256 ? 0x5a : 0));
  for (size_t i = 0; i < 256; ++i) codes[i] = static_cast<uint8_t>(i);
  const float* table = Fp8E4m3Table();
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (float scale : {1.0f, 0.037f, -2.5f}) {
      std::vector<float> out(codes.size());
      indexer::DecodeFp8(codes.data(), static_cast<int64_t>(codes.size()), scale, out.data());  // 5 past 256: a tail
      for (size_t i = 0; i < codes.size(); ++i) {
        const float expected = table[codes[i]] * scale;
        if (std::isnan(expected)) {
          EXPECT_TRUE(std::isnan(out[i])) << "code " << int{codes[i]};
        } else {
          EXPECT_EQ(std::memcmp(&out[i], &expected, sizeof(float)), 0)
              << "code " << int{codes[i]} << ": " << out[i] << " vs " << expected;
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The fp8 kernel is the fp32 one over the decoded keys: equal to ScoresFp32 on keys decoded by DecodeKvRow.
TEST(IndexerOps, Fp8ScoresAreTheFp32ScoresOfTheDecodedKeys) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t heads : {3, 32, 33}) {
    const int64_t dim = 72, pools = 21;
    std::vector<float> query(heads * dim), weights(heads), key_scales(pools), decoded(pools * dim);
    std::vector<uint8_t> keys(pools * dim);
    for (float& v : query) v = normal(rng);
    for (float& v : weights) v = normal(rng);
    for (float& v : key_scales) v = 0.01f + std::fabs(normal(rng));
    for (uint8_t& k : keys) k = FloatToFp8E4m3(normal(rng));
    for (int64_t m = 0; m < pools; ++m) {
      DecodeKvRow(KvCacheDtype::kFp8, reinterpret_cast<const std::byte*>(keys.data() + m * dim), &key_scales[m], dim,
                  decoded.data() + m * dim);
    }
    std::vector<float> packed(indexer::Fp32QueryFloats(heads, dim)), fp8(pools), fp32(pools);
    indexer::PackQueryFp32(query.data(), weights.data(), heads, dim, packed.data());
    indexer::ScoresFp8(packed.data(), keys.data(), key_scales.data(), pools, heads, dim, 0.125f, fp8.data());
    indexer::ScoresFp32(packed.data(), decoded.data(), pools, heads, dim, 0.125f, fp32.data());
    for (int64_t m = 0; m < pools; ++m) EXPECT_EQ(fp8[m], fp32[m]) << heads << " heads, pool " << m;
  }
}

// relu as std::max(0, dot): a NaN product (a NaN query head) adds nothing, as the reference's std::max(0.0, NaN).
TEST(IndexerOps, Fp32ScoresDropANanHead) {
  const int64_t heads = 3, dim = 8, pools = 5;
  std::vector<float> query(heads * dim, 0.5f), weights(heads, 1.0f), keys(pools * dim, 1.0f);
  query[dim] = std::numeric_limits<float>::quiet_NaN();  // head 1
  std::vector<float> packed(indexer::Fp32QueryFloats(heads, dim)), fast(pools);
  indexer::PackQueryFp32(query.data(), weights.data(), heads, dim, packed.data());
  indexer::ScoresFp32(packed.data(), keys.data(), pools, heads, dim, 1.0f, fast.data());
  std::vector<double> reference(pools);
  ref::IndexerScores(query.data(), weights.data(), keys.data(), pools, heads, dim, 1.0, reference.data());
  for (int64_t m = 0; m < pools; ++m) {
    EXPECT_EQ(fast[m], 8.0f) << m;  // heads 0 and 2: 8 × 0.5 each
    EXPECT_EQ(reference[m], 8.0) << m;
  }
}

void ExpectSameSelection(const std::vector<float>& scores, int64_t k) {
  std::vector<uint64_t> keys;
  const PoolSelection reference = SelectTopPools(scores, k);
  const PoolSelection fast = SelectTopPoolsLinear(scores, k, keys);
  EXPECT_EQ(fast.pools, reference.pools) << "k " << k << " of " << scores.size();
  if (k < static_cast<int64_t>(scores.size())) {  // the fused threshold select: pieces into 3 collectors
    std::mt19937 rng(static_cast<uint32_t>(scores.size() * 31 + k));
    TopKeyCollector collectors[3];
    for (TopKeyCollector& c : collectors) c.Reset(k + 1);
    for (int64_t m = 0; m < static_cast<int64_t>(scores.size());) {
      const int64_t count = std::min<int64_t>(static_cast<int64_t>(scores.size()) - m, 1 + rng() % 300);
      collectors[rng() % 3].Add(scores.data() + m, m, count);
      m += count;
    }
    std::vector<uint64_t> merged;
    for (TopKeyCollector& c : collectors) merged.insert(merged.end(), c.keys().begin(), c.keys().end());
    const PoolSelection fused = SelectTopPoolsFromKeys(scores, k, merged);
    EXPECT_EQ(fused.pools, reference.pools) << "collectors, k " << k << " of " << scores.size();
    EXPECT_TRUE(std::memcmp(&fused.margin, &reference.margin, sizeof(float)) == 0 ||
                (std::isnan(fused.margin) && std::isnan(reference.margin)))
        << fused.margin << " vs " << reference.margin;
  }
  EXPECT_EQ(std::memcmp(&fast.margin, &reference.margin, sizeof(float)) == 0 ||
                (std::isnan(fast.margin) && std::isnan(reference.margin)),
            true)
      << fast.margin << " vs " << reference.margin;
}

TEST(IndexerSelection, LinearSelectionEqualsTheReferenceWithTies) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + rng() % 600, k = 1 + rng() % (n + 3);
    // Few distinct values, so ties are everywhere, plus the special values.
    const float palette[] = {0.0f,
                             -0.0f,
                             1.0f,
                             -1.0f,
                             2.5f,
                             1e-38f,
                             -1e-45f,
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN(),
                             3.0f,
                             3.0f};
    std::vector<float> scores(n);
    for (float& v : scores)
      v = trial % 3 == 0 ? std::ldexp(static_cast<float>(rng() % 1000), -10) : palette[rng() % 12];
    ExpectSameSelection(scores, k);
  }
  // All equal: the lowest indices win; all NaN too.
  ExpectSameSelection(std::vector<float>(100, 0.5f), 10);
  ExpectSameSelection(std::vector<float>(50, std::numeric_limits<float>::quiet_NaN()), 7);
}

TEST(IndexerSelection, LinearSelectionAtDecodeSize) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> scores(262144);                        // 1M positions of kpool 4
  for (float& v : scores) v = std::max(0.0f, normal(rng));  // ReLU'd scores: a quarter million, half of them 0
  ExpectSameSelection(scores, 512);
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

// The fast indexer end to end on an int8 cache at the release's widths (e 128, 32 heads, K = 512 pools), 9,000
// pools (5 chunks of 2,048 over 2 workers, so each worker's collector sees several chunks; and on one thread):
// the selection — pools and margin, bit for bit — equals SelectTopPools of the specification's scores
// (ScoresInt8Reference on the cached codes, exact in int32 whichever kernel the CPU runs: AMX, VNNI or Highway).
// Every 7th pool repeats an earlier key, so equal scores straddle the K-th place.
TEST(IndexerSelection, FastSelectPoolsOnAnInt8CacheEqualsTheReference) {
  ModelConfig config;
  config.kv_lora_rank = 8, config.index_head_dim = 128, config.index_kpool = 4, config.index_topk = 2048;
  const int64_t heads = 32, e = config.index_head_dim, pools = 9000;
  DsaCache cache = NewDsaCache(config, KvCacheDtype::kInt8);
  ASSERT_TRUE(PrepareDsaCache(cache, config, pools * config.index_kpool).ok());
  cache.tokens = pools * config.index_kpool;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> key(e), query(heads * e), weights(heads);
  for (int64_t m = 0; m < pools; ++m) {
    if (m % 7 == 6) {
      cache.LoadPooledKey(m / 2, key.data());  // a decoded int8 row re-encodes to the same codes and scale
    } else {
      for (float& v : key) v = normal(rng);
    }
    cache.StorePooledKey(m, key.data());
  }
  for (float& v : query) v = normal(rng);
  for (float& v : weights) v = std::fabs(normal(rng));
  std::vector<int16_t> codes(heads * e);
  std::vector<float> query_scales(heads), reference_scores(pools);
  indexer::QuantizeQuery(query.data(), heads, e, codes.data(), query_scales.data());
  for (int64_t m = 0; m < pools; ++m) {
    indexer::ScoresInt8Reference(codes.data(), query_scales.data(), weights.data(),
                                 reinterpret_cast<const int8_t*>(cache.PooledValues(m)), cache.PooledScale(m), 1, heads,
                                 e, 1.0f / std::sqrt(static_cast<float>(e)), &reference_scores[m]);
  }
  const PoolSelection reference = SelectTopPools(reference_scores, config.IndexTopkPools());
  WorkerPool workers(2);
  // Every kernel level this CPU has (--isa caps the indexer's kernels too: AMX, VNNI, then Highway).
  for (const Isa isa : SupportedIsas()) {
    const FastIndexerQuery fast_query{query.data(), weights.data(), heads, cache.tokens - 1, isa};
    for (WorkerPool* pool : {static_cast<WorkerPool*>(nullptr), &workers}) {
      const PoolSelection fast = FastSelectPools(cache, fast_query, config.IndexTopkPools(), pool);
      EXPECT_EQ(fast.pools, reference.pools) << (pool ? "2 workers" : "one thread") << ", --isa " << IsaName(isa);
      EXPECT_EQ(std::memcmp(&fast.margin, &reference.margin, sizeof(float)), 0)
          << fast.margin << " vs " << reference.margin << ", --isa " << IsaName(isa);
    }
  }
}

}  // namespace
}  // namespace glint
