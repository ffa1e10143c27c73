// MTP speculative decoding (docs/engine.md "Speculative decoding").
//  - Model level, on the fp32 reference and the fast path: a verification forward [last token, draft] computes
//    exactly the rows two plain decodes compute, and a rejected draft rolled back leaves the state, bit for bit,
//    of a run that never saw it (KDA state; DSA latents, pooled keys and filling pools, with the draft on every
//    row of an indexer pool, in the sparse regime) and the same logits afterwards.
//  - Engine level, on the golden fixtures and the trained glint-tiny: greedy outputs with speculation equal the
//    plain model loop alone, batched, chunked, with prefix caching (hits asserted), with preemption, for n > 1,
//    all together; the counters add up; cancellation and finished requests return every pool to its start; the
//    fast path gives the same outputs with and without speculation.
//  - The speculative-sampling rule keeps the target distribution, and seeded sampling with speculation is
//    reproducible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "base/file.h"
#include "base/worker_pool.h"
#include "engine/engine_core.h"
#include "engine_checks.h"
#include "fast/fast_model.h"
#include "model/forward_common.h"
#include "model/model.h"
#include "test_util.h"

namespace glint {
namespace {

using Tokens = std::vector<int32_t>;

std::string GlintTinyDir() { return testing::ModelDir("glint-tiny"); }
using testing::ModelDir;

// ---------------------------------------------------------------------------------------------------------------
// Model level
// ---------------------------------------------------------------------------------------------------------------

// A sequence in engine-like memory: 8-token blocks in a shared arena (table out of order), its own slot.
struct Bound {
  Bound(const Model& model, int64_t capacity) {
    layout = std::make_shared<const CacheLayout>(model.CacheLayoutFor({.block_tokens = 8}).value());
    const int64_t blocks = (capacity + 7) / 8;
    arena = ItemArena::Fixed(blocks + 1, layout->block_bytes).value();
    slot = ItemArena::Fixed(1, layout->slot_bytes).value();
    for (int64_t b = blocks; b >= 1; --b) table.push_back(static_cast<int32_t>(b));
    state = model.BindSequence(layout, {&arena, &table, slot.Item(0)}, 0);
  }
  // Becomes a copy of `other` (same model and capacity): its caches' bytes and its length.
  void CopyFrom(const Bound& other) {
    for (int32_t i = 0; i < arena.count(); ++i) std::memcpy(arena.Item(i), other.arena.Item(i), layout->block_bytes);
    std::memcpy(slot.Item(0), other.slot.Item(0), layout->slot_bytes);
    state.tokens = other.state.tokens;
  }
  std::shared_ptr<const CacheLayout> layout;
  ItemArena arena, slot;
  std::vector<int32_t> table;
  SequenceState state;
};

std::vector<float> Forward(const Model& model, SequenceState& state, std::span<const int32_t> tokens,
                           LogitsWanted logits = LogitsWanted::kLast, StateCheckpoint rollback = {}) {
  std::vector<EntryOutput> outputs;
  BatchEntry entry{tokens, &state, logits, false};
  if (rollback.data != nullptr) entry.rollback = {&rollback, 1};
  const Status status = model.Forward({&entry, 1}, outputs);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return outputs.empty() ? std::vector<float>{} : outputs[0].logits;
}

// Everything a later position can read: the KDA part of the slot, and per DSA layer the latents and pooled keys
// of the cached positions and the filling pool's live rows.
void ExpectSameLiveState(const Model& model, const SequenceState& a, const SequenceState& b) {
  ASSERT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(std::memcmp(a.memory.slot, b.memory.slot, a.layout->checkpoint_bytes), 0) << "KDA state differs";
  for (int64_t l = 0; l < model.config().num_hidden_layers; ++l) {
    if (model.config().attention_kinds[l] != AttentionKind::kDsa) continue;
    const DsaCache x = DsaLayerCache(a, l), y = DsaLayerCache(b, l);
    EXPECT_EQ(GatherLatents(x), GatherLatents(y)) << "layer " << l;
    EXPECT_EQ(GatherPooledKeys(x), GatherPooledKeys(y)) << "layer " << l;
    EXPECT_EQ(GatherPendingKeys(x), GatherPendingKeys(y)) << "layer " << l;
    EXPECT_EQ(GatherPendingGates(x), GatherPendingGates(y)) << "layer " << l;
  }
}

class SpecModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto reference = ReferenceModel::Load(ModelDir(GetParam()));
    ASSERT_TRUE(reference.ok()) << reference.status().ToString();
    reference_ = std::move(reference).value();
    auto fast = FastModel::Load(ModelDir(GetParam()), pool_);
    ASSERT_TRUE(fast.ok()) << fast.status().ToString();
    fast_ = std::move(fast).value();
    // Any ids: the properties hold for every input. Long enough to be past the indexer's dense regime.
    const ModelConfig& c = reference_->config();
    length_ = c.DenseRegimeTokens() + 2 * c.index_kpool + 8;
    for (int64_t i = 0; i < length_ + 16; ++i) tokens_.push_back(static_cast<int32_t>((i * 7919 + 13) % c.vocab_size));
  }
  std::vector<const Model*> Models() const { return {reference_.get(), fast_.get()}; }

