// --dp-attention's MoE row exchange (dist/row_exchange.h) against a plain reference: which ranks a row goes to,
// the records packed for each rank and unpacked by the receiver, the return counts, and the combine — each row's
// partial sums added in ascending rank order in double, as Communicator::AllReduceSum adds the replicated layout's.
// The exchange itself runs through the single-process communicator here and through MPI in
// tests/mpi/dist_mpi_test.cc and dp_attention_mpi_test.cc.
#include "dist/row_exchange.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dist/communicator.h"
#include "dist/sharding.h"
#include "test_util.h"

namespace glint {
namespace {

// 3 ranks: experts 0–2, 3–5, 6–7; the shared expert on rank 2.
ShardPlan ThreeRanks() {
  ShardPlan plan;
  plan.ranks = 3;
  plan.experts_of_rank = {{0, 3}, {3, 6}, {6, 8}};
  plan.slices_of_rank.resize(3);
  plan.shared_expert_rank = 2;
  return plan;
}

TEST(RowExchange, DestinationsAreTheHoldersAscendingOnceEach) {
  const ShardPlan plan = ThreeRanks();
  EXPECT_EQ(RowDestinations(std::vector<int32_t>{4, 1}, plan, false), (std::vector<int>{0, 1}));
  EXPECT_EQ(RowDestinations(std::vector<int32_t>{0, 2}, plan, false), (std::vector<int>{0}));
  EXPECT_EQ(RowDestinations(std::vector<int32_t>{0, 2}, plan, true), (std::vector<int>{0, 2}));
  EXPECT_EQ(RowDestinations(std::vector<int32_t>{7, 3}, plan, true), (std::vector<int>{1, 2}));
}

TEST(RowExchange, PackGroupsByRankAndUnpackRestoresEveryRecord) {
  const ShardPlan plan = ThreeRanks();
  constexpr int64_t n = 4, d = 3, k = 2;
  const std::vector<float> h = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
  const std::vector<int32_t> experts = {0, 4, 6, 7, 1, 2, 3, 6};
  const std::vector<float> weights = {0.5f, 0.25f, 1, 2, 3, 4, 5, 6};
  std::vector<std::vector<int>> destinations;
  for (int64_t t = 0; t < n; ++t) {
    destinations.push_back(RowDestinations(std::span(experts).subspan(t * k, k), plan, false));
  }
  const DispatchedRows sent = PackDispatch(h.data(), n, d, k, experts, weights, destinations, plan.ranks);
  const uint64_t record = DispatchRecordBytes(k, d);
  EXPECT_EQ(record, 2 * 4 + 2 * 4 + 3 * 4u);
  // Reference: rank 0 gets rows 0 and 2, rank 1 rows 0 and 3, rank 2 rows 1 and 3.
  EXPECT_EQ(sent.counts, (std::vector<uint64_t>{2 * record, 2 * record, 2 * record}));
  EXPECT_EQ(sent.rows, (std::vector<int64_t>{0, 2, 0, 3, 1, 3}));
  ASSERT_OK_AND_ASSIGN(const ReceivedRows in, UnpackDispatch(sent.bytes, sent.counts, k, d, 8));
  ASSERT_EQ(in.rows, 6);
  for (int64_t i = 0; i < in.rows; ++i) {
    const int64_t t = sent.rows[i];
    EXPECT_EQ(in.experts[i * k], experts[t * k]);
    EXPECT_EQ(in.experts[i * k + 1], experts[t * k + 1]);
    EXPECT_EQ(in.weights[i * k + 1], weights[t * k + 1]);
    EXPECT_EQ(std::memcmp(in.hidden.data() + i * d, h.data() + t * d, d * sizeof(float)), 0) << "record " << i;
  }
  EXPECT_EQ(ReturnCounts(sent.counts, k, d), (std::vector<uint64_t>{2 * d * 4, 2 * d * 4, 2 * d * 4}));
}

TEST(RowExchange, UnpackRefusesPartialRecordsAndUnknownExperts) {
  const std::vector<int32_t> experts = {0, 9};
  const std::vector<float> weights = {1, 1}, h = {1, 2};
  const DispatchedRows sent = PackDispatch(h.data(), 1, 2, 2, experts, weights, {{0}}, 1);
  EXPECT_ERROR_CONTAINS(UnpackDispatch(sent.bytes, sent.counts, 2, 2, 8), "expert 9 of 8");
  std::vector<std::byte> short_bytes(sent.bytes.begin(), sent.bytes.end() - 1);
  const std::vector<uint64_t> short_counts = {short_bytes.size()};
  EXPECT_ERROR_CONTAINS(UnpackDispatch(short_bytes, short_counts, 2, 2, 8), "not whole records");
}

// The combine adds a row's partials in rank order in double and rounds once: the bits of AllReduceSum over the
// ranks' partials, where a rank the row was not sent to contributes 0.
TEST(RowExchange, CombineAddsInRankOrderLikeTheReplicatedAllReduce) {
  constexpr int64_t n = 3, d = 2, k = 1;
  const std::vector<float> h(n * d, 0.0f), weights(n * k, 1.0f);
  const std::vector<int32_t> experts(n * k, 0);
  const std::vector<std::vector<int>> destinations = {{0, 1, 2}, {1}, {}};
  const DispatchedRows sent = PackDispatch(h.data(), n, d, k, experts, weights, destinations, 3);
  // Partial sums chosen so that the order and the rounding matter in fp32: 1, 2^-24, 2^-24.
  const float tiny = 1.0f / (1 << 24);
  const std::vector<float> partial_of_rank[3] = {{1.0f, -1.0f, 0, 0}, {tiny, 3.0f, 7.5f, -2.0f}, {tiny, 5.0f, 0, 0}};
  std::vector<float> returned;  // what comes back, by source rank: row 0 from rank 0, rows 0 and 1 from rank 1, …
  returned.insert(returned.end(), partial_of_rank[0].begin(), partial_of_rank[0].begin() + d);
  returned.insert(returned.end(), partial_of_rank[1].begin(), partial_of_rank[1].end());
  returned.insert(returned.end(), partial_of_rank[2].begin(), partial_of_rank[2].begin() + d);
  const std::vector<uint64_t> returned_counts = ReturnCounts(sent.counts, k, d);
  std::vector<float> out(n * d, -1.0f);
  ASSERT_OK(CombineReturned(std::as_bytes(std::span(returned)), returned_counts, sent, n, k, d, out.data()));
  // Reference: every rank's partial for every row (zeros where not sent), summed by AllReduceSum's arithmetic.
  const std::vector<float> full[3] = {
      {1.0f, -1.0f, 0, 0, 0, 0}, {tiny, 3.0f, 7.5f, -2.0f, 0, 0}, {tiny, 5.0f, 0, 0, 0, 0}};
  for (int64_t i = 0; i < n * d; ++i) {
    const double sum = static_cast<double>(full[0][i]) + full[1][i] + full[2][i];
    EXPECT_EQ(out[i], static_cast<float>(sum)) << "element " << i;
  }
  EXPECT_EQ(out[0], 1.0f + 2 * tiny);  // one rounding of the exact sum (fp32 adds in order would give 1)
  EXPECT_EQ(out[4], 0.0f);             // a row sent nowhere
  const std::vector<uint64_t> wrong = {0, 0, 0};
  EXPECT_ERROR_CONTAINS(CombineReturned({}, wrong, sent, n, k, d, out.data()), "do not match");
}

TEST(RowExchange, SingleProcessAllToAllCopiesAndCounts) {
  SingleProcessCommunicator comm;
  const std::vector<std::byte> send(24, std::byte{7});
  const std::vector<uint64_t> counts = {24};
  std::vector<std::byte> received;
  std::vector<uint64_t> received_counts;
  ASSERT_OK(comm.AllToAll(send, counts, received, received_counts));
  EXPECT_EQ(received, send);
  EXPECT_EQ(received_counts, counts);
  EXPECT_EQ(comm.stats().all_to_alls, 1);
  EXPECT_EQ(comm.stats().of(CollectiveKind::kAllToAll).calls, 1);
  const std::vector<uint64_t> bad = {23};
  EXPECT_ERROR_CONTAINS(comm.AllToAll(send, bad, received, received_counts), "summing to 23");
}

}  // namespace
}  // namespace glint
