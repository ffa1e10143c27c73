// The single-process communicator and the rank-order sums every communicator shares (the MPI implementation runs
// the same checks under mpirun: tests/mpi/dist_mpi_test.cc).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "dist/communicator.h"
#include "dist/launch.h"
#include "dist/peer_watch.h"
#include "dist/sharding.h"
#include "io/config.h"
#include "test_util.h"

namespace glint {
namespace {

TEST(SingleProcessCommunicator, IsRankZeroOfOne) {
  SingleProcessCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.Describe(), "single process");
}

TEST(SingleProcessCommunicator, CollectivesKeepValuesAndCountCalls) {
  SingleProcessCommunicator comm;
  std::vector<float> values = {1.5f, -2.25f, 1e-30f};
  ASSERT_OK(comm.AllReduceSum(values));
  EXPECT_EQ(values, (std::vector<float>{1.5f, -2.25f, 1e-30f}));
  std::vector<uint16_t> halves = {FloatToBf16Bits(3.0f)};
  ASSERT_OK(comm.AllReduceSumBf16(halves));
  EXPECT_EQ(Bf16BitsToFloat(halves[0]), 3.0f);
  std::vector<std::byte> send = {std::byte{7}, std::byte{9}}, received(2);
  ASSERT_OK(comm.AllGather(send, received));
  EXPECT_EQ(received, send);
  std::vector<std::byte> buffer = {std::byte{1}};
  ASSERT_OK(comm.Broadcast(buffer, 0));
  EXPECT_EQ(buffer.size(), 1u);
  ASSERT_OK(comm.Barrier());
  const CollectiveStats& stats = comm.stats();
  EXPECT_EQ(stats.calls, 5);
  EXPECT_EQ(stats.all_reduces, 2);
  EXPECT_EQ(stats.all_gathers, 1);
  EXPECT_EQ(stats.broadcasts, 1);
  EXPECT_EQ(stats.barriers, 1);
  EXPECT_EQ(stats.bytes_received, 0u);  // nothing comes from another rank
  comm.ResetStats();
  EXPECT_EQ(comm.stats().calls, 0);
}

// What bench-model and bench-engine compare with glint plan: the world's collectives and its tp groups' together.
TEST(SingleProcessCommunicator, SplitsCountInTheirParentsStatsWithSplits) {
  SingleProcessCommunicator world;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> group, world.Split(0, 0));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> subgroup, group->Split(0, 0));
  std::vector<float> values = {1.0f, 2.0f};
  ASSERT_OK(world.AllReduceSum(values));
  ASSERT_OK(group->AllReduceSum(values));
  ASSERT_OK(group->Barrier());
  ASSERT_OK(subgroup->Barrier());
  EXPECT_EQ(world.stats().calls, 1) << "a communicator's own stats count its own calls only";
  EXPECT_EQ(world.stats_with_splits().calls, 4);
  EXPECT_EQ(world.stats_with_splits().all_reduces, 2);
  EXPECT_EQ(world.stats_with_splits().barriers, 2);
  EXPECT_EQ(group->stats().calls, 2);
  EXPECT_EQ(group->stats_with_splits().calls, 3);
  EXPECT_EQ(subgroup->stats_with_splits().calls, 1);
  // A split outliving its parent still counts (into memory the parent shared with it).
  group.reset();
  ASSERT_OK(subgroup->Barrier());
  EXPECT_EQ(world.stats_with_splits().calls, 5);
  world.ResetStats();
  EXPECT_EQ(world.stats_with_splits().calls, 0);
}

TEST(SingleProcessCommunicator, BadArgumentsAreRefused) {
  SingleProcessCommunicator comm;
  std::vector<std::byte> send(4), received(3);
  EXPECT_ERROR_CONTAINS(comm.AllGather(send, received), "needs 4 bytes to receive into, got 3");
  std::vector<std::byte> buffer;
  EXPECT_ERROR_CONTAINS(comm.Broadcast(buffer, 1), "broadcast root 1 is not a rank of 1");
}