  WorkerPool pool_{2};
  std::unique_ptr<ReferenceModel> reference_;
  std::unique_ptr<FastModel> fast_;
  int64_t length_ = 0;
  Tokens tokens_;
};

// Row 0 of [x, d] is the plain decode of x, row 1 the plain decode of d after it, the snapshot is the KDA state
// after x, and the state after the call is that of the two decodes: verification computes what decoding would.
TEST_P(SpecModel, VerificationRowsAreThePlainDecodeRows) {
  for (const Model* model : Models()) {
    const std::span<const int32_t> prompt(tokens_.data(), length_);
    const Tokens pair = {tokens_[length_], tokens_[length_ + 1]};
    Bound a(*model, length_ + 2), b(*model, length_ + 2);
    ItemArena snapshot = ItemArena::Fixed(1, std::max<int64_t>(a.layout->checkpoint_bytes, 64)).value();
    Forward(*model, a.state, prompt);
    b.CopyFrom(a);
    const std::vector<float> rows = Forward(*model, a.state, pair, LogitsWanted::kAll, {length_ + 1, snapshot.Item(0)});
    const std::vector<float> first = Forward(*model, b.state, std::span<const int32_t>(pair.data(), 1));
    EXPECT_EQ(std::memcmp(snapshot.Item(0), b.slot.Item(0), a.layout->checkpoint_bytes), 0)
        << "the snapshot is not the state after the first row";
    const std::vector<float> second = Forward(*model, b.state, std::span<const int32_t>(pair.data() + 1, 1));
    const int64_t v = model->config().vocab_size;
    ASSERT_EQ(static_cast<int64_t>(rows.size()), 2 * v);
    EXPECT_TRUE(std::equal(first.begin(), first.end(), rows.begin())) << "row 0";
    EXPECT_TRUE(std::equal(second.begin(), second.end(), rows.begin() + v)) << "row 1";
    ExpectSameLiveState(*model, a.state, b.state);
  }
}

// A rejected draft, rolled back, leaves exactly the state of a run that decoded only the last token, wherever the
// draft falls in an indexer pool (including the row that completes a pool, which writes a pooled key); the two
// runs then go on identically.
TEST_P(SpecModel, RejectedDraftLeavesTheStateOfARunThatNeverSawIt) {
  const int64_t kpool = reference_->config().index_kpool;
  for (const Model* model : Models()) {
    const int64_t capacity = length_ + kpool + 10;
    Bound base(*model, capacity), a(*model, capacity), b(*model, capacity);
    ItemArena snapshot = ItemArena::Fixed(1, std::max<int64_t>(a.layout->checkpoint_bytes, 64)).value();
    Forward(*model, base.state, std::span<const int32_t>(tokens_.data(), length_));
    for (int64_t offset = 0; offset < kpool; ++offset) {
      const int64_t start = length_ + offset;  // position of the last accepted token; the draft is at start + 1
      if (offset > 0) Forward(*model, base.state, std::span<const int32_t>(tokens_.data() + start - 1, 1));
      const int32_t last = tokens_[start];
      const Tokens wrong = {last, static_cast<int32_t>((tokens_[start + 1] + 1) % model->config().vocab_size)};
      a.CopyFrom(base);
      b.CopyFrom(base);
      Forward(*model, a.state, wrong, LogitsWanted::kAll, {start + 1, snapshot.Item(0)});
      RollBack(a.state, snapshot.Item(0), start + 1);
      Forward(*model, b.state, std::span<const int32_t>(&last, 1));
      ExpectSameLiveState(*model, a.state, b.state);
      for (int64_t i = start + 1; i < start + 1 + 6; ++i) {
        const std::span<const int32_t> next(tokens_.data() + i, 1);
        EXPECT_EQ(Forward(*model, a.state, next), Forward(*model, b.state, next))
            << "offset " << offset << ", position " << i;
      }
      ExpectSameLiveState(*model, a.state, b.state);
    }
  }
}

