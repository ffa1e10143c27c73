// Bit-identity of `--expert-memory` (docs/expert-cache.md): with the routed experts read from the container into
// a cache of the minimum (one layer's top-k: evictions at every layer of every step), three times the minimum, and
// every expert, the logits and tokens are exactly those of the model with every expert resident — token-by-token
// decode, batched decode of sequences needing more distinct experts per step than the cache holds, the MTP layer
// and speculative decoding, and prefix-cache reuse — on the golden tiny-sparse fixture and the trained glint-tiny.
// Exact equality holds by construction (fast_moe.cc: each expert's products depend only on its rows and weights,
// and the combine order is fixed), so any difference is a bug, not rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "base/file.h"
#include "engine/engine_core.h"
#include "engine/sampling.h"
#include "engine_checks.h"
#include "expert_checks.h"
#include "experts/expert_trace.h"
#include "fast/fast_model.h"
#include "test_util.h"

namespace glint {
namespace {

using Tokens = std::vector<int32_t>;

using testing::ModelDir;

// Four prompts of 5..20 tokens in the model's vocabulary; the second and fourth share the first one's start.
std::vector<Tokens> PromptsFor(const std::string& name) {
  Tokens a, b;
  if (name == "glint-tiny") {  // English text in the model's tokenizer (held-out fortunes)
    std::tie(a, b) = testing::GlintTinyTexts();
  } else {
    const auto sequences = testing::GoldenOutputs(name).Tokens();
    a = sequences[0], b = sequences[1];
  }
  auto head = [](const Tokens& t, size_t n) { return Tokens(t.begin(), t.begin() + std::min(n, t.size())); };
  Tokens shared = head(a, 16);
  const Tokens tail = head(b, 4);
  shared.insert(shared.end(), tail.begin(), tail.end());
  return {head(a, 20), shared, head(b, 5), head(a, 9)};
}

struct ModelFixture {
  WorkerPool pool{2};
  std::string container;
  std::unique_ptr<FastModel> resident;
  testing::ExpertBudgets budgets;
  std::vector<Tokens> prompts;
};
ModelFixture& FixtureFor(const std::string& name) {
  static std::map<std::string, std::unique_ptr<ModelFixture>> fixtures;
  std::unique_ptr<ModelFixture>& fixture = fixtures[name];
  if (fixture == nullptr) {
    fixture = std::make_unique<ModelFixture>();
    fixture->container = testing::ConvertToContainer(ModelDir(name), fixture->pool);
    fixture->resident = FastModel::Load(fixture->container, fixture->pool).value();
    fixture->budgets = testing::BudgetsOf(fixture->container, fixture->pool);
    fixture->prompts = PromptsFor(name);
  }
  return *fixture;
}

enum class Budget { kMinimum, kThreeMinimum, kAll };
struct Case {
  std::string model;
  Budget budget;
};
std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.model + (info.param.budget == Budget::kMinimum        ? "_minimum"
                                         : info.param.budget == Budget::kThreeMinimum ? "_three_minimum"
                                                                                      : "_all");
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class ExpertIdentity : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    fixture_ = &FixtureFor(GetParam().model);
    ASSERT_NE(fixture_->resident, nullptr);
    const testing::ExpertBudgets& b = fixture_->budgets;
    const uint64_t budget = GetParam().budget == Budget::kMinimum        ? b.minimum
                            : GetParam().budget == Budget::kThreeMinimum ? 3 * b.minimum
                                                                         : b.all;
    FastModelOptions options;
    options.expert_memory = budget;
    ASSERT_OK_AND_ASSIGN(cached_, FastModel::Load(fixture_->container, fixture_->pool, options));
    ASSERT_NE(cached_->expert_cache(), nullptr);
  }
  const FastModel& resident() const { return *fixture_->resident; }
  const std::vector<Tokens>& prompts() const { return fixture_->prompts; }
  // Runs the same batch on both models (states in lockstep); expects identical outputs; returns the resident's.
  std::vector<EntryOutput> Both(std::vector<SequenceState>& resident_states, std::vector<SequenceState>& cached_states,
                                const std::vector<Tokens>& inputs, LogitsWanted logits, bool hidden = false) {
    std::vector<BatchEntry> on_resident, on_cached;
    for (size_t i = 0; i < inputs.size(); ++i) {
      on_resident.push_back({inputs[i], &resident_states[i], logits, hidden});
      on_cached.push_back({inputs[i], &cached_states[i], logits, hidden});
    }
    std::vector<EntryOutput> expected, got;
    EXPECT_OK(resident().Forward(on_resident, expected));
    EXPECT_OK(cached_->Forward(on_cached, got));
    EXPECT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < std::min(got.size(), expected.size()); ++i) {
      EXPECT_EQ(got[i].logits, expected[i].logits) << "entry " << i;
      EXPECT_EQ(got[i].hidden, expected[i].hidden) << "entry " << i;
    }
    return expected;
  }
  // Expects the cache to be idle (no pass pins anything between calls).
  void ExpectIdle() const { EXPECT_EQ(cached_->expert_cache()->pinned_slots(), 0); }

  ModelFixture* fixture_ = nullptr;
  std::unique_ptr<FastModel> cached_;
};

