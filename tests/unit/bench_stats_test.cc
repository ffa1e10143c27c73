// Percentiles, summaries, the two --range-ratio conventions and the workload RNG of glint bench.
#include <cmath>
#include <set>

#include "bench/lengths.h"
#include "bench/random_tokens.h"
#include "bench/stats.h"
#include "test_util.h"

namespace glint::bench {
namespace {

TEST(BenchPercentile, LinearInterpolationLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], [50, 90, 99]) == [2.5, 3.7, 3.97]
  const std::vector<double> values = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(PercentileOfSorted(values, 50), 2.5);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(values, 90), 3.7);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(values, 99), 3.97);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(values, 0), 1);
  EXPECT_DOUBLE_EQ(PercentileOfSorted(values, 100), 4);
  // numpy.percentile([10, 20, 40], 90) == 36 (rank 1.8: 20 + 0.8 · 20)
  const std::vector<double> three = {10, 20, 40};
  EXPECT_DOUBLE_EQ(PercentileOfSorted(three, 90), 36);
  const std::vector<double> one = {7};
  EXPECT_DOUBLE_EQ(PercentileOfSorted(one, 99), 7);
}

TEST(BenchSummary, StatisticsOfUnsortedValuesIgnoringNaN) {
  const Summary summary = Summarize({9, 2, kNaN, 4, 4, 5, 4, 7, 5});
  EXPECT_EQ(summary.count, 8);
  EXPECT_DOUBLE_EQ(summary.mean, 5);
  EXPECT_DOUBLE_EQ(summary.stddev, 2);  // the population standard deviation of {2,4,4,4,5,5,7,9}
  EXPECT_DOUBLE_EQ(summary.median, 4.5);
  EXPECT_DOUBLE_EQ(summary.min, 2);
  EXPECT_DOUBLE_EQ(summary.max, 9);
  EXPECT_DOUBLE_EQ(summary.p90, 7 + 0.3 * 2);  // rank 6.3 between 7 and 9
  EXPECT_NEAR(summary.p99, 7 + 0.93 * 2, 1e-12);

  const Summary empty = Summarize({kNaN});
  EXPECT_EQ(empty.count, 0);
  EXPECT_TRUE(std::isnan(empty.mean));
  EXPECT_TRUE(std::isnan(empty.p99));
}

TEST(BenchLengths, InferenceXConventionIsRatioTimesLengthToLength) {
  ASSERT_OK_AND_ASSIGN(LengthRange a, ComputeLengthRange(1024, 0.8, RangeConvention::kInferenceX));
  EXPECT_EQ(a.min, 819);  // ⌊819.2⌋
  EXPECT_EQ(a.max, 1024);
  ASSERT_OK_AND_ASSIGN(LengthRange fixed, ComputeLengthRange(8192, 1.0, RangeConvention::kInferenceX));
  EXPECT_EQ(fixed.min, 8192);
  EXPECT_EQ(fixed.max, 8192);
  ASSERT_OK_AND_ASSIGN(LengthRange widest, ComputeLengthRange(100, 0.0, RangeConvention::kInferenceX));
  EXPECT_EQ(widest.min, 1);  // 0 clamped to one token
  EXPECT_EQ(widest.max, 100);
  EXPECT_ERROR_CONTAINS(ComputeLengthRange(100, 1.5, RangeConvention::kInferenceX), "outside [0, 1]");
  EXPECT_ERROR_CONTAINS(ComputeLengthRange(100, -0.1, RangeConvention::kInferenceX), "inferencex");
}