// K drafts (--speculative-tokens): [x, d1, …, dk] with a snapshot after each row but the last computes the rows of
// plain decodes, each snapshot is the state after its row, and rolled back after any accepted length the state is
// that of a run that decoded only the accepted tokens — at every offset in an indexer pool, with as many drafts
// (≤ 3) as PoolSafeDrafts allows there (the filling pool has no snapshot: the engine never drafts more).
TEST_P(SpecModel, KDraftsRollBackToAnyAcceptedLength) {
  const int64_t kpool = reference_->config().index_kpool, v = reference_->config().vocab_size;
  for (const Model* model : Models()) {
    const int64_t capacity = length_ + 2 * kpool + 10;
    Bound base(*model, capacity), a(*model, capacity), b(*model, capacity);
    ItemArena snapshots = ItemArena::Fixed(3, std::max<int64_t>(a.layout->checkpoint_bytes, 64)).value();
    Forward(*model, base.state, std::span<const int32_t>(tokens_.data(), length_));
    for (int64_t offset = 0; offset < kpool + 1; ++offset) {
      const int64_t start = length_ + offset, drafts = std::min<int64_t>(3, PoolSafeDrafts(start, kpool));
      if (offset > 0) Forward(*model, base.state, std::span<const int32_t>(tokens_.data() + start - 1, 1));
      const Tokens rows(tokens_.begin() + start, tokens_.begin() + start + drafts + 1);
      std::vector<StateCheckpoint> rollback;
      for (int64_t k = 0; k < drafts; ++k) rollback.push_back({start + 1 + k, snapshots.Item(k)});
      for (int64_t accepted = 0; accepted <= drafts; ++accepted) {
        a.CopyFrom(base);
        b.CopyFrom(base);
        std::vector<EntryOutput> outputs;
        BatchEntry entry{rows, &a.state, LogitsWanted::kAll, false};
        entry.rollback = rollback;
        ASSERT_OK(model->Forward({&entry, 1}, outputs));
        for (int64_t r = 0; r <= accepted; ++r) {  // the plain decodes of the accepted rows
          const std::vector<float> plain = Forward(*model, b.state, std::span<const int32_t>(rows.data() + r, 1));
          EXPECT_TRUE(std::equal(plain.begin(), plain.end(), outputs[0].logits.begin() + r * v))
              << "offset " << offset << ", row " << r;
          if (r < drafts) {
            EXPECT_EQ(std::memcmp(snapshots.Item(r), b.slot.Item(0), a.layout->checkpoint_bytes), 0)
                << "offset " << offset << ": snapshot " << r << " is not the state after its row";
          }
        }
        if (accepted < drafts) RollBack(a.state, snapshots.Item(accepted), start + accepted + 1);
        ExpectSameLiveState(*model, a.state, b.state);
        const std::span<const int32_t> next(tokens_.data() + start + accepted + 1, 1);
        EXPECT_EQ(Forward(*model, a.state, next), Forward(*model, b.state, next))
            << "offset " << offset << ", accepted " << accepted;
      }
    }
  }
}

// What PoolSafeDrafts guards against, with kpool 4: from position 5 the rows 5 .. 8 pass 7 (a pool's end), and row 8
// writes the next pool's row 0 over position 4's — a rejection at 6 would lose it. So 2 drafts there, 3 at 4.
TEST(SpecPools, DraftsStopWhereARejectionWouldLoseAFillingPoolRow) {
  EXPECT_EQ(PoolSafeDrafts(4, 4), 3);  // rows 4 .. 7: 7 completes the pool, nothing past it
  EXPECT_EQ(PoolSafeDrafts(5, 4), 2);  // rows 5 .. 7
  EXPECT_EQ(PoolSafeDrafts(6, 4), 1);  // rows 6 .. 7
  EXPECT_EQ(PoolSafeDrafts(7, 4), 2);  // rows 7 .. 9 (7 completes a pool, rollbacks land past it); chain pairs 7, 8
  EXPECT_EQ(PoolSafeDrafts(3, 1), std::numeric_limits<int64_t>::max());
}

