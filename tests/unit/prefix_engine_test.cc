// The prefix cache's checkpoint policy, budget and disk tier in the engine, on the golden tiny models
// (docs/engine.md "Checkpoint spacing", "Disk tier"): greedy tokens and their top-5 log-probabilities (a function
// of the logits) are identical, bit for bit, with a hit served from the disk, with the files damaged, and with
// either spacing policy, to each prompt computed alone on an engine whose cache is empty; the tokens are also those
// of an engine without prefix caching (its logits differ in the last bits: checkpoint positions split the KDA
// recurrence as a chunk boundary would, docs/engine.md "Scheduling"). The disk tier is refused clearly where it
// cannot work.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine_checks.h"
#include "model/model.h"
#include "test_util.h"

namespace glint {
namespace {

using Tokens = std::vector<int32_t>;
using testing::Collector;
using testing::MakeCore;
using testing::RunToCompletion;

constexpr int64_t kGenerated = 8;
constexpr uint64_t kModelFingerprint = 0x600d;

struct Outcome {
  Tokens tokens;
  friend void PrintTo(const Outcome& o, std::ostream* os) {
    for (size_t i = 0; i < o.tokens.size(); ++i) {
      *os << o.tokens[i] << " [";
      if (i < o.top.size()) {
        for (const TokenLogprob& t : o.top[i]) *os << t.token << ":" << t.logprob << " ";
      }
      *os << "] ";
    }
  }
  std::vector<std::vector<TokenLogprob>> top;  // [token][5]
  bool operator==(const Outcome& other) const {
    if (tokens != other.tokens || top.size() != other.top.size()) return false;
    for (size_t i = 0; i < top.size(); ++i) {
      if (top[i].size() != other.top[i].size()) return false;
      for (size_t k = 0; k < top[i].size(); ++k) {
        // Exact: the same logits give the same float.
        if (top[i][k].token != other.top[i][k].token || top[i][k].logprob != other.top[i][k].logprob) return false;
      }
    }
    return true;
  }
};

void ExpectSame(const std::vector<Outcome>& got, const std::vector<Outcome>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "request " << i;
}

class PrefixEngine : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto loaded = ReferenceModel::Load(testing::TestDataPath("golden/" + GetParam()));
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    model_ = std::move(loaded).value();
    const auto [a, b] = testing::GoldenOutputs(GetParam()).LongerAndShorterTokens();
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(a.size()), 56);
    // A conversation turn (a), a second turn extending it, and an unrelated prompt that evicts the first from a
    // small pool.
    first_ = Tokens(a.begin(), a.begin() + n);
    second_ = first_;
    second_.insert(second_.end(), b.begin(), b.begin() + std::min<int64_t>(10, static_cast<int64_t>(b.size())));
    for (int64_t i = 0; i < n; ++i) other_.push_back(b[i % b.size()] ^ (i & 1));
  }

  Outcome Generate(EngineCore& core, const Tokens& prompt) {
    auto sink = std::make_shared<Collector>();
    Request request = testing::Greedy(prompt, kGenerated, sink);
    request.logprobs = 5;
    EXPECT_OK(core.Add(++next_id_, std::move(request)));
    RunToCompletion(core);
    Outcome outcome;
    for (const RequestOutput& out : sink->outputs) {
      outcome.tokens.insert(outcome.tokens.end(), out.tokens.begin(), out.tokens.end());
      outcome.top.insert(outcome.top.end(), out.top_logprobs.begin(), out.top_logprobs.end());
    }
    EXPECT_EQ(static_cast<int64_t>(outcome.tokens.size()), kGenerated);
    return outcome;
  }

  // first, other (evicting first from memory), second, other, first again: what a client of a small server sees.
  std::vector<const Tokens*> Prompts() const { return {&first_, &other_, &second_, &other_, &first_}; }
  std::vector<Outcome> Conversation(EngineCore& core) {
    std::vector<Outcome> outcomes;
    for (const Tokens* prompt : Prompts()) {
      outcomes.push_back(Generate(core, *prompt));
    }
    testing::ExpectPoolsAtStart(core);
    return outcomes;
  }
  // The oracle: each prompt alone on a fresh engine (prefix caching on, nothing cached); checks that its tokens are
  // those of an engine without prefix caching.
  std::vector<Outcome> Expected(const EngineOptions& options) {
    auto uncached = MakeCore(*model_, testing::SizedOptions(*model_, 2, 40, 0));
    std::vector<Outcome> expected;
    for (const Tokens* prompt : Prompts()) {
      auto fresh = MakeCore(*model_, options);
      expected.push_back(Generate(*fresh, *prompt));
      EXPECT_EQ(Generate(*uncached, *prompt).tokens, expected.back().tokens);
    }
    return expected;
  }

  // 2 slots, blocks of 8 tokens for the longest request and 2 more, checkpoints every 16 tokens: the other
  // prompt evicts the first one's blocks and checkpoints.
  EngineOptions Small(const std::string& disk_dir) const {
    const int64_t blocks = (static_cast<int64_t>(second_.size()) + kGenerated + 7) / 8 + 2;
    // As many checkpoints as the first prompt passes: the other prompt's evict all of them.
    const int64_t checkpoints = static_cast<int64_t>(first_.size()) / 16;
    EngineOptions o = testing::SizedOptions(*model_, 2, blocks, checkpoints);
    if (!disk_dir.empty())
      o.prefix_disk = {.directory = disk_dir, .size_bytes = 64 << 20, .model_fingerprint = kModelFingerprint};
    return o;
  }

  std::unique_ptr<ReferenceModel> model_;
  Tokens first_, second_, other_;
  RequestId next_id_ = 0;
};

