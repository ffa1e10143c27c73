// The engine under --dp-attention (docs/distributed.md "Attention data-parallel", the engine part) with 2, 3 and 4
// ranks, on both golden fixtures and glint-tiny: rank 0 runs the engine over a LockstepLeader, the other ranks
// follow its plans. Concurrent greedy requests spread over every rank's cache partition give the tokens of the
// replicated layout (--ep N without the flag, the same engine: its logits are bit for bit those of --dp-attention),
// prompts sharing a start hit the prefix cache of the rank that computed it, each rank holds only its own
// sequences' memory while they run, and every pool is empty at the end; a small cache forces preemptions (freed in
// the partition that was short) with the same tokens; what the engine does not run under the flag is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/worker_pool.h"
#include "engine/engine_core.h"
#include "engine_checks.h"
#include "fast/fast_model.h"
#include "lockstep/lockstep.h"
#include "mpi_test_main.h"
#include "test_util.h"

namespace glint {
namespace {

using testing::Tokens;

constexpr int64_t kGenerated = 8;

class DpEngine : public ::testing::TestWithParam<std::string> {
 protected:
  // This rank's shard, replicated attention or --dp-attention.
  std::unique_ptr<Model> Load(bool dp_attention) {
    FastModelOptions options;
    options.parallel = {&testing::World(), 1, 0};
    options.parallel.dp_attention = dp_attention;
    auto loaded = FastModel::Load(testing::ModelDir(GetParam()), pool_, options);
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded.ok() ? std::move(loaded).value() : nullptr;
  }

  // Rank 0 runs `work` on an engine-facing LockstepLeader over the shard; the other ranks follow its plans until
  // it stops. Every rank returns once rank 0 is done.
  void OnRankZero(std::unique_ptr<Model> model, const std::function<void(const Model&)>& work) {
    ASSERT_NE(model, nullptr);
    if (testing::World().rank() != 0) {
      EXPECT_OK(RunLockstepFollower(*model, testing::World()));
      return;
    }
    LockstepLeader leader(std::move(model), testing::World());
    work(leader);
    EXPECT_OK(leader.Stop());
  }

  // Six prompts; the 2nd and 4th start with the 1st's first 32 and 23 tokens, the 6th with the 5th's first 20,
  // so that they wait for those to be cached and then hit (checkpoints every 16 tokens).
  std::vector<Tokens> Prompts() const {
    auto [a, b] = GetParam() == "glint-tiny" ? testing::GlintTinyTexts()
                                             : testing::GoldenOutputs(GetParam()).LongerAndShorterTokens();
    while (a.size() < 48) a.insert(a.end(), b.begin(), b.end());  // the golden fixtures' shorter sequence
    while (b.size() < 32) b.insert(b.end(), a.begin(), a.end());
    const auto first = [](const Tokens& t, size_t n) { return Tokens(t.begin(), t.begin() + n); };
    const auto join = [](Tokens x, const Tokens& y) {
      x.insert(x.end(), y.begin(), y.end());
      return x;
    };
    return {first(a, 40), join(first(a, 32), first(b, 5)), first(b, 12), first(a, 23),
            first(b, 30), join(first(b, 20), first(a, 4))};
  }