TEST_P(SpecModel, BadRollbackPositionsAreRefused) {
  for (const Model* model : Models()) {
    Bound a(*model, length_ + 2);
    ItemArena snapshot = ItemArena::Fixed(1, std::max<int64_t>(a.layout->checkpoint_bytes, 64)).value();
    Forward(*model, a.state, std::span<const int32_t>(tokens_.data(), 4));
    const Tokens pair = {1, 2};
    std::vector<EntryOutput> outputs;
    for (int64_t position : {4, 6, 0}) {  // before, after and far outside the call's positions 4, 5
      BatchEntry entry{pair, &a.state, LogitsWanted::kAll, false};
      const StateCheckpoint rollback{position, snapshot.Item(0)};
      entry.rollback = {&rollback, 1};
      EXPECT_ERROR_CONTAINS(model->Forward({&entry, 1}, outputs), "not strictly inside");
    }
    BatchEntry no_memory{pair, &a.state, LogitsWanted::kAll, false};
    const StateCheckpoint null_rollback{5, nullptr};
    no_memory.rollback = {&null_rollback, 1};
    EXPECT_ERROR_CONTAINS(model->Forward({&no_memory, 1}, outputs), "not strictly inside");
    // Two snapshots out of order (or at one position).
    const Tokens triple = {1, 2, 3};
    ItemArena two = ItemArena::Fixed(2, std::max<int64_t>(a.layout->checkpoint_bytes, 64)).value();
    const StateCheckpoint backwards[] = {{6, two.Item(0)}, {5, two.Item(1)}};
    BatchEntry unordered{triple, &a.state, LogitsWanted::kAll, false};
    unordered.rollback = backwards;
    EXPECT_ERROR_CONTAINS(model->Forward({&unordered, 1}, outputs), "after the previous one");
    EXPECT_EQ(a.state.tokens, 4);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SpecModel, ::testing::Values("tiny-dense", "tiny-sparse", "glint-tiny"));

// ---------------------------------------------------------------------------------------------------------------
// Engine level
// ---------------------------------------------------------------------------------------------------------------

using testing::Collector;
using testing::ExpectPoolsAtStart;
using testing::Greedy;
using testing::GreedyOracle;
using testing::MakeCore;
using testing::RunToCompletion;

// Prompts for a model: pieces of its own test data that share prefixes (for prefix-cache hits), long enough to go
// past the indexer's dense regime.
std::vector<Tokens> PromptsFor(const std::string& name, const ModelConfig& c) {
  Tokens a, b;
  if (name == "glint-tiny") {  // English text in the model's tokenizer (held-out fortunes)
    std::tie(a, b) = testing::GlintTinyTexts();
  } else {
    const auto sequences = testing::GoldenOutputs(name).Tokens();
    a = sequences[0].size() >= sequences[1].size() ? sequences[0] : sequences[1];
    b = sequences[0].size() >= sequences[1].size() ? sequences[1] : sequences[0];
  }
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(a.size()), c.DenseRegimeTokens() + 24);
  std::vector<Tokens> prompts;
  prompts.push_back(Tokens(a.begin(), a.begin() + n));
  Tokens shared(a.begin(), a.begin() + n * 3 / 4);
  shared.insert(shared.end(), b.begin(), b.begin() + 6);
  prompts.push_back(shared);
  prompts.push_back(Tokens(b.begin(), b.begin() + std::min<int64_t>(12, static_cast<int64_t>(b.size()))));
  prompts.push_back(Tokens(a.begin(), a.begin() + n / 2 + 3));
  return prompts;
}

constexpr int64_t kGenerated = 12;

// The golden fixtures on the fp32 reference; the trained model on the fast path too (the reference is the oracle
// either way: each path's speculative outputs are checked against the same path's plain loop).
using EngineCase = testing::PathCase;
using testing::PathCaseName;

// A model, its prompts and their greedy continuations by the plain loop: made once per process.
struct Fixture {
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<Model> model;
  std::vector<Tokens> prompts, expected;
};
const Fixture& FixtureFor(const EngineCase& c) {
  static std::map<std::pair<std::string, bool>, std::unique_ptr<Fixture>> fixtures;
  std::unique_ptr<Fixture>& fixture = fixtures[{c.model, c.fast}];
  if (fixture == nullptr) {
    fixture = std::make_unique<Fixture>();
    fixture->model = testing::LoadPathModel(c, fixture->pool);
    fixture->prompts = PromptsFor(c.model, fixture->model->config());
    for (const Tokens& prompt : fixture->prompts) {
      fixture->expected.push_back(GreedyOracle(*fixture->model, prompt, kGenerated));
    }
  }
  return *fixture;
}

class SpecEngine : public ::testing::TestWithParam<EngineCase> {
 protected:
  void SetUp() override {
    const Fixture& fixture = FixtureFor(GetParam());
    model_ = fixture.model.get();
    prompts_ = fixture.prompts;
    expected_ = fixture.expected;
    // Blocks of 8 for the longest request and one more: too few for all four requests at once.
    for (const Tokens& prompt : prompts_) {
      tight_blocks_ = std::max<int64_t>(tight_blocks_, (static_cast<int64_t>(prompt.size()) + kGenerated + 7) / 8 + 1);
    }
  }

