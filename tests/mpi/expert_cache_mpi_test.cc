// --expert-memory under mpirun with 2–4 ranks (docs/expert-cache.md "Several ranks"): each rank caches only its
// own experts within its budget (per rank), so its logits are bit-identical to the same ranks with every expert
// resident, at the smallest budget and at one holding every expert; a read that fails on rank 1 only fails the
// sequence whose rows needed that expert, on every rank alike, and the other sequence of the batch is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "base/worker_pool.h"
#include "expert_checks.h"
#include "fast/fast_model.h"
#include "model_checks.h"
#include "mpi_test_main.h"
#include "test_util.h"

namespace glint {
namespace {

using Tokens = std::vector<int32_t>;

struct Batch {
  Status status;
  std::vector<EntryOutput> outputs;
};

// Sequences a and b (logits for every position) in one batch; every rank calls it (the collectives pair up).
Batch RunBatch(const FastModel& model, const Tokens& a, const Tokens& b) {
  SequenceState sa = model.NewSequence(), sb = model.NewSequence();
  std::vector<BatchEntry> batch = {{a, &sa, LogitsWanted::kAll, false}, {b, &sb, LogitsWanted::kAll, false}};
  Batch result;
  result.status = model.Forward(batch, result.outputs);
  return result;
}

std::vector<int32_t> Routing(const FastModel& model, const Tokens& tokens, int64_t layer) {
  SequenceState state = model.NewSequence();
  std::vector<EntryOutput> outputs;
  BatchEntry entry{tokens, &state, LogitsWanted::kNone, false};
  testing::RecordingTrace trace;
  EXPECT_OK(model.Forward({&entry, 1}, outputs, {}, &trace));
  return trace.ints["layer." + std::to_string(layer) + ".moe_experts"];
}

class ShardedExpertCache : public ::testing::Test {
 protected:
  void SetUp() override {
    container_ = testing::ConvertToContainer(testing::TestDataPath("golden/tiny-sparse"), pool_);
    ASSERT_FALSE(container_.empty());
    budgets_ = testing::BudgetsOf(container_, pool_);
    FastModelOptions options;
    options.parallel = {&testing::World(), 1, 0};
    ASSERT_OK_AND_ASSIGN(resident_, FastModel::Load(container_, pool_, options));
    const auto sequences = testing::GoldenOutputs("tiny-sparse").Tokens();
    a_ = Tokens(sequences[0].begin(), sequences[0].begin() + 40);
    b_ = Tokens(sequences[1].begin(), sequences[1].begin() + 6);  // few experts: some of every rank only a needs
  }
  FastModelOptions CacheOptions(uint64_t budget, std::shared_ptr<testing::FaultPlan> plan) const {
    FastModelOptions options = testing::FaultyCacheOptions(budget, std::move(plan));
    options.parallel = {&testing::World(), 1, 0};
    return options;
  }

