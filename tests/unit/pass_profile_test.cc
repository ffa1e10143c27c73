// The prefill profile (fast/pass_profile.h): exclusive accounting that adds up to the wall time, nothing recorded
// when off, and a profiled forward bit for bit the forward without it.
#include "fast/pass_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>

#include "base/timer.h"
#include "base/worker_pool.h"
#include "fast/fast_model.h"
#include "test_util.h"

namespace glint {
namespace {

double Total(const PassProfile::Seconds& seconds) { return std::accumulate(seconds.begin(), seconds.end(), 0.0); }

double At(const PassProfile& profile, PassPart part) { return profile.seconds()[static_cast<int>(part)]; }

TEST(PassProfile, PartsAreExclusiveAndAddUpToTheWallTime) {
  using std::chrono::milliseconds;
  PassProfile profile;
  profile.set_enabled(true);
  Stopwatch wall;
  profile.Start();
  {
    const ScopedPart moe(profile, PassPart::kMoeRouting);
    std::this_thread::sleep_for(milliseconds(20));
    {
      const ScopedPart products(profile, PassPart::kInt8Products);  // nested: paused MoE routing meanwhile
      std::this_thread::sleep_for(milliseconds(30));
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  profile.Stop();
  const double elapsed = wall.Seconds();
  // sleep_for sleeps at least as long as asked; the parts cannot have taken less.
  EXPECT_GE(At(profile, PassPart::kInt8Products), 0.030);
  EXPECT_GE(At(profile, PassPart::kMoeRouting), 0.030);
  // Exclusive: the nested 30 ms are not also in MoE routing (which slept 30 ms itself). Upper bound: its own 30 ms
  // plus what the scheduler added to the whole run beyond the 60 ms asked for.
  EXPECT_LE(At(profile, PassPart::kMoeRouting), 0.030 + (elapsed - 0.060) + 1e-9);
  // Every switch charges the time since the last one: the parts add to the profiled interval, which lies inside
  // the stopwatch's.
  EXPECT_LE(Total(profile.seconds()), elapsed);
  EXPECT_GE(Total(profile.seconds()), 0.060);
}

TEST(PassProfile, OffRecordsNothing) {
  PassProfile profile;
  profile.Start();
  {
    const ScopedPart part(profile, PassPart::kMhc);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  profile.Stop();
  EXPECT_EQ(Total(profile.seconds()), 0.0);
}

// The decode step's bound by part on figures chosen so every term is known: 50 GB/s and 1,000 G ops/s.
TEST(DecodeStepBound, EachKindIsBoundAloneAndTheBoundsAdd) {
  const double bandwidth = 50e9, peak = 1e12;
  ProductTime dense, experts;
  dense.Add(20'000'000'000, 1'000'000'000, 0.1);   // 1 GB: 20 ms of streaming; 40 G ops: 40 ms at the peak
  experts.Add(1'000'000'000, 2'500'000'000, 0.2);  // 2.5 GB: 50 ms; 2 G ops: 2 ms
  const DecodeStepBound bound = BoundDecodeStep(dense, experts, 3.6e9, bandwidth, peak);
  EXPECT_DOUBLE_EQ(bound.dense.memory_seconds, 0.020);
  EXPECT_DOUBLE_EQ(bound.dense.compute_seconds, 0.040);
  EXPECT_TRUE(bound.dense.compute_bound());
  EXPECT_DOUBLE_EQ(bound.dense.seconds(), 0.040);
  EXPECT_DOUBLE_EQ(bound.experts.seconds(), 0.050);
  EXPECT_FALSE(bound.experts.compute_bound());
  EXPECT_NEAR(bound.other_weights_seconds, 0.002, 1e-15);  // the other 0.1 GB of the step
  EXPECT_NEAR(bound.seconds(), 0.092, 1e-15);  // 40 + 50 + 2 ms: not max(40 + 2, 20 + 50 + 2) as a whole roofline
  // A step whose byte count is below the products' (an expert cache counting fewer bytes) leaves no other weights.
  EXPECT_EQ(BoundDecodeStep(dense, experts, 3e9, bandwidth, peak).other_weights_seconds, 0.0);
}

// On the trained default model: a profiled prefill gives the same logits bit for bit, its parts add up to at most
// the forward's wall time, and the products and attention each got some of it.
TEST(PassProfile, ProfiledForwardIsTheSameForwardAndAccountsForItsTime) {
  const std::string dir = testing::TestDataPath("../../models/glint-tiny");
  WorkerPool pool(2);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> model, FastModel::Load(dir, pool));
  std::vector<int32_t> tokens(200);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % 1000);
  std::vector<std::vector<float>> logits;
  for (bool profiled : {false, true}) {
    model->SetProfiling(profiled);
    SequenceState state = model->NewSequence();
    std::vector<EntryOutput> outputs;
    BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
    Stopwatch wall;
    ASSERT_OK(model->Forward({&entry, 1}, outputs));
    const double elapsed = wall.Seconds();
    logits.push_back(outputs[0].logits);
    const PassProfile::Seconds& parts = model->last_step().part_seconds;
    if (!profiled) {
      EXPECT_EQ(Total(parts), 0.0);
      continue;
    }
    EXPECT_GT(Total(parts), 0.0);
    EXPECT_LE(Total(parts), elapsed);
    for (PassPart part : {PassPart::kInt8Products, PassPart::kKdaChunks, PassPart::kMhc, PassPart::kMoeRouting}) {
      EXPECT_GT(parts[static_cast<int>(part)], 0.0) << PassPartName(part);
    }
  }
  EXPECT_EQ(logits[0], logits[1]);
}

// bench-model's products split: every row routed to an expert (top-k routed plus the shared expert, each
// gate+up and down: 3·D·width multiply-adds) counts as an expert product, the rest of the integer products
// (projections, the dense MLP, lm_head) as dense ones, each with its own wall time.
TEST(PassProfile, ProductsAreSplitIntoDenseAndExpertWork) {
  const std::string dir = testing::TestDataPath("../../models/glint-tiny");
  WorkerPool pool(2);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> model, FastModel::Load(dir, pool));
  const ModelConfig& c = model->config();
  const int64_t n = 64;
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((i * 53 + 7) % 1000);
  SequenceState state = model->NewSequence();
  std::vector<EntryOutput> outputs;
  BatchEntry entry{tokens, &state, LogitsWanted::kLast, false};
  ASSERT_OK(model->Forward({&entry, 1}, outputs));
  int64_t moe_layers = 0;
  for (MlpKind kind : c.mlp_kinds) moe_layers += kind == MlpKind::kMoe;
  ASSERT_GT(moe_layers, 0);
  const uint64_t expert_macs = static_cast<uint64_t>(
      moe_layers * n * 3 * c.hidden_size * (c.num_experts_per_tok * c.moe_intermediate_size + c.SharedIntermediate()));
  const FastStepStats& stats = model->last_step();
  EXPECT_EQ(stats.expert_products.macs, expert_macs);
  EXPECT_GT(stats.dense_products.macs, 0u);
  EXPECT_GT(stats.expert_products.seconds, 0.0);
  EXPECT_GT(stats.dense_products.seconds, 0.0);
  EXPECT_EQ(stats.products().macs, stats.dense_products.macs + stats.expert_products.macs);
  // Weight bytes (bench-model's bound by part): both kinds read some, and together no more than the whole pass.
  EXPECT_GT(stats.expert_products.weight_bytes, 0u);
  EXPECT_GT(stats.dense_products.weight_bytes, 0u);
  EXPECT_LE(stats.products().weight_bytes, stats.weight_bytes_read);
  EXPECT_EQ(stats.products().weight_bytes, stats.dense_products.weight_bytes + stats.expert_products.weight_bytes);
  EXPECT_GT(stats.products().Gops(), 0.0);
}

}  // namespace
}  // namespace glint
