// --expert-prefetch next-layer (docs/expert-cache.md "Prefetch"): after each MoE layer the store is asked to start
// reading the next MoE layer's likely experts. Checked here: logits, hidden states and greedy tokens identical to
// every expert resident with prefetch on (at the minimum budget, where the guesses evict, and at 3 × the minimum);
// a prefetch asked for during a pass does nothing (it never takes a slot the pass still needs), between passes it
// takes at most half the slots and pins none; a prefetch read that fails fails nothing, and the expert is read
// again, exactly, when a pass wants it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <tuple>
#include <vector>

#include "engine_checks.h"
#include "expert_checks.h"
#include "fast/fast_model.h"
#include "test_util.h"

namespace glint {
namespace {

using Tokens = std::vector<int32_t>;

struct Fixture {
  WorkerPool pool{2};
  std::string container;
  std::unique_ptr<FastModel> resident;
  testing::ExpertBudgets budgets;
};
Fixture& FixtureFor(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Fixture>> fixtures;
  std::unique_ptr<Fixture>& f = fixtures[name];
  if (f == nullptr) {
    f = std::make_unique<Fixture>();
    const std::string dir = name == "glint-tiny" ? testing::TestDataPath("../../models/glint-tiny")
                                                 : testing::TestDataPath("golden/" + name);
    f->container = testing::ConvertToContainer(dir, f->pool);
    f->resident = FastModel::Load(f->container, f->pool).value();
    f->budgets = testing::BudgetsOf(f->container, f->pool);
  }
  return *f;
}

Tokens PromptOf(const std::string& name, int which) {
  if (name == "glint-tiny") {
    const auto [a, b] = testing::GlintTinyTexts();
    return which == 0 ? a : b;
  }
  return testing::GoldenOutputs(name).Tokens()[which];
}

std::vector<int64_t> MoeLayers(const FastModel& model) {
  std::vector<int64_t> layers;
  for (size_t l = 0; l < model.config().mlp_kinds.size(); ++l) {
    if (model.config().mlp_kinds[l] == MlpKind::kMoe) layers.push_back(static_cast<int64_t>(l));
  }
  return layers;
}

class PrefetchIdentity : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(PrefetchIdentity, LogitsAndTokensAsResident) {
  const auto& [name, minimums] = GetParam();
  Fixture& f = FixtureFor(name);
  FastModelOptions options;
  options.expert_memory = minimums * f.budgets.minimum;
  options.expert_prefetch = true;
  ASSERT_OK_AND_ASSIGN(auto cached, FastModel::Load(f.container, f.pool, options));
  // A batch of two prefills with every position's logits and hidden states, then batched decode.
  const std::vector<Tokens> prompts = {PromptOf(name, 0), PromptOf(name, 1)};
  std::vector<SequenceState> on_resident, on_cached;
  for (size_t i = 0; i < prompts.size(); ++i) {
    on_resident.push_back(f.resident->NewSequence()), on_cached.push_back(cached->NewSequence());
  }
  std::vector<Tokens> inputs = prompts;
  for (int step = 0; step < 6; ++step) {
    std::vector<BatchEntry> a, b;
    for (size_t i = 0; i < inputs.size(); ++i) {
      a.push_back({inputs[i], &on_resident[i], LogitsWanted::kAll, true});
      b.push_back({inputs[i], &on_cached[i], LogitsWanted::kAll, true});
    }
    std::vector<EntryOutput> expected, got;
    ASSERT_OK(f.resident->Forward(a, expected));
    ASSERT_OK(cached->Forward(b, got));
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].logits, expected[i].logits) << "step " << step << " entry " << i;
      EXPECT_EQ(got[i].hidden, expected[i].hidden) << "step " << step << " entry " << i;
      inputs[i] = {static_cast<int32_t>(step * 7 + i + 1)};  // next token: any in the vocabulary
    }
    EXPECT_EQ(cached->expert_cache()->pinned_slots(), 0);
  }
  EXPECT_EQ(testing::GreedyOracle(*cached, prompts[1], 8), testing::GreedyOracle(*f.resident, prompts[1], 8));
  const ExpertCacheStats stats = cached->expert_cache()->stats();
  EXPECT_GT(stats.prefetch_issued, 0);  // the guesses were made (and evicted at the minimum)
  EXPECT_LE(stats.prefetch_used, stats.prefetch_issued);
  EXPECT_EQ(stats.failed_reads, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefetchIdentity,
                         ::testing::Combine(::testing::Values("tiny-sparse", "glint-tiny"), ::testing::Values(1, 3)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_x" + std::to_string(std::get<1>(info.param));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Waits (bounded: 5 s) until no read of the cache is in flight, by its counters.
void AwaitPrefetches(const DiskExpertCache& cache, int64_t issued) {
  for (int i = 0; i < 500; ++i) {
    const ExpertCacheStats s = cache.stats();
    if (cache.ready_slots() + s.prefetch_failed >= issued) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "prefetch reads still in flight after 5 s";
}

TEST(ExpertPrefetch, NeverTakesASlotOfTheCurrentPassAndAtMostHalfBetweenPasses) {
  Fixture& f = FixtureFor("tiny-sparse");
  FastModelOptions options;
  options.expert_memory = f.budgets.all;
  ASSERT_OK_AND_ASSIGN(auto model, FastModel::Load(f.container, f.pool, options));
  auto& cache = const_cast<DiskExpertCache&>(*model->expert_cache());
  const std::vector<int64_t> moe = MoeLayers(*model);
  ASSERT_GE(moe.size(), 2u);
  const FastMoeWeights& first = model->weights().layers[moe[0]].moe;
  const FastMoeWeights& second = model->weights().layers[moe[1]].moe;
  std::vector<int32_t> every(second.experts.size());
  for (size_t e = 0; e < every.size(); ++e) every[e] = static_cast<int32_t>(e);
  const std::vector<int32_t> pass = {0, 1};
  ASSERT_OK(cache.Begin(first, pass, std::vector<int64_t>{1, 1}));
  std::vector<size_t> ready;
  std::vector<std::pair<size_t, Status>> failed;
  while (ready.size() < pass.size() && failed.empty()) ASSERT_OK(cache.NextReady(0, pass.size(), ready, failed, true));
  ASSERT_TRUE(failed.empty());
  const FastMlpWeights* held = &cache.Weights(0);
  const auto* codes = held->gate_up.int8.codes ? held->gate_up.int8.codes : held->gate_up.int4.codes;
  cache.Prefetch(second, every);  // during the pass: nothing
  EXPECT_EQ(cache.stats().prefetch_issued, 0);
  EXPECT_EQ(cache.pinned_slots(), 2);
  EXPECT_EQ(&cache.Weights(0), held);
  EXPECT_EQ(held->gate_up.int8.codes ? held->gate_up.int8.codes : held->gate_up.int4.codes, codes);
  for (size_t i : ready) cache.Release(i);
  cache.End();
  cache.Prefetch(second, every);  // between passes: at most half the slots, none pinned
  const int64_t issued = cache.stats().prefetch_issued;
  EXPECT_EQ(issued, std::min<int64_t>(every.size(), cache.slots() / 2));
  EXPECT_EQ(cache.pinned_slots(), 0);
  AwaitPrefetches(cache, issued + 2);
  // The next pass of the second layer hits the prefetched experts it asks for.
  ASSERT_OK(cache.Begin(second, std::vector<int32_t>{0}, std::vector<int64_t>{1}));
  cache.End();
  EXPECT_EQ(cache.stats().prefetch_used, 1);
}

TEST(ExpertPrefetch, AFailedPrefetchFailsNothingAndTheExpertIsReadAgain) {
  Fixture& f = FixtureFor("tiny-sparse");
  auto plan = std::make_shared<testing::FaultPlan>();
  ASSERT_OK_AND_ASSIGN(auto model,
                       FastModel::Load(f.container, f.pool, testing::FaultyCacheOptions(f.budgets.all, plan)));
  auto& cache = const_cast<DiskExpertCache&>(*model->expert_cache());
  const std::vector<int64_t> moe = MoeLayers(*model);
  const FastMoeWeights& second = model->weights().layers[moe[1]].moe;
  std::vector<int32_t> every;
  for (size_t e = 0; e < second.experts.size(); ++e) {
    every.push_back(static_cast<int32_t>(e));
    plan->failing_offsets.insert(testing::ExpertExtentOffset(f.container, moe[1], static_cast<int64_t>(e)));
  }
  cache.Prefetch(second, every);
  const int64_t issued = cache.stats().prefetch_issued;
  ASSERT_GT(issued, 0);
  AwaitPrefetches(cache, issued);
  EXPECT_EQ(cache.stats().prefetch_failed, issued);
  EXPECT_EQ(cache.ready_slots(), 0);  // nothing half-read is kept
  EXPECT_EQ(cache.pinned_slots(), 0);
  {
    std::lock_guard<std::mutex> lock(plan->mutex);
    plan->failing_offsets.clear();
  }
  // A pass that needs those experts reads them again and computes exactly.
  const Tokens prompt = PromptOf("tiny-sparse", 0);
  SequenceState a = f.resident->NewSequence(), b = model->NewSequence();
  std::vector<EntryOutput> expected, got;
  BatchEntry on_resident{prompt, &a, LogitsWanted::kAll, false}, on_cached{prompt, &b, LogitsWanted::kAll, false};
  ASSERT_OK(f.resident->Forward({&on_resident, 1}, expected));
  ASSERT_OK(model->Forward({&on_cached, 1}, got));
  EXPECT_EQ(got[0].logits, expected[0].logits);
  EXPECT_TRUE(got[0].error.ok());
  EXPECT_EQ(cache.pinned_slots(), 0);
}

}  // namespace
}  // namespace glint
