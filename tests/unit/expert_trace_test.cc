// Routing traces (--expert-trace) and the cache policies replayed over them (experts/expert_trace.h), on hand-made
// traces whose hit counts follow from the policy's definition.
#include "experts/expert_trace.h"

#include <gtest/gtest.h>

#include <string>

#include "base/file.h"
#include "test_util.h"

namespace glint {
namespace {

// One layer, top-1: the passes' experts in order.
ExpertTrace OneLayer(const std::vector<int32_t>& experts) {
  ExpertTrace trace{1, 16, 1, {}};
  for (size_t i = 0; i < experts.size(); ++i) trace.passes.push_back({static_cast<int64_t>(i), 0, {{experts[i], 1}}});
  return trace;
}

TEST(ExpertTrace, WrittenTracesParseBack) {
  const std::string path = JoinPath(testing::MakeTempDir("expert_trace"), "t.trace");
  {
    ASSERT_OK_AND_ASSIGN(auto writer, ExpertTraceWriter::Open(path, 2, 16, 2, 5));
    writer->Record(1, 2, {{3, 7}, {7, 1}});
    writer->Record(1, 5, {{0, 9}});
  }
  ASSERT_OK_AND_ASSIGN(std::string text, ReadFile(path));
  EXPECT_EQ(text, "# glint expert trace: moe_layers 2 experts 16 top_k 2\n1 2 1:1 3:1 7:2\n1 mtp 0:1 9:1\n");
  ASSERT_OK_AND_ASSIGN(ExpertTrace trace, ParseExpertTrace(text, 5));
  EXPECT_EQ(trace.top_k, 2);
  ASSERT_EQ(trace.passes.size(), 2u);
  EXPECT_EQ(trace.passes[0].experts, (std::vector<std::pair<int32_t, int32_t>>{{1, 1}, {3, 1}, {7, 2}}));
  EXPECT_EQ(trace.passes[1].layer, 5);
  EXPECT_ERROR_CONTAINS(ParseExpertTrace("1 2 3:1\n"), "no '# glint expert trace:' header");
  EXPECT_ERROR_CONTAINS(ParseExpertTrace("# glint expert trace: moe_layers 1 experts 4 top_k 1\n1 0 x\n"),
                        "line 2: 'x' is not expert:rows");
}

// A cycle over 3 experts with 2 slots: LRU always evicts the one needed next (0 hits), as every layer pass of a
// cache smaller than a step's experts does.
TEST(ExpertTrace, LruMissesACycleLargerThanTheCache) {
  const ExpertTrace cycle = OneLayer({0, 1, 2, 0, 1, 2, 0, 1, 2});
  EXPECT_EQ(ReplayExpertPolicy(cycle, 2, ExpertPolicy::kLru).hits, 0);
  EXPECT_EQ(ReplayExpertPolicy(cycle, 3, ExpertPolicy::kLru).hits, 6);  // everything after the first round
}

// A hot expert among one-off ones: the frequency policies keep it, LRU loses it to the scan.
TEST(ExpertTrace, FrequencyPoliciesKeepAHotExpertThroughAScan) {
  const ExpertTrace trace = OneLayer({5, 5, 5, 5, 1, 2, 3, 5, 4, 6, 7, 5});
  EXPECT_EQ(ReplayExpertPolicy(trace, 2, ExpertPolicy::kLru).hits, 3);      // the first repeats only
  EXPECT_EQ(ReplayExpertPolicy(trace, 2, ExpertPolicy::kLfuAged).hits, 5);  // and both later returns
  EXPECT_EQ(ReplayExpertPolicy(trace, 2, ExpertPolicy::kFrequencyWeighted).hits, 5);
  const PolicyReplay replay = ReplayExpertPolicy(trace, 2, ExpertPolicy::kLru);
  EXPECT_EQ(replay.hits + replay.misses, 12);
}

// --expert-profile in the replay: the profile's hottest experts (by rows) are held from the start and never evicted,
// in at most half the slots; the rest of the cache follows the policy.
TEST(ExpertTrace, AProfileKeepsItsHottestExpertsForGood) {
  const ExpertTrace trace = OneLayer({5, 5, 5, 5, 1, 2, 3, 5, 4, 6, 7, 5});
  const std::vector<std::pair<int64_t, int32_t>> hot = HottestExperts(trace);
  ASSERT_GE(hot.size(), 2u);
  EXPECT_EQ(hot[0], (std::pair<int64_t, int32_t>{0, 5}));  // 6 rows; the others 1 each, in id order
  EXPECT_EQ(hot[1], (std::pair<int64_t, int32_t>{0, 1}));
  // 2 slots: expert 5 kept (1 slot), the other slot LRU over the one-offs: every 5 hits, from the first.
  EXPECT_EQ(ReplayExpertPolicy(trace, 2, ExpertPolicy::kLru, hot).hits, 6);
  EXPECT_EQ(ReplayExpertPolicy(trace, 2, ExpertPolicy::kLru, {}).hits, 3);  // as without a profile
  // A cache of 1 keeps nothing (half of 1 slot is none).
  EXPECT_EQ(ReplayExpertPolicy(trace, 1, ExpertPolicy::kLru, hot).hits,
            ReplayExpertPolicy(trace, 1, ExpertPolicy::kLru).hits);
}

}  // namespace
}  // namespace glint