  // Runs every prompt through `core`, all at once or one after the other; returns the generated tokens.
  std::vector<Tokens> Run(EngineCore& core, bool one_at_a_time) {
    return testing::RunGreedyPrompts(core, prompts_, kGenerated, one_at_a_time);
  }

  const Model* model_ = nullptr;
  std::vector<Tokens> prompts_;
  std::vector<Tokens> expected_;
  int64_t tight_blocks_ = 0;
};

TEST_P(SpecEngine, AloneMatchesThePlainModelLoop) {
  auto core = MakeCore(*model_, testing::SizedOptions(*model_, 4, 64, 0, true));
  EXPECT_EQ(Run(*core, /*one_at_a_time=*/true), expected_);
  const EngineMetrics m = core->Metrics();
  // Per request: the prefill's token, one plus the accepted per verification, and at most one plain decode at the
  // end (one token left: nothing to draft for).
  const int64_t requests = static_cast<int64_t>(prompts_.size());
  const int64_t plain_decodes = m.generated_tokens - requests - m.spec_drafts - m.spec_accepted_tokens;
  EXPECT_GE(plain_decodes, 0);
  EXPECT_LE(plain_decodes, requests);
  EXPECT_EQ(m.spec_draft_tokens, m.spec_drafts);
  ASSERT_EQ(m.spec_accepted_per_position.size(), 1u);
  EXPECT_EQ(m.spec_accepted_per_position[0], m.spec_accepted_tokens);
  EXPECT_LE(m.spec_accepted_tokens, m.spec_drafts);
  std::printf("%s: %lld drafts, %lld accepted (%.0f%%)\n", GetParam().model.c_str(),
              static_cast<long long>(m.spec_drafts), static_cast<long long>(m.spec_accepted_tokens),
              100.0 * m.spec_accepted_tokens / m.spec_drafts);
}

TEST_P(SpecEngine, BatchedAndChunkedMatch) {
  auto batched = MakeCore(*model_, testing::SizedOptions(*model_, 4, 64, 0, true));
  EXPECT_EQ(Run(*batched, /*one_at_a_time=*/false), expected_);
  // A budget of 5 tokens: prefill chunks of at most 5, and drafts dropped when the budget has no room for them.
  EngineOptions options = testing::SizedOptions(*model_, 4, 64, 0, true);
  options.max_batch_tokens = 5;
  auto chunked = MakeCore(*model_, options);
  EXPECT_EQ(Run(*chunked, /*one_at_a_time=*/false), expected_);
  EXPECT_GT(chunked->Metrics().spec_drafts, 0);
}

TEST_P(SpecEngine, PrefixCachingMatchesAndHits) {
  auto core = MakeCore(*model_, testing::SizedOptions(*model_, 4, 64, 16, true));
  EXPECT_EQ(Run(*core, /*one_at_a_time=*/true), expected_);
  const CacheStats stats = core->Metrics().cache;
  EXPECT_EQ(stats.prefix_queries, 4);
  EXPECT_GE(stats.prefix_hits, 2);  // the shared-prefix prompt and the half-length one
  EXPECT_EQ(stats.checkpoints_missed, 0);
  EXPECT_GT(stats.checkpoints_taken, 0);
  const int64_t accepted = core->Metrics().spec_accepted_tokens;
  // Again: resumed from checkpoints (and from the blocks with the MTP rows of their last position), the same
  // outputs, and the same drafts accepted: the restored MTP cache is the one a run without the hit builds.
  EXPECT_EQ(Run(*core, /*one_at_a_time=*/true), expected_);
  const EngineMetrics again = core->Metrics();
  EXPECT_GT(again.cache.prefix_hits, stats.prefix_hits);
  EXPECT_EQ(again.cache.checkpoints_missed, 0);
  EXPECT_EQ(again.spec_accepted_tokens, 2 * accepted);
}

TEST_P(SpecEngine, PreemptionForcedByATinyPoolMatches) {
  auto core = MakeCore(*model_, testing::SizedOptions(*model_, 4, tight_blocks_, 0, true));
  EXPECT_EQ(Run(*core, /*one_at_a_time=*/false), expected_);
  EXPECT_GT(core->Metrics().preemptions, 0);
}

TEST_P(SpecEngine, EverythingTogetherMatches) {
  EngineOptions options = testing::SizedOptions(*model_, 3, tight_blocks_, 3, true);
  options.max_batch_tokens = 7;
  auto core = MakeCore(*model_, options);
  EXPECT_EQ(Run(*core, /*one_at_a_time=*/false), expected_);
  EXPECT_EQ(Run(*core, /*one_at_a_time=*/false), expected_);
  const EngineMetrics metrics = core->Metrics();
  EXPECT_GT(metrics.preemptions, 0);
  EXPECT_GT(metrics.cache.prefix_hit_tokens, 0);
  EXPECT_GT(metrics.spec_drafts, 0);
}

