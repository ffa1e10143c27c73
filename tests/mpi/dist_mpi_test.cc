// MpiCommunicator under mpirun with 2–4 ranks: every collective against what it must give, computed locally from
// the ranks' known inputs; sums bit for bit identical on every rank and equal to the rank-order double sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dist/communicator.h"
#include "dist/launch.h"
#include "mpi_test_main.h"
#include "test_util.h"

namespace glint {
namespace {

// Rank r's contribution at index i: values whose sum depends on the order of addition in fp32.
float Part(int rank, size_t i) {
  return (rank % 2 == 0 ? 1.0f : -1.0f) * std::ldexp(1.0f + 0.1f * i, 3 * rank) + 1e-3f * i;
}

TEST(MpiCommunicator, IsTheWorldOfMpirun) {
  Communicator& comm = testing::World();
  ASSERT_TRUE(LaunchedByMpirun());
  ASSERT_GE(comm.size(), 2) << "run under mpirun -np N with N ≥ 2";
  EXPECT_NE(comm.Describe().find("MPI"), std::string::npos) << comm.Describe();
}

TEST(MpiCommunicator, AllReduceSumIsTheRankOrderDoubleSumOnEveryRank) {
  Communicator& comm = testing::World();
  for (size_t length : {size_t{1}, size_t{7}, size_t{4096}}) {
    std::vector<float> values(length);
    for (size_t i = 0; i < length; ++i) values[i] = Part(comm.rank(), i);
    ASSERT_OK(comm.AllReduceSum(values));
    for (size_t i = 0; i < length; ++i) {
      double expected = 0;
      for (int r = 0; r < comm.size(); ++r) expected += Part(r, i);
      ASSERT_EQ(values[i], static_cast<float>(expected)) << "index " << i << " of " << length;
    }
    // Every rank holds the same bits: gather rank 0's bytes… from everyone and compare.
    std::vector<std::byte> all(values.size() * sizeof(float) * comm.size());
    ASSERT_OK(comm.AllGather(std::as_bytes(std::span<const float>(values)), all));
    for (int r = 1; r < comm.size(); ++r) {
      EXPECT_EQ(std::memcmp(all.data(), all.data() + r * values.size() * sizeof(float), values.size() * sizeof(float)),
                0)
          << "rank " << r << " differs from rank 0";
    }
  }
}

TEST(MpiCommunicator, AllReduceSumBf16RoundsTheSumOnce) {
  Communicator& comm = testing::World();
  std::vector<uint16_t> values(33);
  for (size_t i = 0; i < values.size(); ++i) values[i] = FloatToBf16Bits(Part(comm.rank(), i));
  ASSERT_OK(comm.AllReduceSumBf16(values));
  for (size_t i = 0; i < values.size(); ++i) {
    double expected = 0;
    for (int r = 0; r < comm.size(); ++r) expected += Bf16BitsToFloat(FloatToBf16Bits(Part(r, i)));
    EXPECT_EQ(values[i], FloatToBf16Bits(static_cast<float>(expected))) << i;
  }
}

TEST(MpiCommunicator, AllGatherPlacesEachRankAtItsOffset) {
  Communicator& comm = testing::World();
  std::vector<std::byte> send(5, std::byte(comm.rank() + 1)), received(5 * comm.size());
  ASSERT_OK(comm.AllGather(send, received));
  for (int r = 0; r < comm.size(); ++r) {
    for (int i = 0; i < 5; ++i) EXPECT_EQ(received[r * 5 + i], std::byte(r + 1)) << r;
  }
  EXPECT_ERROR_CONTAINS(comm.AllGather(send, std::span<std::byte>(received).first(3)), "needs");
}

// Rank s sends rank r (s + 2r) mod 3 bytes of value 16 s + r (0 bytes to some): each rank gets every sender's bytes
// in rank order, the counts say how many came from each, and the stats count what crossed between ranks.
TEST(MpiCommunicator, AllToAllDeliversEachRanksPartInRankOrder) {
  Communicator& comm = testing::World();
  const int n = comm.size(), me = comm.rank();
  const auto bytes_from_to = [](int s, int r) { return static_cast<uint64_t>((s + 2 * r) % 3); };
  std::vector<std::byte> send;
  std::vector<uint64_t> counts;
  for (int r = 0; r < n; ++r) {
    counts.push_back(bytes_from_to(me, r));
    send.insert(send.end(), counts.back(), static_cast<std::byte>(16 * me + r));
  }
  const CollectiveStats before = comm.stats();
  std::vector<std::byte> received;
  std::vector<uint64_t> received_counts;
  ASSERT_OK(comm.AllToAll(send, counts, received, received_counts));
  std::vector<std::byte> expected;
  uint64_t from_others = 0;
  for (int s = 0; s < n; ++s) {
    EXPECT_EQ(received_counts[s], bytes_from_to(s, me)) << "from rank " << s;
    expected.insert(expected.end(), bytes_from_to(s, me), static_cast<std::byte>(16 * s + me));
    if (s != me) from_others += bytes_from_to(s, me);
  }
  EXPECT_EQ(received, expected);
  const CollectiveStats call = comm.stats().Since(before);
  EXPECT_EQ(call.all_to_alls, 1);
  EXPECT_EQ(call.bytes_sent, send.size() - counts[me]);
  EXPECT_EQ(call.bytes_received, from_others);
  counts[0] += 1;  // the counts must add up to what is sent: refused on every rank before any message
  EXPECT_ERROR_CONTAINS(comm.AllToAll(send, counts, received, received_counts), "all-to-all");
}

TEST(MpiCommunicator, BroadcastResizesReceiversFromEveryRoot) {
  Communicator& comm = testing::World();
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<std::byte> buffer;
    if (comm.rank() == root) buffer.assign(100 + root, std::byte(root));
    ASSERT_OK(comm.Broadcast(buffer, root));
    ASSERT_EQ(buffer.size(), 100u + root);
    EXPECT_EQ(buffer.front(), std::byte(root));
    EXPECT_EQ(buffer.back(), std::byte(root));
  }
  std::vector<std::byte> empty;
  ASSERT_OK(comm.Broadcast(empty, 0));  // a zero-length broadcast is fine
  EXPECT_TRUE(empty.empty());
  EXPECT_ERROR_CONTAINS(comm.Broadcast(empty, comm.size()), "is not a rank of");
}

TEST(MpiCommunicator, BarrierAndStatistics) {
  Communicator& comm = testing::World();
  comm.ResetStats();
  ASSERT_OK(comm.Barrier());
  std::vector<float> values(10, 1.0f);
  ASSERT_OK(comm.AllReduceSum(values));
  EXPECT_EQ(values[0], static_cast<float>(comm.size()));
  EXPECT_EQ(comm.stats().calls, 2);
  EXPECT_EQ(comm.stats().barriers, 1);
  EXPECT_EQ(comm.stats().all_reduces, 1);
  EXPECT_EQ(comm.stats().bytes_sent, 40u);
  EXPECT_EQ(comm.stats().bytes_received, 40u * (comm.size() - 1));
}

// The tp groups of tensor parallelism: ranks of one colour, ordered by key, sum among themselves only.
TEST(MpiCommunicator, SplitGroupsSumAmongThemselves) {
  Communicator& comm = testing::World();
  const int color = comm.rank() % 2, key = -comm.rank();  // key reverses the order inside a group
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> group, comm.Split(color, key));
  int members = 0, before_me = 0;
  for (int r = 0; r < comm.size(); ++r) {
    if (r % 2 != color) continue;
    ++members;
    before_me += r > comm.rank();
  }
  EXPECT_EQ(group->size(), members);
  EXPECT_EQ(group->rank(), before_me);
  std::vector<float> values = {static_cast<float>(comm.rank() + 1)};
  ASSERT_OK(group->AllReduceSum(values));
  float expected = 0;
  for (int r = color; r < comm.size(); r += 2) expected += static_cast<float>(r + 1);
  EXPECT_EQ(values[0], expected);
  ASSERT_OK(comm.Barrier());
}

}  // namespace
}  // namespace glint