  WorkerPool pool_{1};
};

TEST_P(DpEngine, ConcurrentRequestsSpreadOverTheRanksMatchReplicatedExpertParallel) {
  const int ranks = testing::World().size();
  const std::vector<Tokens> prompts = Prompts();
  std::vector<Tokens> expected, got;
  OnRankZero(Load(false), [&](const Model& model) {
    auto core = testing::MakeCore(model, testing::SizedOptions(model, 6, 64, 16));
    ASSERT_NE(core, nullptr);
    EXPECT_EQ(core->num_partitions(), 1);
    expected = testing::RunGreedyPrompts(*core, prompts, kGenerated, /*one_at_a_time=*/false);
  });
  OnRankZero(Load(true), [&](const Model& model) {
    auto core = testing::MakeCore(model, testing::SizedOptions(model, 6, 64, 16));
    ASSERT_NE(core, nullptr);
    ASSERT_EQ(core->num_partitions(), ranks);
    EXPECT_TRUE(core->memory(0).block_arena().backed());
    for (int r = 1; r < ranks; ++r) EXPECT_FALSE(core->memory(r).block_arena().backed()) << "rank " << r;
    EXPECT_EQ(core->capacity().attention_ranks, ranks);
    // The first step admits the 1st, 3rd and 5th prompts (the others wait for their starts to be cached), each
    // to the rank with the most free memory: ranks 0, 1, then 2 (on 2 ranks: 1, which the 3rd's 2 blocks leave
    // freer than rank 0 after the 1st's 5). Each rank then holds only its own sequences.
    const int fifth = ranks == 2 ? 1 : 2;
    auto sink = std::make_shared<testing::Collector>();
    for (size_t i = 0; i < prompts.size(); ++i)
      ASSERT_OK(core->Add(i + 1, testing::Greedy(prompts[i], kGenerated, sink)));
    ASSERT_OK(core->Step());
    const EngineMetrics first = core->Metrics();
    ASSERT_EQ(first.cache_by_rank.size(), static_cast<size_t>(ranks));
    for (int r = 0; r < std::min(ranks, 3); ++r) {
      EXPECT_GT(LiveCacheBytes(first.cache_by_rank[r]), 0) << "rank " << r;
    }
    int64_t live = 0;
    for (const CacheStats& rank : first.cache_by_rank) live += rank.slots_used;
    EXPECT_EQ(live, 3);
    testing::RunToCompletion(*core);
    for (size_t i = 0; i < prompts.size(); ++i) got.push_back(sink->TokensOf(i + 1));
    testing::ExpectPoolsAtStart(*core);
    const EngineMetrics metrics = core->Metrics();
    for (const CacheStats& rank : metrics.cache_by_rank) EXPECT_EQ(LiveCacheBytes(rank), 0);
    // The waiting prompts hit the caches of the ranks that computed their starts (the 1st's on rank 0, the 5th's
    // on `fifth`), never recomputing them elsewhere.
    EXPECT_EQ(metrics.cache.prefix_hits, 3);
    EXPECT_EQ(metrics.cache_by_rank[0].prefix_hits, 2);
    EXPECT_EQ(metrics.cache_by_rank[fifth].prefix_hits, 1);
    EXPECT_EQ(metrics.preemptions, 0);
  });
  if (testing::World().rank() != 0) return;
  ASSERT_EQ(expected.size(), prompts.size());
  EXPECT_EQ(got, expected);
}

TEST_P(DpEngine, PreemptionFreesMemoryOnTheRankThatIsShort) {
  const std::vector<Tokens> prompts = Prompts();
  std::vector<Tokens> roomy, tight;
  int64_t preemptions = 0;
  OnRankZero(Load(true), [&](const Model& model) {
    auto core = testing::MakeCore(model, testing::SizedOptions(model, 6, 64, 0));
    ASSERT_NE(core, nullptr);
    roomy = testing::RunGreedyPrompts(*core, prompts, kGenerated, /*one_at_a_time=*/false);
    // Every rank holds 6 blocks of 8 positions (48: the longest request alone), too few for two of them.
    EngineOptions options = testing::SizedOptions(model, 6, 6, 0);
    auto small = testing::MakeCore(model, options);
    ASSERT_NE(small, nullptr);
    tight = testing::RunGreedyPrompts(*small, prompts, kGenerated, /*one_at_a_time=*/false);
    preemptions = small->Metrics().preemptions;
  });
  if (testing::World().rank() != 0) return;
  EXPECT_GT(preemptions, 0);
  // Recomputed sequences redo their prompt and generated tokens as a prefill: the same greedy tokens here (as one
  // process's preemption gives, engine_test), on every rank count and model.
  EXPECT_EQ(tight, roomy);
}

TEST_P(DpEngine, RefusesWhatItDoesNotRunYet) {
  OnRankZero(Load(true), [&](const Model& model) {
    EngineOptions options = testing::SizedOptions(model, 2, 16, 0);
    options.speculative = SpeculativeMethod::kMtp;
    EXPECT_ERROR_CONTAINS(EngineCore::Create(model, options), "--dp-attention does not run the MTP layer");
  });
}

INSTANTIATE_TEST_SUITE_P(Models, DpEngine, ::testing::Values("tiny-sparse", "tiny-dense", "glint-tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace glint
