// Chained MTP drafts (--speculative-tokens K, docs/engine.md "Speculative decoding"): for K = 2 .. 4 the engine's
// greedy outputs equal the plain model loop's on both paths — alone, batched, chunked by a small budget (drafts
// cut short), with prefix caching and its hits, with preemption, for n > 1 — and the acceptance counters are
// consistent per draft position (accepted at k ≤ accepted at k − 1, ≤ drafted at k). Seeded sampling with chained
// drafts is reproducible, and the speculative-sampling rule applied position after position keeps the joint
// target distribution. (K = 1 and the model-level rollback: spec_decode_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/worker_pool.h"
#include "engine/engine_core.h"
#include "engine_checks.h"
#include "fast/fast_model.h"
#include "model/model.h"
#include "test_util.h"

namespace glint {
namespace {

using Tokens = std::vector<int32_t>;
using testing::Collector;
using testing::Greedy;
using testing::MakeCore;
using testing::RunToCompletion;

constexpr int64_t kGenerated = 14;

using ChainCase = testing::PathCase;
using testing::PathCaseName;

// A model, prompts past the indexer's dense regime that share prefixes, and their plain greedy continuations.
struct Fixture {
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<Model> model;
  std::vector<Tokens> prompts, expected;
};
const Fixture& FixtureFor(const ChainCase& c) {
  static std::map<std::pair<std::string, bool>, std::unique_ptr<Fixture>> fixtures;
  std::unique_ptr<Fixture>& fixture = fixtures[{c.model, c.fast}];
  if (fixture != nullptr) return *fixture;
  fixture = std::make_unique<Fixture>();
  const std::string dir = c.model == "glint-tiny" ? testing::TestDataPath("../../models/glint-tiny")
                                                  : testing::TestDataPath("golden/" + c.model);
  if (c.fast) {
    fixture->pool = std::make_unique<WorkerPool>(2);
    fixture->model = FastModel::Load(dir, *fixture->pool).value();
  } else {
    fixture->model = ReferenceModel::Load(dir).value();
  }
  Tokens a, b;
  if (c.model == "glint-tiny") {
    std::tie(a, b) = testing::GlintTinyTexts();
  } else {
    const auto sequences = testing::GoldenOutputs(c.model).Tokens();
    std::tie(a, b) = std::tie(sequences[0], sequences[1]);
    if (a.size() < b.size()) std::swap(a, b);
  }
  const int64_t n =
      std::min<int64_t>(static_cast<int64_t>(a.size()), fixture->model->config().DenseRegimeTokens() + 20);
  fixture->prompts.push_back(Tokens(a.begin(), a.begin() + n));
  Tokens shared(a.begin(), a.begin() + n * 3 / 4);
  shared.insert(shared.end(), b.begin(), b.begin() + 5);
  fixture->prompts.push_back(shared);
  fixture->prompts.push_back(Tokens(b.begin(), b.begin() + std::min<int64_t>(10, static_cast<int64_t>(b.size()))));
  for (const Tokens& prompt : fixture->prompts) {
    fixture->expected.push_back(testing::GreedyOracle(*fixture->model, prompt, kGenerated));
  }
  return *fixture;
}

// The per-position counters: [K] each, accepted never growing with the position, drafted at k ≥ accepted at k,
// and their sums the totals.
void ExpectConsistentPerPosition(const EngineMetrics& m, int64_t k) {
  ASSERT_EQ(static_cast<int64_t>(m.spec_accepted_per_position.size()), k);
  ASSERT_EQ(static_cast<int64_t>(m.spec_drafted_per_position.size()), k);
  int64_t accepted = 0, drafted = 0;
  for (int64_t p = 0; p < k; ++p) {
    if (p > 0) {
      EXPECT_LE(m.spec_accepted_per_position[p], m.spec_accepted_per_position[p - 1]) << "position " << p;
      EXPECT_LE(m.spec_drafted_per_position[p], m.spec_drafted_per_position[p - 1]) << "position " << p;
    }
    EXPECT_LE(m.spec_accepted_per_position[p], m.spec_drafted_per_position[p]) << "position " << p;
    accepted += m.spec_accepted_per_position[p];
    drafted += m.spec_drafted_per_position[p];
  }
  EXPECT_EQ(accepted, m.spec_accepted_tokens);
  EXPECT_EQ(drafted, m.spec_draft_tokens);
  EXPECT_EQ(m.spec_drafted_per_position[0], m.spec_drafts);
}

class SpecChain : public ::testing::TestWithParam<ChainCase> {};

TEST_P(SpecChain, GreedyOutputsEqualThePlainLoopForEveryK) {
  const Fixture& f = FixtureFor(GetParam());
  const Model& model = *f.model;
  int64_t tight_blocks = 0;  // blocks of 8 for the longest request and two more: too few for all at once
  for (const Tokens& prompt : f.prompts) {
    tight_blocks = std::max<int64_t>(tight_blocks, (static_cast<int64_t>(prompt.size()) + kGenerated + 7) / 8 + 2);
  }
  for (int64_t k = 2; k <= kMaxSpeculativeTokens; ++k) {
    // Alone, then all at once.
    auto alone = MakeCore(model, testing::SizedOptions(model, 3, 64, 0, true, k));
    EXPECT_EQ(testing::RunGreedyPrompts(*alone, f.prompts, kGenerated, true), f.expected) << "K " << k;
    const EngineMetrics m = alone->Metrics();
    // The deepest draft the indexer pools allow anywhere (PoolSafeDrafts: kpool − 1 at most) was drafted.
    int64_t deepest = 0;
    for (int64_t end = 0; end < model.config().index_kpool; ++end) {
      deepest = std::max(deepest, std::min(k, PoolSafeDrafts(end, model.config().index_kpool)));
    }
    EXPECT_GT(m.spec_drafted_per_position[deepest - 1], 0) << "K " << k << ": no step drafted " << deepest;
    ExpectConsistentPerPosition(m, k);
    // Everything together: budget 6 (drafts cut short), a pool that preempts, prefix caching with hits, n = 2.
    EngineOptions options = testing::SizedOptions(model, 3, tight_blocks, 3, true, k);
    options.max_batch_tokens = 6;
    auto core = MakeCore(model, options);
    auto sink = std::make_shared<Collector>();
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < f.prompts.size(); ++i) {
        Request request = Greedy(f.prompts[i], kGenerated, sink);
        request.n = i == 2 ? 2 : 1;
        ASSERT_OK(core->Add(10 * pass + i + 1, std::move(request)));
      }
      RunToCompletion(*core);
      for (size_t i = 0; i < f.prompts.size(); ++i) {
        EXPECT_EQ(sink->TokensOf(10 * pass + i + 1), f.expected[i]) << "K " << k << ", pass " << pass << ", " << i;
      }
      EXPECT_EQ(sink->TokensOf(10 * pass + 3, 1), f.expected[2]) << "K " << k << ", second sample";
    }
    const EngineMetrics together = core->Metrics();
    EXPECT_GT(together.preemptions, 0) << "K " << k;
    EXPECT_GT(together.cache.prefix_hit_tokens, 0) << "K " << k;
    ExpectConsistentPerPosition(together, k);
    testing::ExpectPoolsAtStart(*core);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SpecChain,
                         ::testing::Values(ChainCase{"tiny-dense"}, ChainCase{"tiny-sparse"},
                                           ChainCase{"glint-tiny", /*fast=*/true}, ChainCase{"glint-tiny"}),
                         PathCaseName);

// The trained model: deeper drafts are accepted less often, and more drafts per step take fewer steps.
TEST(SpecChainTrained, AcceptanceFallsWithDepthAndStepsDrop) {
  const Fixture& f = FixtureFor({"glint-tiny", /*fast=*/true});
  int64_t previous_steps = 0;
  for (int64_t k = 1; k <= kMaxSpeculativeTokens; ++k) {
    auto core = MakeCore(*f.model, testing::SizedOptions(*f.model, 3, 128, 0, true, k));
    EXPECT_EQ(testing::RunGreedyPrompts(*core, f.prompts, kGenerated, false), f.expected) << "K " << k;
    const EngineMetrics m = core->Metrics();
    std::printf("glint-tiny, K %lld: %s, %lld steps\n", static_cast<long long>(k), DescribeSpeculation(m).c_str(),
                static_cast<long long>(m.steps));
    ExpectConsistentPerPosition(m, k);
    EXPECT_GT(m.spec_accepted_per_position[0], m.spec_drafts / 3) << "K " << k;
    if (k > 1) {
      EXPECT_LE(m.steps, previous_steps) << "K " << k;
    }
    previous_steps = m.steps;
  }
}

// Seeded sampling with chained drafts is reproducible (drafts, acceptance tests and residual draws all from the
// sample's generator), with penalties that the chain's draws must see as the verification does.
TEST(SpecChainSampling, SeededSamplingIsReproducible) {
  const Fixture& f = FixtureFor({"glint-tiny", /*fast=*/true});
  auto sample = [&](uint64_t seed) {
    auto core = MakeCore(*f.model, testing::SizedOptions(*f.model, 4, 64, 0, true, 3));
    auto sink = std::make_shared<Collector>();
    Request request = Greedy(f.prompts[2], 24, sink);
    request.sampling = {.temperature = 0.8f, .top_p = 0.95f, .seed = seed, .presence_penalty = 0.5f};
    request.seeded = true;
    request.n = 2;
    EXPECT_OK(core->Add(7, std::move(request)));
    RunToCompletion(*core);
    const EngineMetrics m = core->Metrics();
    EXPECT_GT(m.spec_drafted_per_position[2], 0);
    ExpectConsistentPerPosition(m, 3);
    return std::pair{sink->TokensOf(7, 0), sink->TokensOf(7, 1)};
  };
  const auto first = sample(42);
  EXPECT_EQ(first.first.size(), 24u);
  EXPECT_EQ(first, sample(42));
  EXPECT_NE(first, sample(43));
}

TEST(SpecChainOptions, OutOfRangeIsRefused) {
  const Fixture& f = FixtureFor({"tiny-dense"});
  for (int64_t k : {0, 5}) {
    EXPECT_ERROR_CONTAINS(EngineCore::Create(*f.model, testing::SizedOptions(*f.model, 2, 16, 0, true, k)),
                          "--speculative-tokens must be in 1 .. 4");
  }
  EXPECT_ERROR_CONTAINS(EngineCore::Create(*f.model, testing::SizedOptions(*f.model, 2, 16, 0, false, 2)),
                        "needs --speculative mtp");
}

// Two drafted positions, the rule applied to the first and, when it is kept, to the second under the first: the
// pair of tokens handed out is distributed as the target's joint p1(x) p2(y | x), whatever the drafts' q1, q2(· | x)
// (when the first draft is replaced, the second token is drawn from the target, as the engine's next step does).
// 200 000 trials; bound 5 standard deviations of a binomial frequency.
TEST(SpecChainSampling, ChainedVerificationKeepsTheJointDistribution) {
  const TokenDistribution p1 = {{0, 0.6}, {1, 0.3}, {2, 0.1}}, q1 = {{0, 0.2}, {1, 0.5}, {2, 0.3}};
  const auto p2 = [](int32_t x) -> TokenDistribution {
    return x == 0 ? TokenDistribution{{0, 0.5}, {1, 0.5}} : TokenDistribution{{1, 0.2}, {2, 0.8}};
  };
  const auto q2 = [](int32_t x) -> TokenDistribution {
    return x == 1 ? TokenDistribution{{0, 0.9}, {2, 0.1}} : TokenDistribution{{0, 0.3}, {1, 0.3}, {2, 0.4}};
  };
  constexpr int kTrials = 200000;
  Sampler sampler({.temperature = 1.0f, .seed = 77});
  std::map<std::pair<int32_t, int32_t>, int64_t> counts;
  for (int i = 0; i < kTrials; ++i) {
    const int32_t d1 = sampler.Draw(q1), d2 = sampler.Draw(q2(d1));
    const auto [x, kept] = sampler.Verify(p1, d1, q1);
    const int32_t y = kept ? sampler.Verify(p2(x), d2, q2(x)).first : sampler.Draw(p2(x));
    ++counts[{x, y}];
  }
  for (const auto& [x, px] : p1) {
    for (const auto& [y, py] : p2(x)) {
      const double expected = px * py, frequency = static_cast<double>(counts[{x, y}]) / kTrials;
      EXPECT_NEAR(frequency, expected, 5 * std::sqrt(expected * (1 - expected) / kTrials)) << x << ", " << y;
    }
  }
}

}  // namespace
}  // namespace glint