TEST_P(ExpertIdentity, PrefillThenTokenByTokenDecode) {
  std::vector<SequenceState> r, c;
  r.push_back(resident().NewSequence()), c.push_back(cached_->NewSequence());
  std::vector<EntryOutput> out = Both(r, c, {prompts()[0]}, LogitsWanted::kAll);
  for (int step = 0; step < 8 && !out.empty(); ++step) {
    const std::span<const float> last(out[0].logits.data() + out[0].logits.size() - resident().config().vocab_size,
                                      resident().config().vocab_size);
    out = Both(r, c, {{ArgMax(last)}}, LogitsWanted::kLast);
  }
  ExpectIdle();
}

// Four sequences decoding together: at the minimum budget a step needs more distinct experts per layer than the
// cache has slots, so experts stream through the slots within a layer pass.
TEST_P(ExpertIdentity, BatchedDecodeOfSeveralSequences) {
  std::vector<SequenceState> r, c;
  for (size_t i = 0; i < prompts().size(); ++i)
    r.push_back(resident().NewSequence()), c.push_back(cached_->NewSequence());
  std::vector<EntryOutput> out = Both(r, c, prompts(), LogitsWanted::kLast);
  int64_t most_active = 0;
  for (int step = 0; step < 6 && out.size() == prompts().size(); ++step) {
    std::vector<Tokens> next;
    for (const EntryOutput& o : out) next.push_back({ArgMax(o.logits)});
    out = Both(r, c, next, LogitsWanted::kLast);
    for (int64_t active : cached_->last_step().experts_active) most_active = std::max(most_active, active);
  }
  if (GetParam().budget == Budget::kMinimum) {
    EXPECT_GT(most_active, cached_->expert_cache()->slots());
  }
  ExpectIdle();
}

// The MTP layer's routed experts come through the cache too: draft logits identical after every decode.
TEST_P(ExpertIdentity, MtpLayerDrafts) {
  ASSERT_TRUE(resident().has_mtp());
  std::vector<SequenceState> r, c;
  r.push_back(resident().NewSequence()), c.push_back(cached_->NewSequence());
  Tokens input = prompts()[2];
  for (int step = 0; step < 5; ++step) {
    const std::vector<EntryOutput> out = Both(r, c, {input}, LogitsWanted::kLast, /*hidden=*/true);
    ASSERT_EQ(out.size(), 1u);
    const int32_t token = ArgMax(out[0].logits);
    // Pairs (h_t, x_{t+1}) for the positions just computed: the next tokens are the input's tail and the new token.
    Tokens next(input.begin() + 1, input.end());
    next.push_back(token);
    std::vector<float> expected, got;
    ASSERT_OK(resident().MtpForward(r[0], out[0].hidden, next, expected));
    ASSERT_OK(cached_->MtpForward(c[0], out[0].hidden, next, got));
    EXPECT_EQ(got, expected) << "step " << step;
    input = {token};
  }
  ExpectIdle();
}

constexpr int64_t kGenerated = 8;

std::vector<Tokens> RunEngine(const Model& model, const std::vector<Tokens>& prompts, bool speculative,
                              int64_t checkpoints, bool one_at_a_time, int64_t* prefix_hits = nullptr) {
  auto core = testing::MakeCore(model, testing::SizedOptions(model, 4, 48, checkpoints, speculative));
  if (core == nullptr) return {};
  std::vector<Tokens> tokens = testing::RunGreedyPrompts(*core, prompts, kGenerated, one_at_a_time);
  if (prefix_hits != nullptr) *prefix_hits = core->Metrics().cache.prefix_hits;
  return tokens;
}

TEST_P(ExpertIdentity, EngineBatchedAndSpeculativeDecoding) {
  const std::vector<Tokens> expected = RunEngine(resident(), prompts(), false, 0, false);
  EXPECT_EQ(RunEngine(*cached_, prompts(), false, 0, false), expected);
  EXPECT_EQ(RunEngine(*cached_, prompts(), true, 0, false), expected);  // MTP drafts verified: greedy unchanged
  EXPECT_EQ(RunEngine(resident(), prompts(), true, 0, false), expected);
  ExpectIdle();
}

TEST_P(ExpertIdentity, PrefixCacheReuse) {
  int64_t resident_hits = 0, cached_hits = 0;
  const std::vector<Tokens> expected = RunEngine(resident(), prompts(), false, 8, true, &resident_hits);
  EXPECT_EQ(RunEngine(*cached_, prompts(), false, 8, true, &cached_hits), expected);
  EXPECT_GT(cached_hits, 0);
  EXPECT_EQ(cached_hits, resident_hits);
  EXPECT_EQ(RunEngine(*cached_, prompts(), true, 8, true), expected);  // with MTP and its checkpoints too
  ExpectIdle();
}