  WorkerPool pool_{1};
  std::string container_;
  testing::ExpertBudgets budgets_;
  std::unique_ptr<FastModel> resident_;
  Tokens a_, b_;
};

TEST_F(ShardedExpertCache, BitIdenticalToResidentAtMinimumAndAllBudgets) {
  const Batch expected = RunBatch(*resident_, a_, b_);
  ASSERT_OK(expected.status);
  for (const uint64_t budget : {budgets_.minimum, budgets_.all}) {
    auto plan = std::make_shared<testing::FaultPlan>();
    ASSERT_OK_AND_ASSIGN(auto cached, FastModel::Load(container_, pool_, CacheOptions(budget, plan)));
    // Only this rank's experts: slots for at most its share, reads of its extents only.
    const ExpertRange mine = cached->shard_plan().experts();
    EXPECT_LE(cached->expert_cache()->slots(), mine.count() * cached->expert_cache()->moe_layers());
    const Batch got = RunBatch(*cached, a_, b_);
    ASSERT_OK(got.status);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(got.outputs[i].logits, expected.outputs[i].logits) << budget << " " << i;
    EXPECT_GT(plan->reads.load(), 0);
    EXPECT_EQ(cached->expert_cache()->pinned_slots(), 0);
  }
}

TEST_F(ShardedExpertCache, AReadFailingOnRankOneFailsItsSequenceOnEveryRank) {
  // A layer and an expert held by rank 1 that sequence a routes to and b does not (same on every rank: routing is
  // replicated).
  const ShardPlan shard = resident_->shard_plan();
  const ExpertRange ones = shard.experts_of_rank[1];
  const ModelConfig& c = resident_->config();
  int64_t layer = -1, expert = -1;
  for (int64_t l = 0; l < c.num_hidden_layers && expert < 0; ++l) {
    if (c.mlp_kinds[l] != MlpKind::kMoe) continue;
    const std::vector<int32_t> ra = Routing(*resident_, a_, l), rb = Routing(*resident_, b_, l);
    for (int32_t e : ra) {
      if (ones.Holds(e) && std::find(rb.begin(), rb.end(), e) == rb.end()) {
        layer = l, expert = e;
        break;
      }
    }
  }
  ASSERT_GE(expert, 0) << "no expert of rank 1 that only sequence a needs";
  const Batch expected = RunBatch(*resident_, a_, b_);
  auto plan = std::make_shared<testing::FaultPlan>();
  if (testing::World().rank() == 1)
    plan->failing_offsets.insert(testing::ExpertExtentOffset(container_, layer, expert));
  ASSERT_OK_AND_ASSIGN(auto cached, FastModel::Load(container_, pool_, CacheOptions(budgets_.minimum, plan)));
  const Batch got = RunBatch(*cached, a_, b_);
  EXPECT_FALSE(got.status.ok());
  ASSERT_EQ(got.outputs.size(), 2u);
  EXPECT_FALSE(got.outputs[0].error.ok()) << "rank " << testing::World().rank();
  if (testing::World().rank() == 1) {
    EXPECT_ERROR_CONTAINS(got.outputs[0].error, "read failed twice");  // names the expert
  } else {
    EXPECT_ERROR_CONTAINS(got.outputs[0].error, "could not be read on another rank");
  }
  EXPECT_OK(got.outputs[1].error);
  EXPECT_EQ(got.outputs[1].logits, expected.outputs[1].logits);
  // The server goes on: once the drive reads again, the next batch is exact for both.
  plan->failing_offsets.clear();
  const Batch after = RunBatch(*cached, a_, b_);
  ASSERT_OK(after.status);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(after.outputs[i].logits, expected.outputs[i].logits) << i;
}

// --expert-memory at --tp 2 (--tp 3 on 3 ranks; --ep 2 on 4), tiny-sparse converted with 16-column groups so that
// KDA, MLA and lm_head are split over the tp groups: the routed experts stay whole, by id over every rank
// (ShardPlan::experts_by_columns false), so each rank's cache holds and reads whole experts of its own; logits
// bit-identical to the same layout with every expert resident, at the smallest budget and at one holding all.
TEST(TensorParallelExpertCache, WholeExpertsBitIdenticalToResident) {
  WorkerPool pool(1);
  FastConvertOptions convert;
  convert.group = 16;
  const std::string container = testing::ConvertToContainer(testing::TestDataPath("golden/tiny-sparse"), pool, convert);
  ASSERT_FALSE(container.empty());
  const int ranks = testing::World().size(), tp = ranks % 2 == 0 ? 2 : ranks;
  FastModelOptions options;
  options.parallel = {&testing::World(), tp, ranks / tp};
  options.parallel.whole_experts = true;  // the cache's layout, every expert resident
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> resident, FastModel::Load(container, pool, options));
  const ShardPlan plan = resident->shard_plan();
  ASSERT_TRUE(plan.kda_split && plan.mla_split) << "the test wants attention split over the tp group";
  EXPECT_FALSE(plan.experts_by_columns);
  const int64_t experts = resident->config().n_routed_experts;  // ⌊E/N⌋ each, one more for the first E mod N
  EXPECT_EQ(plan.experts().count(), experts / ranks + (plan.rank < experts % ranks ? 1 : 0));

  const auto sequences = testing::GoldenOutputs("tiny-sparse").Tokens();
  const Tokens a(sequences[0].begin(), sequences[0].begin() + 40), b(sequences[1].begin(), sequences[1].begin() + 6);
  const Batch expected = RunBatch(*resident, a, b);
  ASSERT_OK(expected.status);
  const testing::ExpertBudgets budgets = testing::BudgetsOf(container, pool);
  for (const uint64_t budget : {budgets.minimum, budgets.all}) {
    FastModelOptions cached_options = testing::FaultyCacheOptions(budget, std::make_shared<testing::FaultPlan>());
    cached_options.parallel = {&testing::World(), tp, ranks / tp};  // whole experts: the cache asks for them
    ASSERT_OK_AND_ASSIGN(auto cached, FastModel::Load(container, pool, cached_options));
    EXPECT_FALSE(cached->shard_plan().experts_by_columns);
    EXPECT_LE(cached->expert_cache()->slots(), plan.experts().count() * cached->expert_cache()->moe_layers());
    const Batch got = RunBatch(*cached, a, b);
    ASSERT_OK(got.status);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(got.outputs[i].logits, expected.outputs[i].logits) << budget << " " << i;
  }
}

}  // namespace
}  // namespace glint