TEST(BenchLengths, VllmConventionIsSymmetricAroundLength) {
  ASSERT_OK_AND_ASSIGN(LengthRange a, ComputeLengthRange(10, 0.5, RangeConvention::kVllm));
  EXPECT_EQ(a.min, 5);
  EXPECT_EQ(a.max, 15);
  // As in vLLM's Python: 100 · (1 + 0.1) = 110.00000000000001, whose ceiling is 111.
  ASSERT_OK_AND_ASSIGN(LengthRange b, ComputeLengthRange(100, 0.1, RangeConvention::kVllm));
  EXPECT_EQ(b.min, 90);
  EXPECT_EQ(b.max, 111);
  ASSERT_OK_AND_ASSIGN(LengthRange fixed, ComputeLengthRange(1024, 0.0, RangeConvention::kVllm));
  EXPECT_EQ(fixed.min, 1024);
  EXPECT_EQ(fixed.max, 1024);
  EXPECT_ERROR_CONTAINS(ComputeLengthRange(100, 1.0, RangeConvention::kVllm), "outside [0, 1)");
  EXPECT_ERROR_CONTAINS(ComputeLengthRange(0, 0.0, RangeConvention::kVllm), "at least 1 token");
}

TEST(BenchLengths, ConventionNamesAndFixedRatios) {
  ASSERT_OK_AND_ASSIGN(RangeConvention v, ParseRangeConvention("vllm"));
  EXPECT_EQ(v, RangeConvention::kVllm);
  EXPECT_EQ(RangeConventionName(RangeConvention::kInferenceX), "inferencex");
  EXPECT_EQ(FixedLengthRatio(RangeConvention::kInferenceX), 1.0);
  EXPECT_EQ(FixedLengthRatio(RangeConvention::kVllm), 0.0);
  EXPECT_ERROR_CONTAINS(ParseRangeConvention("sglang"), "expected 'inferencex'");
}

TEST(BenchRng, UniformIntCoversTheInclusiveRangeAndRepeatsWithTheSeed) {
  Rng rng(42);
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const int64_t value = rng.UniformInt(-3, 4);
    ASSERT_GE(value, -3);
    ASSERT_LE(value, 4);
    seen.insert(value);
  }
  EXPECT_EQ(seen.size(), 8u);  // every value of [-3, 4], both ends included
  Rng first(7), second(7), other(8);
  bool differs = false;
  for (int i = 0; i < 16; ++i) {
    const int64_t a = first.UniformInt(0, 1000000);
    EXPECT_EQ(a, second.UniformInt(0, 1000000));
    differs = differs || a != other.UniformInt(0, 1000000);
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(rng.UniformInt(5, 5), 5);
  EXPECT_NE(MixSeed(1, 2), MixSeed(1, 3));
  EXPECT_NE(MixSeed(1, 2), MixSeed(2, 2));
}

TEST(BenchMedian, MeanOfTheMiddleTwoZeroForNone) {
  EXPECT_EQ(Median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(Median({4.0, 1.0, 3.0, 2.0}), 2.5);  // unsorted input, even count
  EXPECT_EQ(Median({}), 0.0);
}

TEST(BenchNearestRank, PicksAMeasuredValueAtTheRoundedRank) {
  // Ranks round(q·(n − 1)) of {10, 20, 30, 40}: q = 0.5 → 1.5 → 2 (30, never the interpolated 25); 0.9 → 2.7 → 3.
  EXPECT_EQ(NearestRankPercentile({40.0, 10.0, 30.0, 20.0}, 0.5), 30.0);
  EXPECT_EQ(NearestRankPercentile({40.0, 10.0, 30.0, 20.0}, 0.9), 40.0);
  EXPECT_EQ(NearestRankPercentile({40.0, 10.0, 30.0, 20.0}, 0.0), 10.0);
  EXPECT_EQ(NearestRankPercentile({7.0}, 0.99), 7.0);
  EXPECT_EQ(NearestRankPercentile({}, 0.5), 0.0);
}

TEST(BenchRandomTokens, UniformIdsInTheVocabularyRepeatWithTheSeed) {
  std::mt19937_64 a(7), b(7);
  const std::vector<int32_t> first = UniformTokenIds(a, 50, 2000);
  EXPECT_EQ(first, UniformTokenIds(b, 50, 2000));
  ASSERT_EQ(first.size(), 2000u);
  const std::set<int32_t> seen(first.begin(), first.end());
  EXPECT_EQ(seen.size(), 50u);  // 2000 draws over 50 ids: each missed with probability (49/50)^2000 ≈ 3e-18
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 49);
}

}  // namespace
}  // namespace glint::bench