TEST_P(SpecEngine, NSamplesForkAndDraftEachTheirOwn) {
  for (int64_t checkpoints : {0, 8}) {
    auto core = MakeCore(*model_, testing::SizedOptions(*model_, 4, 64, checkpoints, true));
    auto sink = std::make_shared<Collector>();
    Request request = Greedy(prompts_[0], kGenerated, sink);
    request.n = 3;
    ASSERT_OK(core->Add(1, std::move(request)));
    RunToCompletion(*core);
    for (int64_t index = 0; index < 3; ++index) EXPECT_EQ(sink->TokensOf(1, index), expected_[0]) << index;
    EXPECT_EQ(core->Metrics().prompt_tokens_computed, static_cast<int64_t>(prompts_[0].size()));
    ExpectPoolsAtStart(*core);
  }
}

TEST_P(SpecEngine, CancellationFreesEverything) {
  auto core = MakeCore(*model_, testing::SizedOptions(*model_, 4, 64, 4, true));
  auto sink = std::make_shared<Collector>();
  for (RequestId id = 1; id <= 3; ++id) ASSERT_OK(core->Add(id, Greedy(prompts_[id - 1], 50, sink)));
  Request waiting = Greedy(prompts_[3], 50, sink);
  waiting.n = 2;
  ASSERT_OK(core->Add(4, std::move(waiting)));
  for (int step = 0; step < 3; ++step) ASSERT_OK(core->Step());
  core->Cancel(2);
  ASSERT_OK(core->Step());
  core->Cancel(4);
  core->Cancel(1);
  core->Cancel(3);
  EXPECT_FALSE(core->HasWork());
  EXPECT_EQ(core->Metrics().finished_cancelled, 5);
  ExpectPoolsAtStart(*core);
}

// A stop token found in the middle of an accepted pair ends the sample there: the bonus token is never handed
// out, and the output equals the plain loop's cut at the stop.
TEST_P(SpecEngine, StopTokensCutAnAcceptedPair) {
  for (int64_t stop_at = 1; stop_at < 6; ++stop_at) {
    auto core = MakeCore(*model_, testing::SizedOptions(*model_, 4, 64, 0, true));
    auto sink = std::make_shared<Collector>();
    Request request = Greedy(prompts_[0], kGenerated, sink);
    request.stop.stop_token_ids = {expected_[0][stop_at]};
    ASSERT_OK(core->Add(1, std::move(request)));
    RunToCompletion(*core);
    const int64_t first =
        std::find(expected_[0].begin(), expected_[0].end(), expected_[0][stop_at]) - expected_[0].begin();
    EXPECT_EQ(sink->TokensOf(1), Tokens(expected_[0].begin(), expected_[0].begin() + first + 1)) << stop_at;
    EXPECT_EQ(sink->Last(1)->finish_reason, FinishReason::kStop);
    EXPECT_EQ(sink->Last(1)->timings->generated_tokens, first + 1);
    ExpectPoolsAtStart(*core);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SpecEngine,
                         ::testing::Values(EngineCase{"tiny-dense"}, EngineCase{"tiny-sparse"},
                                           EngineCase{"glint-tiny", /*fast=*/true}),
                         PathCaseName);

// The trained model on the fp32 reference, everything at once: batched, chunked (budget 7), prefix caching with
// hits, preemption, and n = 2; greedy outputs equal the plain loop's.
TEST(SpecEngineTrained, Fp32ReferenceMatchesThePlainLoop) {
  const Fixture& fixture = FixtureFor({"glint-tiny"});
  const Model& model = *fixture.model;
  int64_t blocks = 0;
  for (const Tokens& prompt : fixture.prompts) {
    blocks = std::max<int64_t>(blocks, (static_cast<int64_t>(prompt.size()) + kGenerated + 7) / 8 + 2);
  }
  EngineOptions options = testing::SizedOptions(model, 3, blocks, 3, true);
  options.max_batch_tokens = 7;
  auto core = MakeCore(model, options);
  auto sink = std::make_shared<Collector>();
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < fixture.prompts.size(); ++i) {
      Request request = Greedy(fixture.prompts[i], kGenerated, sink);
      request.n = i == 3 ? 2 : 1;
      ASSERT_OK(core->Add(10 * pass + i + 1, std::move(request)));
    }
    RunToCompletion(*core);
    for (size_t i = 0; i < fixture.prompts.size(); ++i) {
      EXPECT_EQ(sink->TokensOf(10 * pass + i + 1), fixture.expected[i]) << "pass " << pass << ", prompt " << i;
    }
    EXPECT_EQ(sink->TokensOf(10 * pass + 4, 1), fixture.expected[3]);
  }
  const EngineMetrics m = core->Metrics();
  EXPECT_GT(m.preemptions, 0);
  EXPECT_GT(m.cache.prefix_hit_tokens, 0);
  EXPECT_GT(m.spec_accepted_tokens, 0);
  ExpectPoolsAtStart(*core);
}