INSTANTIATE_TEST_SUITE_P(Budgets, ExpertIdentity,
                         ::testing::Values(Case{"tiny-sparse", Budget::kMinimum},
                                           Case{"tiny-sparse", Budget::kThreeMinimum},
                                           Case{"tiny-sparse", Budget::kAll}, Case{"glint-tiny", Budget::kMinimum},
                                           Case{"glint-tiny", Budget::kThreeMinimum}, Case{"glint-tiny", Budget::kAll}),
                         CaseName);

}  // namespace
}  // namespace glint

namespace glint {
namespace {

// The replay predicts the cache: a decode traced with --expert-trace, replayed at the cache's size with its
// policy, gives exactly the hits and misses the cache counted (passes of ≤ top-k experts: no streaming).
TEST(ExpertPolicyReplay, PredictsTheCacheExactly) {
  ModelFixture& fixture = FixtureFor("glint-tiny");
  const std::string trace_dir = testing::MakeTempDir("expert_replay");
  for (ExpertPolicy policy : {ExpertPolicy::kLru, ExpertPolicy::kLfuAged, ExpertPolicy::kFrequencyWeighted}) {
    FastModelOptions options;
    options.expert_memory = 6 * fixture.budgets.minimum;  // 24 of 80 experts: every policy has hits
    options.expert_policy = policy;
    options.expert_trace = JoinPath(trace_dir, StrCat(static_cast<int>(policy), ".trace"));
    ASSERT_OK_AND_ASSIGN(auto model, FastModel::Load(fixture.container, fixture.pool, options));
    const testing::Tokens generated = testing::GreedyOracle(*model, fixture.prompts[2], 1);
    const ExpertCacheStats start = model->expert_cache()->stats();  // the prefill's passes: not compared
    testing::GreedyOracle(*model, generated, 24);                   // decode: one row per pass
    ExpertCacheStats stats = model->expert_cache()->stats();
    stats.hits -= start.hits, stats.misses -= start.misses;
    const int64_t slots = model->expert_cache()->slots();
    model.reset();  // closes the trace
    ASSERT_OK_AND_ASSIGN(std::string text, ReadFile(options.expert_trace));
    ASSERT_OK_AND_ASSIGN(ExpertTrace trace, ParseExpertTrace(text));
    const PolicyReplay all = ReplayExpertPolicy(trace, slots, policy);
    // The trace also holds the prefill and first decode: replay those alone and subtract.
    ExpertTrace head = trace;
    const auto& kinds = fixture.resident->config().mlp_kinds;
    head.passes.resize(trace.passes.size() - 24 * std::count(kinds.begin(), kinds.end(), MlpKind::kMoe));
    const PolicyReplay before = ReplayExpertPolicy(head, slots, policy);
    EXPECT_EQ(all.hits - before.hits, stats.hits) << ExpertPolicyName(policy);
    EXPECT_EQ(all.misses - before.misses, stats.misses) << ExpertPolicyName(policy);
    EXPECT_GT(stats.hits, 0);
  }
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

// --expert-profile: the hottest experts of a traced run are read at start-up and kept for good (at most half the
// slots); outputs stay identical; a profile of another model is refused.
TEST(ExpertProfile, KeepsTheHottestExpertsAndChangesNoOutput) {
  ModelFixture& fixture = FixtureFor("glint-tiny");
  const std::string dir = testing::MakeTempDir("expert_profile");
  FastModelOptions tracing;
  tracing.expert_trace = JoinPath(dir, "profile.trace");
  {
    ASSERT_OK_AND_ASSIGN(auto traced, FastModel::Load(fixture.container, fixture.pool, tracing));
    testing::GreedyOracle(*traced, fixture.prompts[0], 8);
  }
  FastModelOptions options;
  options.expert_memory = 6 * fixture.budgets.minimum;
  options.expert_profile = tracing.expert_trace;
  ASSERT_OK_AND_ASSIGN(auto model, FastModel::Load(fixture.container, fixture.pool, options));
  EXPECT_EQ(model->expert_cache()->kept_slots(), model->expert_cache()->slots() / 2);
  EXPECT_EQ(testing::GreedyOracle(*model, fixture.prompts[1], 8),
            testing::GreedyOracle(*fixture.resident, fixture.prompts[1], 8));
  EXPECT_EQ(model->expert_cache()->kept_slots(), model->expert_cache()->slots() / 2);  // never evicted
  EXPECT_EQ(model->expert_cache()->pinned_slots(), 0);
  // A profile of another model (tiny-sparse's MoE layers are 2..7; glint-tiny has 5 layers) is refused.
  ModelFixture& other = FixtureFor("tiny-sparse");
  tracing.expert_trace = JoinPath(dir, "other.trace");
  {
    ASSERT_OK_AND_ASSIGN(auto traced, FastModel::Load(other.container, other.pool, tracing));
    testing::GreedyOracle(*traced, other.prompts[0], 2);
  }
  options.expert_profile = tracing.expert_trace;
  EXPECT_ERROR_CONTAINS(FastModel::Load(fixture.container, fixture.pool, options), "has no routed experts");
}

}  // namespace
}  // namespace glint
