#include "engine/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "test_util.h"

namespace glint {
namespace {

TEST(Sampling, GreedyIsArgMaxWithLowerIdTies) {
  Sampler sampler({.temperature = 0.0f});
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, NAN};
  EXPECT_EQ(sampler.Sample(logits), 1);
  EXPECT_EQ(ArgMax(std::vector<float>{NAN, 2.0f, 1.0f}), 1);
}

TEST(Sampling, SameSeedSameTokensDifferentSeedDifferent) {
  const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.0f, -0.1f, 0.25f};
  auto draw = [&](uint64_t seed) {
    Sampler sampler({.temperature = 1.0f, .seed = seed});
    std::vector<int32_t> tokens;
    for (int i = 0; i < 64; ++i) tokens.push_back(sampler.Sample(logits));
    return tokens;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

// Frequencies of 40,000 draws match softmax(logits / T) within 5 standard errors.
TEST(Sampling, FrequenciesFollowTheTemperedSoftmax) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f};
  const float temperature = 2.0f;
  Sampler sampler({.temperature = temperature, .seed = 1});
  std::map<int32_t, int> counts;
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) counts[sampler.Sample(logits)]++;
  double total = 0;
  for (float l : logits) total += std::exp(l / temperature);
  for (int i = 0; i < 3; ++i) {
    const double p = std::exp(logits[i] / temperature) / total;
    const double standard_error = std::sqrt(p * (1 - p) / draws);
    EXPECT_NEAR(counts[i] / double(draws), p, 5 * standard_error) << i;
  }
}

TEST(Sampling, TopKTopPAndMinPRestrictTheSupport) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  auto support = [&](SamplingParams params) {
    Sampler sampler(params);
    std::map<int32_t, int> seen;
    for (int i = 0; i < 2000; ++i) seen[sampler.Sample(logits)]++;
    std::vector<int32_t> ids;
    for (auto& [id, count] : seen) ids.push_back(id);
    return ids;
  };
  EXPECT_EQ(support({.top_k = 2}), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(support({.top_p = 0.79f}), (std::vector<int32_t>{0, 1}));  // 0.5 + 0.3 reaches 0.79
  EXPECT_EQ(support({.top_p = 0.81f}), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(support({.min_p = 0.5f}), (std::vector<int32_t>{0, 1}));  // keep p ≥ 0.25
  EXPECT_EQ(support({.top_p = 0.01f}), (std::vector<int32_t>{0}));
}

// The radix sort of the vocabulary against std::stable_sort: random logits drawn from a palette of ties, ±0,
// ±inf, NaN, denormals and normals, at sizes around the radix digits and the release's vocabulary.
TEST(Sampling, TokensByLogitEqualsTheStableSort) {
  std::mt19937 rng(11);
  const float palette[] = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(),
                           3.5f};
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{2047}, size_t{2049}, size_t{154880}}) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<float> logits(n);
      for (float& x : logits) {
        x = variant == 0   ? palette[rng() % 10]
            : variant == 1 ? normal(rng)
                           : (rng() % 4 == 0 ? palette[rng() % 10] : normal(rng));
      }
      ASSERT_EQ(TokensByLogit(logits), TokensByLogitReference(logits)) << n << " logits, variant " << variant;
    }
  }
}

TEST(Sampling, InvalidParamsAreRejected) {
  EXPECT_ERROR_CONTAINS(ValidateSamplingParams({.temperature = -1}), "temperature");
  EXPECT_ERROR_CONTAINS(ValidateSamplingParams({.top_p = 0}), "top_p");
  EXPECT_ERROR_CONTAINS(ValidateSamplingParams({.top_k = -3}), "top_k");
  EXPECT_ERROR_CONTAINS(ValidateSamplingParams({.min_p = 2}), "min_p");
  EXPECT_OK(ValidateSamplingParams({}));
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

TEST(Penalties, RepetitionFrequencyAndPresence) {
  const std::vector<int32_t> prompt = {1, 1, 2};
  TokenHistory history(prompt);
  history.Add(2);
  history.Add(3);
  history.Add(3);
  std::vector<float> logits = {1.0f, 2.0f, -2.0f, 4.0f, 5.0f};
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  ApplyPenalties(params, history, logits);
  // 1 (prompt), 2 (prompt and generated, once), 3 (generated) are penalised; 0 and 4 are not.
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 1.0f, -4.0f, 2.0f, 5.0f}));
  logits = {1.0f, 2.0f, -2.0f, 4.0f, 5.0f};
  params = {};
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 1.0f;
  ApplyPenalties(params, history, logits);
  // Only generated tokens: 2 once (−0.5 − 1), 3 twice (−1 − 1). The prompt does not count.
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 2.0f, -3.5f, 2.0f, 5.0f}));
  logits = {1.0f, 2.0f};
  ApplyPenalties({}, history, logits);  // off: unchanged
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 2.0f}));
}

// logit_bias was silently ignored (issue 18, finding 8): it is added after the penalties, and a bias of −100 on
// the argmax moves greedy decoding to the runner-up.
TEST(Penalties, LogitBiasIsAddedAfterThePenalties) {
  TokenHistory history(std::vector<int32_t>{0});
  std::vector<float> logits = {4.0f, 3.0f, 1.0f};
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.logit_bias = {{0, 0.5f}, {2, -100.0f}, {7, 50.0f}};  // 7 is outside this row: ignored
  ApplyPenalties(params, history, logits);
  EXPECT_EQ(logits, (std::vector<float>{2.5f, 3.0f, -99.0f}));
  params = {};
  params.temperature = 0;
  params.logit_bias = {{0, -100.0f}};
  logits = {4.0f, 3.0f, 1.0f};
  ApplyPenalties(params, history, logits);
  EXPECT_EQ(Sampler(params).Sample(logits), 1);
  EXPECT_ERROR_CONTAINS(ValidateSamplingParams({.logit_bias = {{1, 101.0f}}}), "expected a number in [-100, 100]");
  EXPECT_ERROR_CONTAINS(ValidateSamplingParams({.logit_bias = {{-1, 1.0f}}}), "negative");
}

TEST(Penalties, RangesAreValidated) {
  EXPECT_ERROR_CONTAINS(ValidateSamplingParams({.presence_penalty = 2.5f}), "presence_penalty");
  EXPECT_ERROR_CONTAINS(ValidateSamplingParams({.frequency_penalty = -3}), "frequency_penalty");
  EXPECT_ERROR_CONTAINS(ValidateSamplingParams({.repetition_penalty = 0}), "repetition_penalty");
  EXPECT_OK(ValidateSamplingParams({.presence_penalty = -2, .frequency_penalty = 2, .repetition_penalty = 1.3f}));
}

TEST(Logprobs, LogSoftmaxAndTopK) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f};
  const Logprobs lp = ComputeLogprobs(logits, 2, 3);
  const double z = std::log(1 + 2 * std::exp(2.0) + std::exp(1.0));
  EXPECT_NEAR(lp.chosen, 1.0 - z, 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);  // tie with 3: the lower id first
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[0].second, 2.0 - z, 1e-6);
  double total = 0;
  for (int32_t t = 0; t < 4; ++t) total += std::exp(ComputeLogprobs(logits, t, 0).chosen);
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_TRUE(ComputeLogprobs(logits, 0, 0).top.empty());
}

}  // namespace
}  // namespace glint
