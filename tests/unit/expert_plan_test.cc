// The expert-cache model of `glint plan` and the start-up capacity report (plan/expert_cache.h): the arithmetic
// on round numbers, and the released model's table.
#include <gtest/gtest.h>

#include "plan/expert_cache.h"
#include "plan/planner.h"
#include "test_util.h"

namespace glint::plan {
namespace {

TEST(ExpertCacheModel, BytesAndTokensPerSecondFollowTheHitRate) {
  // 100 GB of experts, 4 GB of them per token; 10 GB resident of which 2 GB read per token; a 25 GB cache.
  ExpertCacheModelInputs in{100e9, 4e9, 10e9, 2e9, 25e9, 2e9, 50e9, std::nullopt};
  ExpertCacheEstimate e = EstimateExpertCache(in);
  EXPECT_DOUBLE_EQ(e.cache_fraction, 0.25);
  EXPECT_DOUBLE_EQ(e.hit_rate, 0.25);  // uniform routing: the cache's share
  EXPECT_DOUBLE_EQ(e.disk_bytes_per_token, 3e9);
  EXPECT_DOUBLE_EQ(e.memory_bytes_per_token, 3e9);
  EXPECT_DOUBLE_EQ(e.tokens_per_second, 1.0 / (1.5 + 0.06));
  EXPECT_DOUBLE_EQ(e.disk_share, 1.5 / 1.56);
  in.hit_rate = 0.75;  // a skewed router
  e = EstimateExpertCache(in);
  EXPECT_DOUBLE_EQ(e.disk_bytes_per_token, 1e9);
  EXPECT_DOUBLE_EQ(e.tokens_per_second, 1.0 / (0.5 + 5e9 / 50e9));
  in.cache_bytes = 200e9;  // everything fits: no drive reads whatever the hit rate given
  e = EstimateExpertCache(in);
  EXPECT_DOUBLE_EQ(e.hit_rate, 1.0);
  EXPECT_DOUBLE_EQ(e.disk_bytes_per_token, 0);
  EXPECT_DOUBLE_EQ(e.tokens_per_second, 1.0 / (6e9 / 50e9));
}

TEST(ExpertCacheModel, PlanPrintsTheReleasedModelOnSmallMachines) {
  PlanRequest request;
  request.hardware = {"h100x8"};
  request.expert_ram_gb = {64, 256};
  request.disk_gbps = {3, 7};
  ASSERT_OK_AND_ASSIGN(PlanInputs inputs, ResolvePlan(request));
  const Report report = BuildPlanReport(inputs);
  const Table* table = nullptr;
  for (const Table& t : report.tables) table = t.id == "expert_cache" ? &t : table;
  ASSERT_NE(table, nullptr);
  ASSERT_EQ(table->rows.size(), 8u);  // schemes C and E × 2 RAM sizes × 2 drives
  // More RAM or a faster drive is never slower; int4 experts (E) beat int8 (C) on the same machine.
  auto rate = [&](size_t row) { return table->rows[row][7].number.value_or(0.0); };  // tokens/s; 0: does not fit
  EXPECT_LT(rate(0), rate(1));                                                       // C, 64 GB: 3 → 7 GB/s
  EXPECT_LT(rate(0), rate(2));                                                       // C: 64 → 256 GB
  EXPECT_LT(rate(0), rate(4));                                                       // 64 GB: C → E
  EXPECT_GT(rate(0), 0);
  request.disk_gbps = {0};
  EXPECT_ERROR_CONTAINS(ResolvePlan(request), "--disk-bandwidth");
  request.disk_gbps = {3};
  request.expert_hit_rate = 1.5;
  EXPECT_ERROR_CONTAINS(ResolvePlan(request), "--expert-hit-rate");
}

}  // namespace
}  // namespace glint::plan
