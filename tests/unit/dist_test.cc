// The single-process communicator and the rank-order sums every communicator shares (the MPI implementation runs
// the same checks under mpirun: tests/mpi/dist_mpi_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dist/communicator.h"
#include "dist/launch.h"
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

}  // namespace
}  // namespace glint