// The trained model's MTP layer drafts well: most drafts are accepted, so decoding takes far fewer steps.
TEST(SpecEngineTrained, MostDraftsAreAcceptedAndStepsDrop) {
  WorkerPool pool(2);
  auto model = FastModel::Load(GlintTinyDir(), pool).value();
  const std::vector<Tokens> prompts = PromptsFor("glint-tiny", model->config());
  auto run = [&](bool speculative) {
    auto core = MakeCore(*model, testing::SizedOptions(*model, 4, 128, 0, speculative));
    auto sink = std::make_shared<Collector>();
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_OK(core->Add(i + 1, Greedy(prompts[i], 24, sink)));
    RunToCompletion(*core);
    return core->Metrics();
  };
  const EngineMetrics plain = run(false), spec = run(true);
  EXPECT_EQ(plain.generated_tokens, spec.generated_tokens);
  EXPECT_EQ(plain.spec_drafts, 0);
  EXPECT_TRUE(plain.spec_accepted_per_position.empty());
  const double acceptance = static_cast<double>(spec.spec_accepted_tokens) / spec.spec_drafts;
  std::printf("glint-tiny (fast path) greedy: acceptance %.1f%% (%lld of %lld drafts), %lld steps vs %lld without\n",
              100 * acceptance, static_cast<long long>(spec.spec_accepted_tokens),
              static_cast<long long>(spec.spec_drafts), static_cast<long long>(spec.steps),
              static_cast<long long>(plain.steps));
  EXPECT_GT(acceptance, 0.3);
  EXPECT_LT(spec.steps, plain.steps);
}

// The fast path (int8/bf16) with and without speculation: the same greedy outputs (verification computes what the
// plain decode computes on this path too: per-row kernels, and KDA split at the rollback point).
TEST(SpecEngineFast, GreedyOutputsEqualWithoutSpeculation) {
  WorkerPool pool(2);
  auto model = FastModel::Load(GlintTinyDir(), pool).value();
  const std::vector<Tokens> prompts = PromptsFor("glint-tiny", model->config());
  auto run = [&](bool speculative, int64_t checkpoints) {
    auto core = MakeCore(*model, testing::SizedOptions(*model, 4, 128, checkpoints, speculative));
    auto sink = std::make_shared<Collector>();
    std::vector<Tokens> outputs;
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_OK(core->Add(i + 1, Greedy(prompts[i], 16, sink)));
    RunToCompletion(*core);
    for (size_t i = 0; i < prompts.size(); ++i) outputs.push_back(sink->TokensOf(i + 1));
    ExpectPoolsAtStart(*core);
    return outputs;
  };
  const std::vector<Tokens> plain = run(false, 0);
  EXPECT_EQ(run(true, 0), plain);
  EXPECT_EQ(run(true, 16), plain);
}

TEST(SpecEngineOptions, AModelWithoutItsMtpLayerIsRefused) {
  LoadOptions options;
  options.load_mtp = false;
  auto model = ReferenceModel::Load(testing::TestDataPath("golden/tiny-dense"), options).value();
  EXPECT_FALSE(model->has_mtp());
  EXPECT_TRUE(EngineCore::Create(*model, testing::SizedOptions(*model, 2, 16, 0, false)).ok());
  EngineOptions spec = testing::SizedOptions(*model, 2, 16, 0, false);
  spec.speculative = SpeculativeMethod::kMtp;
  EXPECT_ERROR_CONTAINS(EngineCore::Create(*model, spec), "weights were not loaded");
}

// Seeded sampling with speculation is reproducible (the draft, the acceptance test and the residual all draw from
// the sample's generator), and the samples of n > 1 draw differently.
TEST(SpecEngineSampling, SeededSamplingIsReproducible) {
  WorkerPool pool(2);
  auto model = FastModel::Load(GlintTinyDir(), pool).value();
  const Tokens prompt = PromptsFor("glint-tiny", model->config())[2];
  auto sample = [&](uint64_t seed) {
    auto core = MakeCore(*model, testing::SizedOptions(*model, 4, 64, 0, true));
    auto sink = std::make_shared<Collector>();
    Request request = Greedy(prompt, 24, sink);
    request.sampling = {.temperature = 0.8f, .top_p = 0.95f, .seed = seed, .presence_penalty = 0.5f};
    request.seeded = true;
    request.n = 2;
    request.logprobs = 2;
    EXPECT_OK(core->Add(7, std::move(request)));
    RunToCompletion(*core);
    EXPECT_GT(core->Metrics().spec_drafts, 0);
    for (const RequestOutput& o : sink->outputs) EXPECT_EQ(o.logprobs.size(), o.tokens.size());
    return std::pair{sink->TokensOf(7, 0), sink->TokensOf(7, 1)};
  };
  const auto first = sample(42);
  EXPECT_EQ(first.first.size(), 24u);
  EXPECT_EQ(first, sample(42));
  EXPECT_NE(first.first, first.second);
  EXPECT_NE(first, sample(43));
}

