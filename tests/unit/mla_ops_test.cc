// Absorbed MLA attention (kernels/mla_ops.h) on every compiled Highway target against ref::LatentAttention: head
// counts across the tiles' head vectors (1–6 heads: one vector, the rows-form output's 8-head tile; 20, 40, 80: two,
// three and five vectors on AVX-512 — the transposed output, a group of four and a remainder — and 3, 5, 10 on
// AVX2), position counts across the tiles' 6–16 positions and the output's blocks (AttendBlockRows: one short of a
// block, one block, one over, two and a partial tile), ranks across the transposed output's tiles of 6–16 values (32,
// 48, 100, 512, 520: whole tiles or single values after them), scattered positions through a paged row table. Bound:
// relative RMS error ≤ 1e-5 (fp32 dots of length rank and a softmax; measured below 1e-6 with the earlier horizontal
// sums, ≈ 2e-6 with one chain per lane).
#include "kernels/mla_ops.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/reference.h"
#include "quant/formats.h"

namespace glint {
namespace {

// A cache of `tokens` positions of normal values in pages of 16 rows (stride rank + 3), queried at `count`
// scattered positions, with the rows' pointers for the references.
struct ScatteredLatents {
  ScatteredLatents(int64_t tokens, int64_t rank, int64_t count, std::mt19937& rng) {
    constexpr int64_t kPerPage = 16;
    std::normal_distribution<float> normal;
    pages.assign((tokens + kPerPage - 1) / kPerPage, std::vector<float>(kPerPage * (rank + 3)));
    for (auto& page : pages) {
      for (float& v : page) v = normal(rng);
    }
    for (auto& page : pages) page_table.push_back(page.data());
    rows = mla::LatentRows{page_table.data(), kPerPage, rank + 3};
    for (int64_t i = 0; i < count; ++i) positions.push_back((i * 37 + 11) % tokens);
    for (int64_t p : positions) row_pointers.push_back(rows.Row(p));
  }
  std::vector<std::vector<float>> pages;
  std::vector<const float*> page_table;
  mla::LatentRows rows;
  std::vector<int64_t> positions;
  std::vector<const float*> row_pointers;
};

TEST(MlaOps, AttendMatchesReference) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t heads : {1, 4, 6, 20, 40, 80}) {
      for (int64_t rank : {32, 48, 100, 512, 520}) {
        const int64_t block = mla::AttendBlockRows(rank);
        for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{9}, int64_t{70}, block - 1, block, block + 1,
                              2 * block + 3}) {
          SCOPED_TRACE(::testing::Message() << "heads " << heads << " rank " << rank << " count " << count);
          std::mt19937 rng(static_cast<uint32_t>(heads * 1000 + rank * 10 + count));
          std::normal_distribution<float> normal;
          const ScatteredLatents latents(200, rank, count, rng);
          const mla::LatentRows& rows = latents.rows;
          const std::vector<int64_t>& positions = latents.positions;
          const std::vector<const float*>& row_pointers = latents.row_pointers;
          std::vector<float> q(heads * rank);
          for (float& v : q) v = 2.0f * normal(rng);
          std::vector<double> expected(heads * rank);
          const double scale = 1.0 / std::sqrt(32.0);
          ref::LatentAttention(q.data(), heads, rank, row_pointers.data(), count, scale, expected.data());
          std::vector<float> actual(heads * rank), scratch(mla::AttendScratchFloats(heads, count, rank));
          mla::Attend(q.data(), heads, rank, rows, positions.data(), count, static_cast<float>(scale), actual.data(),
                      scratch.data());
          double error = 0, norm = 0;
          for (size_t i = 0; i < expected.size(); ++i) {
            error += (actual[i] - expected[i]) * (actual[i] - expected[i]);
            norm += expected[i] * expected[i];
          }
          EXPECT_LT(std::sqrt(error / norm), 1e-5);
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Every head's output is computed alone (its own dot products, softmax and sums, whatever tile it shares), so the
// engine may split a token's heads over calls as it likes: 64 heads in one call, in calls of 8, or of 6 and 2, give
// the same bits (fast_dsa.cc takes all heads per task in prefill and 8 in decode).
// Attends 64 heads of one query over `count` positions whole, in calls of 8 heads, in calls of 6 and 2, and in calls
// of 40 and 24 (the fp32 kernel's groups of 3 and 2 head vectors on AVX-512), with the given kernel, and expects the
// same bits from all four.
void ExpectTheSameBitsWhateverTheHeadsPerCall(mla::AttentionPrecision precision, int64_t count, uint32_t seed) {
  const int64_t heads = 64, rank = 512;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> latents(count * rank), q(heads * rank);
  for (float& v : latents) v = normal(rng);
  for (float& v : q) v = 2.0f * normal(rng);
  const float* page = latents.data();
  const mla::LatentRows rows{&page, count, rank};
  std::vector<int64_t> positions(count);
  for (int64_t i = 0; i < count; ++i) positions[i] = (i * 17) % count;
  const auto attend = [&](int64_t h0, int64_t nh, float* out) {
    std::vector<float> scratch(mla::AttendScratchFloats(precision, nh, count, rank));
    mla::AttendWith(precision, q.data() + h0 * rank, nh, rank, rows, positions.data(), count, 0.05f, out + h0 * rank,
                    scratch.data());
  };
  std::vector<float> whole(heads * rank), by8(heads * rank), by6and2(heads * rank), by40and24(heads * rank);
  attend(0, heads, whole.data());
  attend(0, 40, by40and24.data()), attend(40, 24, by40and24.data());
  for (int64_t h0 = 0; h0 < heads; h0 += 8) attend(h0, 8, by8.data());
  for (int64_t h0 = 0; h0 < heads; h0 += 8) attend(h0, 6, by6and2.data()), attend(h0 + 6, 2, by6and2.data());
  EXPECT_EQ(0, std::memcmp(whole.data(), by8.data(), whole.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(whole.data(), by6and2.data(), whole.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(whole.data(), by40and24.data(), whole.size() * sizeof(float)));
}

TEST(MlaOps, AttendGivesTheSameBitsWhateverTheHeadsPerCall) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    ExpectTheSameBitsWhateverTheHeadsPerCall(mla::AttentionPrecision::kFp32, 131, 7);  // a block of 128 and 3 more
  }
  hwy::SetSupportedTargetsForTest(0);
}

// A bf16 cache's rows through a page table and the same rows widened to fp32 (exactly), `count` scattered
// positions of 300 and a query of `heads`: the in-place kernels' inputs and their converting twins'.
struct Bf16CacheRows {
  static constexpr int64_t kTokens = 300, kPerPage = 16;
  Bf16CacheRows(int64_t heads, int64_t rank, int64_t count) : heads(heads), rank(rank) {
    std::mt19937 rng(static_cast<uint32_t>(rank * 1000 + count));
    std::normal_distribution<float> normal;
    pages.assign((kTokens + kPerPage - 1) / kPerPage, std::vector<uint16_t>(kPerPage * rank));
    widened_pages.assign(pages.size(), std::vector<float>(kPerPage * rank));
    for (size_t pg = 0; pg < pages.size(); ++pg) {
      for (int64_t k = 0; k < kPerPage * rank; ++k) {
        pages[pg][k] = FloatToBf16(normal(rng));
        widened_pages[pg][k] = Bf16ToFloat(pages[pg][k]);
      }
      bf16_table.push_back(pages[pg].data()), fp32_table.push_back(widened_pages[pg].data());
    }
    for (int64_t i = 0; i < count; ++i) positions.push_back((i * 37 + 11) % kTokens);
    q.resize(heads * rank);
    for (float& v : q) v = normal(rng);
  }
  mla::LatentRows widened() const { return {fp32_table.data(), kPerPage, rank}; }
  mla::LatentRowsBf16 bf16() const { return {bf16_table.data(), kPerPage, rank}; }

  int64_t heads, rank;
  std::vector<std::vector<uint16_t>> pages;
  std::vector<std::vector<float>> widened_pages;
  std::vector<const uint16_t*> bf16_table;
  std::vector<const float*> fp32_table;
  std::vector<int64_t> positions;
  std::vector<float> q;
};

// mla::AttendBf16 against ref::LatentAttentionBf16, which rounds q̃, the rows and the probabilities to bf16 as the
// kernel does and computes the rest in double. What may differ, bounded per output element (h, r):
//  * the scores: fp32 sums of rank products, each product of two bf16 exact in fp32, so
//    |δ_i| ≤ scale · γ_n · Σ_k |q̂_k ĉ_ik| + u·|s_i| (u = 2⁻²⁴, n = rank + 8 additions at most in any lane's chain);
//  * the fp32 softmax: with Δ = max_i |δ_i|, each probability moves by a factor within e^{±2Δ}, plus the fp32 exp,
//    sum and division: relative ρ = e^{2Δ} − 1 + (count + 16) · u;
//  * the bf16 rounding of each probability: the same value unless bf16's rounding changes inside
//    [p_i (1 − ρ), p_i (1 + ρ)], and then by at most that interval's rounded width w_i;
//  * the output's fp32 sums: γ_m · Σ_i p̂_i |ĉ_ir| with m = count + 2, plus count · 2⁻¹²⁶ · max |ĉ| for the
//    products vdpbf16ps flushes to zero.
// So |out − ref| ≤ Σ_i w_i |ĉ_ir| + γ_m Σ_i p̂_i |ĉ_ir| + count · 2⁻¹²⁶ · max |ĉ|. A wrong row, head, pair or
// permutation of the rank moves outputs by O(Σ p |c|), hundreds of times that bound where no rounding flips.
using Bf16Attention = std::function<void(const float* q, int64_t heads, int64_t rank, const mla::LatentRows& rows,
                                         const int64_t* positions, int64_t count, float scale, float* out)>;
void ExpectWithinTheBf16Bound(const Bf16Attention& attend) {
  constexpr double u = 0x1p-24;
  const auto gamma = [&](double n) { return n * u / (1 - n * u); };
  // 1–9 heads: one vector of heads (AttendBf16's rows-form output); 20, 40, 80: 2, 3 and 5 vectors (its transposed
  // output, groups of 4 head vectors and fewer), over fewer shapes.
  for (int64_t heads : {1, 4, 6, 9, 20, 40, 80}) {
    for (int64_t rank : {16, 32, 48, 100, 512, 520}) {
      for (int64_t count : {1, 2, 3, 4, 5, 9, 70, 239, 240, 241, 255, 256, 257, 515}) {
        if (heads > 16 && ((rank != 100 && rank != 512) || (count != 5 && count != 257 && count != 515))) continue;
        SCOPED_TRACE(::testing::Message() << "heads " << heads << " rank " << rank << " count " << count);
        std::mt19937 rng(static_cast<uint32_t>(heads * 100000 + rank * 1000 + count));
        std::normal_distribution<float> normal;
        const ScatteredLatents latents(300, rank, count, rng);
        const mla::LatentRows& rows = latents.rows;
        const std::vector<int64_t>& positions = latents.positions;
        const std::vector<const float*>& row_pointers = latents.row_pointers;
        std::vector<float> q(heads * rank);
        for (float& v : q) v = normal(rng);
        const double scale = 1.0 / std::sqrt(static_cast<double>(rank));

        std::vector<double> expected(heads * rank), probabilities(heads * count);
        ref::LatentAttentionBf16(q.data(), heads, rank, row_pointers.data(), count, scale, expected.data(),
                                 probabilities.data());
        std::vector<float> actual(heads * rank, NAN);
        attend(q.data(), heads, rank, rows, positions.data(), count, static_cast<float>(scale), actual.data());
        if (::testing::Test::HasFatalFailure()) return;

        double worst = 0, largest_bound = 0, largest_sum = 0;
        for (int64_t h = 0; h < heads; ++h) {
          double delta = 0, max_c = 0;
          for (int64_t i = 0; i < count; ++i) {
            double products = 0, score = 0;
            for (int64_t k = 0; k < rank; ++k) {
              const double term = static_cast<double>(RoundToBf16(q[h * rank + k])) * RoundToBf16(row_pointers[i][k]);
              products += std::abs(term), score += term;
              max_c = std::max(max_c, std::abs(static_cast<double>(RoundToBf16(row_pointers[i][k]))));
            }
            delta = std::max(delta, scale * gamma(rank + 8) * products + u * std::abs(scale * score));
          }
          const double rho = std::expm1(2 * delta) + (count + 16) * u;
          std::vector<double> width(count);
          for (int64_t i = 0; i < count; ++i) {
            const double p = probabilities[h * count + i];
            const double low = RoundToBf16(static_cast<float>(p * (1 - rho)));
            const double high = RoundToBf16(static_cast<float>(p * (1 + rho)));
            width[i] = high - low;  // 0 where both roundings agree
          }
          for (int64_t r = 0; r < rank; ++r) {
            double flips = 0, sum = 0;
            for (int64_t i = 0; i < count; ++i) {
              const double c = std::abs(static_cast<double>(RoundToBf16(row_pointers[i][r])));
              flips += width[i] * c;
              sum += probabilities[h * count + i] * (1 + rho) * (1 + 0x1p-8) * c;
            }
            const double bound = flips + gamma(count + 2) * sum + count * 0x1p-126 * max_c;
            const double error = std::abs(actual[h * rank + r] - expected[h * rank + r]);
            ASSERT_LE(error, bound) << "head " << h << " rank element " << r << ": " << actual[h * rank + r]
                                    << " against " << expected[h * rank + r];
            worst = std::max(worst, error), largest_bound = std::max(largest_bound, bound);
            largest_sum = std::max(largest_sum, sum);
          }
        }
        // The bound is small against the outputs' scale, so the test can fail.
        EXPECT_LT(largest_bound, 0.05 * largest_sum);
      }
    }
  }
}

TEST(MlaOps, AttendBf16MatchesItsReference) {
  if (!mla::AttendBf16Supported()) GTEST_SKIP() << "this CPU has no AVX512-BF16 (vdpbf16ps)";
  ExpectWithinTheBf16Bound([](const float* q, int64_t heads, int64_t rank, const mla::LatentRows& rows,
                              const int64_t* positions, int64_t count, float scale, float* out) {
    std::vector<float> scratch(mla::AttendBf16ScratchFloats(heads, count, rank) + 1);
    mla::AttendBf16(q, heads, rank, rows, positions, count, scale, out, scratch.data() + 1);  // + 1: any alignment
  });
}

// The AMX-BF16 candidate (mla_ops_amx.cc) under the same bound: its tiles sum the same exact bf16 products in fp32
// (in another order, which the bound allows) and flush the same denormals. On the tile unit where AMX-BF16 is
// there; on the software tiles on every CPU with AVX512-BF16.
class MlaAttendBf16Amx : public ::testing::TestWithParam<AmxTiles> {
 protected:
  void SetUp() override {
    const std::string_view why = AmxBf16UnavailableReason(GetParam());
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(MlaAttendBf16Amx, MatchesItsReference) {
  const AmxTiles tiles = GetParam();
  ExpectWithinTheBf16Bound([tiles](const float* q, int64_t heads, int64_t rank, const mla::LatentRows& rows,
                                   const int64_t* positions, int64_t count, float scale, float* out) {
    std::vector<float> scratch(mla::AttendBf16AmxScratchFloats(heads, count, rank) + 1);
    mla::AttendBf16Amx(q, heads, rank, rows, positions, count, scale, out, scratch.data() + 1, tiles);
  });
}

// The in-place form over a bf16 cache's pages gives the bits of the converting form over the same rows widened.
TEST_P(MlaAttendBf16Amx, InPlaceEqualsConvertingOnBf16Rows) {
  for (int64_t rank : {32, 100, 512}) {
    for (int64_t count : {1, 17, 70, 257}) {
      SCOPED_TRACE(::testing::Message() << "rank " << rank << " count " << count);
      const Bf16CacheRows cache(/*heads=*/20, rank, count);
      std::vector<float> in_place(cache.q.size()), converted(cache.q.size());
      std::vector<float> scratch(mla::AttendBf16AmxScratchFloats(cache.heads, count, rank));
      mla::AttendBf16Amx(cache.q.data(), cache.heads, rank, cache.widened(), cache.positions.data(), count, 0.08f,
                         converted.data(), scratch.data(), GetParam());
      mla::AttendBf16AmxInPlace(cache.q.data(), cache.heads, rank, cache.bf16(), cache.positions.data(), count, 0.08f,
                                in_place.data(), scratch.data(), GetParam());
      EXPECT_EQ(0, std::memcmp(in_place.data(), converted.data(), in_place.size() * sizeof(float)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiles, MlaAttendBf16Amx, ::testing::Values(AmxTiles::kHardware, AmxTiles::kEmulated),
                         [](const ::testing::TestParamInfo<AmxTiles>& info) {
                           return info.param == AmxTiles::kHardware ? "Hardware" : "Emulated";
                         });

// As Attend: each head's output is its own computation, so any split of a token's heads over calls gives the same
// bits.
TEST(MlaOps, AttendBf16GivesTheSameBitsWhateverTheHeadsPerCall) {
  if (!mla::AttendBf16Supported()) GTEST_SKIP() << "this CPU has no AVX512-BF16 (vdpbf16ps)";
  // a block of 256 rows and a partial one, an odd count
  ExpectTheSameBitsWhateverTheHeadsPerCall(mla::AttentionPrecision::kBf16, 301, 9);
}

// AttendBf16InPlace reads rows that are bf16 already (a bf16 cache) through a page table: the same bits as AttendBf16
// given those rows widened to fp32 (its rounding of them is then exact), at ranks that are multiples of 32, across
// the output's position blocks and an odd count.
TEST(MlaOps, AttendBf16InPlaceEqualsAttendBf16OnBf16Rows) {
  if (!mla::AttendBf16Supported()) GTEST_SKIP() << "this CPU has no AVX512-BF16 (vdpbf16ps)";
  for (int64_t rank : {32, 64, 512}) {
    for (int64_t count : {1, 5, 70, 257, 515}) {
      SCOPED_TRACE(::testing::Message() << "rank " << rank << " count " << count);
      const Bf16CacheRows cache(/*heads=*/12, rank, count);
      std::vector<float> in_place(cache.q.size()), converted(cache.q.size());
      std::vector<float> scratch(mla::AttendBf16ScratchFloats(cache.heads, count, rank));
      mla::AttendBf16(cache.q.data(), cache.heads, rank, cache.widened(), cache.positions.data(), count, 0.08f,
                      converted.data(), scratch.data());
      scratch.assign(mla::AttendBf16InPlaceScratchFloats(cache.heads, count, rank), 0.0f);
      mla::AttendBf16InPlace(cache.q.data(), cache.heads, rank, cache.bf16(), cache.positions.data(), count, 0.08f,
                             in_place.data(), scratch.data());
      EXPECT_EQ(0, std::memcmp(in_place.data(), converted.data(), in_place.size() * sizeof(float)));
    }
  }
}

// --mla-attention's values: fp32 always; bf16 exactly where the kernel can run, refused elsewhere naming what is
// missing; anything else refused naming the value.
TEST(MlaOps, AttentionPrecisionParsesWhatThisCpuCanRun) {
  ASSERT_TRUE(mla::ParseAttentionPrecision("fp32").ok());
  EXPECT_EQ(mla::ParseAttentionPrecision("fp32").value(), mla::AttentionPrecision::kFp32);
  const auto bf16 = mla::ParseAttentionPrecision("bf16");
  EXPECT_EQ(bf16.ok(), mla::AttendBf16Supported());
  if (bf16.ok()) {
    EXPECT_EQ(bf16.value(), mla::AttentionPrecision::kBf16);
  } else {
    EXPECT_NE(bf16.status().message().find("AVX512-BF16"), std::string::npos) << bf16.status().ToString();
  }
  const auto bad = mla::ParseAttentionPrecision("fp16");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'fp16'"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(mla::AttentionPrecisionName(mla::AttentionPrecision::kBf16), "bf16");
  EXPECT_EQ(mla::AttentionPrecisionName(mla::AttentionPrecision::kFp32), "fp32");
  EXPECT_EQ(mla::AttentionPrecisionName(mla::AttentionPrecision::kBf16Amx), "bf16 on AMX tiles");
}

// bf16 attention moves onto the tiles exactly where the kernels are AMX and the tile unit does bf16; fp32 attention
// and every other level keep their kernel.
TEST(MlaOps, Bf16AttentionRunsOnTilesWhereTheKernelsAreAmx) {
  using mla::AttentionPrecision;
  const bool tiles = AmxBf16UnavailableReason(AmxTiles::kHardware).empty();
  EXPECT_EQ(mla::AttentionOnTiles(AttentionPrecision::kBf16, Isa::kAmx),
            tiles ? AttentionPrecision::kBf16Amx : AttentionPrecision::kBf16);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    EXPECT_EQ(mla::AttentionOnTiles(AttentionPrecision::kBf16, isa), AttentionPrecision::kBf16) << IsaName(isa);
  }
  for (Isa isa : {Isa::kAvx512, Isa::kAmx}) {
    EXPECT_EQ(mla::AttentionOnTiles(AttentionPrecision::kFp32, isa), AttentionPrecision::kFp32) << IsaName(isa);
  }
}

// On the tiles too each head's output is its own column of the products: any split of a token's heads over calls
// (the fast path's tasks) gives the same bits.
TEST(MlaOps, AttendBf16AmxGivesTheSameBitsWhateverTheHeadsPerCall) {
  const std::string_view why = AmxBf16UnavailableReason(AmxTiles::kHardware);
  if (!why.empty()) GTEST_SKIP() << "no AMX-BF16 tile unit here: " << why;
  ExpectTheSameBitsWhateverTheHeadsPerCall(mla::AttentionPrecision::kBf16Amx, 301, 9);
}

}  // namespace
}  // namespace glint