TEST_P(PrefixEngine, DiskHitsGiveTheOutputsAndLogitsOfNoCache) {
  const std::vector<Outcome> expected = Expected(Small(""));

  auto memory_only = MakeCore(*model_, Small(""));
  ExpectSame(Conversation(*memory_only), expected);
  const int64_t memory_hits = memory_only->Metrics().cache.prefix_hit_tokens;

  const std::string dir = testing::MakeTempDir("prefix-engine-disk");
  auto core = MakeCore(*model_, Small(dir));
  ExpectSame(Conversation(*core), expected);
  const CacheStats stats = core->Metrics().cache;
  ASSERT_TRUE(stats.disk_tier);
  EXPECT_GT(stats.disk.block_writes, 0);
  EXPECT_GT(stats.disk.block_reads, 0);
  EXPECT_GT(stats.disk.checkpoint_reads, 0);
  EXPECT_GT(stats.disk_hit_tokens, 0);
  EXPECT_EQ(stats.disk.read_failures, 0);
  EXPECT_GT(stats.prefix_hit_tokens, memory_hits);  // the disk served what memory had evicted
}

// Every file on the disk damaged before the hits: the outputs stay those of no cache; the reads fail (logged).
TEST_P(PrefixEngine, DamagedFilesAreMissesNotWrongAnswers) {
  const std::vector<Outcome> expected = Expected(Small(""));
  const std::string dir = testing::MakeTempDir("prefix-engine-damage");
  auto core = MakeCore(*model_, Small(dir));
  EXPECT_EQ(Generate(*core, first_), expected[0]);
  EXPECT_EQ(Generate(*core, other_), expected[1]);  // the first prompt's blocks and checkpoints go to the disk
  int64_t damaged = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".glpc") continue;
    std::filesystem::resize_file(entry.path(), std::filesystem::file_size(entry.path()) - 1);  // truncated
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  EXPECT_EQ(Generate(*core, second_), expected[2]);
  EXPECT_GT(core->Metrics().cache.disk.read_failures, 0);
  EXPECT_EQ(core->Metrics().cache.disk.block_reads + core->Metrics().cache.disk.checkpoint_reads, 0);
}

TEST_P(PrefixEngine, BothSpacingPoliciesGiveTheOutputsOfNoCache) {
  for (CheckpointPolicy policy : {CheckpointPolicy::kUniform, CheckpointPolicy::kTail}) {
    SCOPED_TRACE(CheckpointPolicyName(policy));
    EngineOptions options = testing::SizedOptions(*model_, 2, 40, 12);  // room for hits
    options.checkpoint_policy = policy;
    options.checkpoint_interval = 8;  // a checkpoint per block: the tail policy demotes some at these lengths
    auto core = MakeCore(*model_, options);
    ExpectSame(Conversation(*core), Expected(options));
    EXPECT_GT(core->Metrics().cache.prefix_hit_tokens, 0);
    if (policy == CheckpointPolicy::kTail) {
      EXPECT_GT(core->Metrics().cache.checkpoints_demoted, 0);
    }
  }
}

TEST_P(PrefixEngine, TheDiskTierIsRefusedWhereItCannotWork) {
  const std::string dir = testing::MakeTempDir("prefix-engine-refused");
  EngineOptions options = Small(dir);
  options.prefix_disk.model_fingerprint = 0;
  EXPECT_ERROR_CONTAINS(EngineCore::Create(*model_, options), "needs the model's fingerprint");
  options = Small(dir);
  options.prefix_caching = false;
  EXPECT_ERROR_CONTAINS(EngineCore::Create(*model_, options), "--no-prefix-caching");
  options = Small(dir + "/missing");
  EXPECT_ERROR_CONTAINS(EngineCore::Create(*model_, options), "create it first");
  auto first = MakeCore(*model_, Small(dir));
  EXPECT_ERROR_CONTAINS(EngineCore::Create(*model_, Small(dir)), "in use by another glint process");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixEngine, ::testing::Values("tiny-dense", "tiny-sparse"));

}  // namespace
}  // namespace glint