TEST(Bf16Bits, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(FloatToBf16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(FloatToBf16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBf16Bits(1.0f + 3 * std::ldexp(1.0f, -9)), 0x3f81);  // above the tie: up
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(Bf16BitsToFloat(FloatToBf16Bits(-0.0f)), 0.0f);
  EXPECT_TRUE(std::isinf(Bf16BitsToFloat(FloatToBf16Bits(std::numeric_limits<float>::infinity()))));
}

TEST(Launch, WithoutMpirunTheCommunicatorIsSingleProcess) {
  if (LaunchedByMpirun()) GTEST_SKIP() << "this test binary was started by mpirun";
  ASSERT_OK_AND_ASSIGN(auto comm, MakeCommunicator(nullptr, nullptr));
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->Describe(), "single process");
}

// The shard plan (dist/sharding.h) of a config shaped like tiny-sparse: 3 KDA heads, 4 MLA heads, 16 experts.
ModelConfig PlanConfig() {
  ModelConfig c;
  c.kda_num_heads = 3, c.num_attention_heads = 4, c.intermediate_size = 192, c.moe_intermediate_size = 32;
  c.n_routed_experts = 16, c.n_shared_experts = 1;
  return c;
}

// The heartbeat's bookkeeping (dist/peer_watch.h): the peer silent the longest past the timeout is named; a peer
// that said goodbye never is; a rank that was itself stopped does not blame its peers for its own silence.
TEST(PeerSilence, NamesTheLongestSilentPeerPastTheTimeout) {
  using Clock = PeerSilence::Clock;
  const Clock::time_point start{};
  const auto at = [&](double seconds) {
    return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  const std::chrono::duration<double> timeout{4};
  PeerSilence silence(4, 1, start);
  EXPECT_EQ(silence.FirstSilent(at(4), timeout), std::nullopt);  // exactly the timeout: not yet
  silence.Heard(0, at(3));
  silence.Heard(2, at(2));
  EXPECT_EQ(silence.FirstSilent(at(4.5), timeout), 3);  // never heard since the start
  silence.Departed(3);
  EXPECT_EQ(silence.FirstSilent(at(4.5), timeout), std::nullopt);
  EXPECT_EQ(silence.FirstSilent(at(6.5), timeout), 2);  // 4.5 s against rank 0's 3.5 s
  EXPECT_DOUBLE_EQ(silence.SecondsSilent(2, at(6.5)), 4.5);
  silence.Heard(2, at(1));  // an older heartbeat never moves the clock back
  EXPECT_DOUBLE_EQ(silence.SecondsSilent(2, at(6.5)), 4.5);
  silence.Resumed(at(20));  // this rank was stopped for 13 s
  EXPECT_EQ(silence.FirstSilent(at(23), timeout), std::nullopt);
  EXPECT_EQ(silence.FirstSilent(at(24.5), timeout), 0);
}

TEST(PeerSilence, TimeoutComesFromTheEnvironmentOrIsRefusedWithTheVariable) {
  ASSERT_OK_AND_ASSIGN(double unset, ParsePeerTimeout(nullptr));
  EXPECT_EQ(unset, kDefaultPeerTimeoutSeconds);
  ASSERT_OK_AND_ASSIGN(double off, ParsePeerTimeout("0"));
  EXPECT_EQ(off, 0);
  ASSERT_OK_AND_ASSIGN(double fraction, ParsePeerTimeout("2.5"));
  EXPECT_EQ(fraction, 2.5);
  for (const char* bad : {"", "-1", "4s", "nan", "inf", "1e9"}) {
    const Result<double> parsed = ParsePeerTimeout(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("GLINT_PEER_TIMEOUT"), std::string::npos) << parsed.status().message();
  }
}

TEST(ShardPlan, TensorParallelSplitsHeadsAndColumnsUnevenlyAndReplicatesWhatIsTooSmall) {
  const ModelConfig c = PlanConfig();
  // --tp 3: KDA 1,1,1; MLA 2,1,1; every expert by columns (11, 11, 10), all 16 experts on every rank.
  std::vector<int64_t> mla;
  for (int r = 0; r < 3; ++r) {
    ASSERT_OK_AND_ASSIGN(ShardPlan plan, MakeShardPlan(c, r, 3, 3, 0));
    EXPECT_EQ(plan.ep, 1);
    EXPECT_TRUE(plan.kda_split && plan.mla_split && plan.mlp_split && plan.experts_by_columns);
    EXPECT_EQ(plan.slices().kda_heads.count(), 1);
    mla.push_back(plan.slices().mla_heads.count());
    EXPECT_EQ(plan.experts().count(), 16);
    EXPECT_TRUE(plan.holds_shared_expert());
    EXPECT_EQ(LocalConfig(c, plan).moe_intermediate_size, r < 2 ? 11 : 10);
  }
  EXPECT_EQ(mla, (std::vector<int64_t>{2, 1, 1}));
  // --tp 4: 3 KDA heads cannot give every rank one: replicated.
  ASSERT_OK_AND_ASSIGN(ShardPlan four, MakeShardPlan(c, 3, 4, 4, 0));
  EXPECT_FALSE(four.kda_split);
  EXPECT_EQ(four.slices().kda_heads.count(), 3);
  EXPECT_EQ(LocalConfig(c, four).kda_num_heads, 3);
  EXPECT_EQ(four.slices().mla_heads.begin, 3);
}

TEST(ShardPlan, TensorAndExpertParallelGroups) {
  const ModelConfig c = PlanConfig();
  // 4 ranks, --tp 2 --ep 2: ranks 0, 1 hold experts 0–7 (columns halves), ranks 2, 3 experts 8–15 and the shared.
  for (int r = 0; r < 4; ++r) {
    ASSERT_OK_AND_ASSIGN(ShardPlan plan, MakeShardPlan(c, r, 4, 2, 2));
    EXPECT_EQ(plan.tp_rank(), r % 2);
    EXPECT_EQ(plan.ep_rank(), r / 2);
    EXPECT_EQ(plan.experts().begin, r < 2 ? 0 : 8);
    EXPECT_EQ(plan.experts().count(), 8);
    EXPECT_EQ(plan.slices().expert_columns.begin, r % 2 == 0 ? 0 : 16);
    EXPECT_EQ(plan.holds_shared_expert(), r >= 2);
  }
  ASSERT_OK_AND_ASSIGN(ShardPlan plan, MakeShardPlan(c, 0, 4, 2, 2));
  const Table table = ShardPlanTable(plan, c);
  EXPECT_EQ(table.rows.size(), 4u);
  EXPECT_NE(DescribeShard(plan, c).find("tensor and expert parallel over 4 ranks"), std::string::npos);
  EXPECT_ERROR_CONTAINS(MakeShardPlan(c, 0, 4, 3, 0), "must equal the number of ranks");
  // --tp 1 is today's expert parallelism: nothing sliced.
  ASSERT_OK_AND_ASSIGN(ShardPlan ep, MakeShardPlan(c, 1, 2, 1, 0));
  EXPECT_FALSE(ep.kda_split || ep.mla_split || ep.mlp_split || ep.experts_by_columns);
  EXPECT_EQ(ep.slices().mla_heads.count(), 4);
}

// --expert-memory's layout (ModelParallel::whole_experts): attention and the dense MLP still split by the tp groups,
// the routed experts whole, by id over every rank (4, 4, 4, 4 of 16), the shared one on the last rank.
TEST(ShardPlan, WholeExpertsKeepAttentionSplitAndSpreadExpertsOverEveryRank) {
  const ModelConfig c = PlanConfig();
  for (int r = 0; r < 4; ++r) {
    ASSERT_OK_AND_ASSIGN(ShardPlan plan, MakeShardPlan(c, r, 4, 2, 2, 1, /*whole_experts=*/true));
    EXPECT_TRUE(plan.kda_split && plan.mla_split && plan.mlp_split);
    EXPECT_FALSE(plan.experts_by_columns);
    EXPECT_EQ(plan.experts().begin, 4 * r);
    EXPECT_EQ(plan.experts().count(), 4);
    EXPECT_EQ(LocalConfig(c, plan).moe_intermediate_size, c.moe_intermediate_size);
    EXPECT_EQ(plan.holds_shared_expert(), r == 3);
    EXPECT_NE(DescribeShard(plan, c).find("whole experts, by id over every rank"), std::string::npos);
  }
}

}  // namespace
}  // namespace glint