// ---------------------------------------------------------------------------------------------------------------
// The speculative-sampling rule
// ---------------------------------------------------------------------------------------------------------------

// Whatever the draft distribution q, draft ~ q then Verify gives tokens distributed as the target p: checked on
// frequencies over 200 000 trials for several (p, q) pairs, including q with mass where p has none and q missing
// tokens p has. Bound: 5 standard deviations of a binomial frequency.
TEST(SpeculativeSampling, VerifyKeepsTheTargetDistribution) {
  const std::vector<std::pair<TokenDistribution, TokenDistribution>> cases = {
      {{{0, 0.5}, {1, 0.3}, {2, 0.2}}, {{0, 0.2}, {1, 0.2}, {2, 0.6}}},
      {{{3, 0.7}, {1, 0.3}}, {{0, 0.5}, {1, 0.25}, {2, 0.25}}},    // q mostly off p's support
      {{{0, 0.25}, {1, 0.25}, {2, 0.25}, {3, 0.25}}, {{0, 1.0}}},  // a greedy-like draft
      {{{2, 1.0}}, {{0, 0.1}, {1, 0.1}, {2, 0.8}}},                // a greedy target
  };
  constexpr int kTrials = 200000;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& [target, draft_distribution] = cases[c];
    Sampler sampler({.temperature = 1.0f, .seed = 1234 + c});
    std::vector<int64_t> counts(8, 0);
    int64_t kept = 0;
    for (int i = 0; i < kTrials; ++i) {
      const int32_t draft = sampler.Draw(draft_distribution);
      const auto [token, accepted] = sampler.Verify(target, draft, draft_distribution);
      ++counts[token];
      kept += accepted ? 1 : 0;
    }
    double expected_kept = 0;  // Σ_x min(p(x), q(x))
    for (const auto& [token, p] : target) {
      for (const auto& [other, q] : draft_distribution) expected_kept += other == token ? std::min(p, q) : 0;
    }
    for (int32_t token = 0; token < 8; ++token) {
      double p = 0;
      for (const auto& [id, probability] : target) p += id == token ? probability : 0;
      const double frequency = static_cast<double>(counts[token]) / kTrials;
      const double sigma = std::sqrt(std::max(p * (1 - p), 1e-12) / kTrials);
      EXPECT_NEAR(frequency, p, 5 * sigma + 1e-9) << "case " << c << ", token " << token;
    }
    EXPECT_NEAR(static_cast<double>(kept) / kTrials, expected_kept, 0.01) << "case " << c;
  }
}

TEST(SpeculativeSampling, DistributionMatchesWhatSampleDraws) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, -1.0f, 2.5f, NAN};
  const SamplingParams params{.temperature = 0.7f, .top_p = 0.9f, .top_k = 4, .seed = 5};
  const TokenDistribution distribution = Sampler(params).Distribution(logits);
  double total = 0;
  for (const auto& [token, p] : distribution) total += p;
  EXPECT_NEAR(total, 1.0, 1e-12);
  EXPECT_EQ(distribution.front().first, 1);  // most likely first
  Sampler sampler(params);
  std::vector<int64_t> counts(logits.size(), 0);
  constexpr int kTrials = 100000;
  for (int i = 0; i < kTrials; ++i) ++counts[sampler.Sample(logits)];
  for (size_t token = 0; token < logits.size(); ++token) {
    double p = 0;
    for (const auto& [id, probability] : distribution) p += id == static_cast<int32_t>(token) ? probability : 0;
    EXPECT_NEAR(static_cast<double>(counts[token]) / kTrials, p, 5 * std::sqrt(p * (1 - p) / kTrials) + 1e-9) << token;
  }
  const TokenDistribution greedy = Sampler({.temperature = 0.0f}).Distribution(logits);
  ASSERT_EQ(greedy.size(), 1u);
  EXPECT_EQ(greedy[0].first, 1);
}

}  // namespace
}  // namespace glint
