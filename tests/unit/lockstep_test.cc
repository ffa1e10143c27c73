// LockstepLeader and its follower in one process (docs/distributed.md "The batch plan"). The leader's plans are
// recorded by a fake communicator and then replayed to a follower running a second copy of the model; every
// Forward and MTP call of the follower must give the leader's logits bit for bit. The models are single-rank, so
// no collective runs inside them and the two sides can run one after the other. The engine workloads make every
// pool copy the follower has to mirror: prefix-cache checkpoints restored into fresh slots, n > 1 forks, the
// rollbacks of rejected drafts and the checkpoints taken after a step, preemption; plus standalone sequences and
// their release. A missed copy would change the follower's caches and, from there, its logits.
#include "lockstep/lockstep.h"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <vector>

#include "base/worker_pool.h"
#include "engine_checks.h"
#include "fast/fast_model.h"
#include "model_checks.h"
#include "test_util.h"

namespace glint {
namespace {

// Records the logits of every call of the model it wraps (not owned), in order; the sequences are the wrapped
// model's.
class RecordingModel final : public testing::ForwardingModel {
 public:
  using ForwardingModel::ForwardingModel;
  Status Forward(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                 const ForwardOptions& options = {}, Trace* trace = nullptr,
                 const ForcedChoices* forced = nullptr) const override {
    GLINT_RETURN_IF_ERROR(inner().Forward(batch, outputs, options, trace, forced));
    for (const EntryOutput& output : outputs) calls.push_back(output.logits);
    return Status::Ok();
  }
  Status MtpForward(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                    std::vector<float>& logits, const ForwardOptions& options, Trace* trace,
                    const MtpReplacedEmbeddings& replaced = {}) const override {
    GLINT_RETURN_IF_ERROR(inner().MtpForward(state, hidden, next_tokens, logits, options, trace, replaced));
    calls.push_back(logits);
    return Status::Ok();
  }
  Status MtpForwardBatch(std::span<const MtpEntry> batch, std::vector<std::vector<float>>& logits,
                         const ForwardOptions& options, std::vector<Status>* entry_errors,
                         std::vector<std::vector<float>>* last_hidden) const override {
    GLINT_RETURN_IF_ERROR(inner().MtpForwardBatch(batch, logits, options, entry_errors, last_hidden));
    calls.insert(calls.end(), logits.begin(), logits.end());
    return Status::Ok();
  }
  // A follower at --tp 1 skips lm_head (lockstep.cc); as at --tp > 1 (lm_head split, every rank computes its
  // columns) this one computes the logits rank 0 asked for, so that the replay is compared logit for logit.
  ShardPlan shard_plan() const override {
    ShardPlan plan = inner().shard_plan();
    if (computes_logits_as_at_tp2) plan.tp = 2;
    return plan;
  }
  bool computes_logits_as_at_tp2 = false;
  mutable std::vector<std::vector<float>> calls;
};

// Rank 0 of two: keeps what it broadcasts. Rank 1 of two: hands the kept messages back in order.
class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(int rank, std::deque<std::vector<std::byte>>* messages) : rank_(rank), messages_(messages) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  std::string Describe() const override { return "fake"; }

 protected:
  Status DoAllGather(std::span<const std::byte>, std::span<std::byte>) override {
    return Unimplemented("the fake communicator only broadcasts");
  }
  Status DoBroadcast(std::vector<std::byte>& buffer, int root) override {
    if (rank_ == root) {
      messages_->push_back(buffer);
      return Status::Ok();
    }
    if (messages_->empty()) return FailedPrecondition("no message left to replay");
    buffer = std::move(messages_->front());
    messages_->pop_front();
    return Status::Ok();
  }
  Status DoBarrier() override { return Status::Ok(); }

 private:
  int rank_;
  std::deque<std::vector<std::byte>>* messages_;
};

using Tokens = std::vector<int32_t>;

Tokens SomeTokens(int64_t count, int64_t salt, int64_t vocab) {
  Tokens tokens(count);
  for (int64_t i = 0; i < count; ++i) tokens[i] = static_cast<int32_t>((i * 7919 + salt * 104729 + 13) % vocab);
  return tokens;
}

// The follower runs every recorded plan; each of its calls gives the leader's logits bit for bit.
void ExpectReplayedBitForBit(const RecordingModel& follower_model, FakeCommunicator& rank1,
                             const std::deque<std::vector<std::byte>>& messages,
                             const std::vector<std::vector<float>>& leader_calls) {
  ASSERT_OK(RunLockstepFollower(follower_model, rank1));
  EXPECT_TRUE(messages.empty());
  ASSERT_EQ(follower_model.calls.size(), leader_calls.size());
  for (size_t i = 0; i < leader_calls.size(); ++i) {
    ASSERT_EQ(follower_model.calls[i], leader_calls[i]) << "call " << i << " of " << leader_calls.size();
  }
}

TEST(Lockstep, FollowerReplaysEveryCallBitForBit) {
  WorkerPool pool(1);
  const std::string dir = testing::TestDataPath("../../models/glint-tiny");
  std::unique_ptr<Model> follower_fast = FastModel::Load(dir, pool).value();
  RecordingModel follower_model(*follower_fast);
  follower_model.computes_logits_as_at_tp2 = true;
  std::deque<std::vector<std::byte>> messages;
  FakeCommunicator rank0(0, &messages), rank1(1, &messages);
  std::vector<std::vector<float>> leader_calls;
  {
    LockstepLeader lockstep(FastModel::Load(dir, pool).value(), rank0);
    RecordingModel leader(lockstep);
    const int64_t vocab = leader.config().vocab_size;
    // Prompts sharing prefixes (prefix-cache hits), one asked twice, one with n = 2 (a fork).
    const Tokens a = SomeTokens(120, 1, vocab);
    Tokens shared(a.begin(), a.begin() + 90);
    const Tokens tail = SomeTokens(10, 2, vocab);
    shared.insert(shared.end(), tail.begin(), tail.end());
    const std::vector<Tokens> prompts = {a, shared, SomeTokens(20, 3, vocab), a};
    {
      auto core = testing::MakeCore(leader, testing::SizedOptions(leader, 4, 96, 16, /*speculative=*/true));
      testing::RunGreedyPrompts(*core, prompts, 10, /*one_at_a_time=*/true);
      auto sink = std::make_shared<testing::Collector>();
      Request request = testing::Greedy(prompts[2], 8, sink);
      request.n = 2;
      ASSERT_OK(core->Add(1, std::move(request)));
      testing::RunToCompletion(*core);
      const EngineMetrics m = core->Metrics();
      EXPECT_GT(m.cache.prefix_hits, 0);
      EXPECT_GT(m.spec_drafts, m.spec_accepted_tokens) << "no rejected draft, so no rollback was mirrored";
    }
    {  // A pool too small for every request at once: preemption and recompute.
      auto core = testing::MakeCore(leader, testing::SizedOptions(leader, 4, 40, 0, /*speculative=*/true));
      testing::RunGreedyPrompts(*core, prompts, 10, /*one_at_a_time=*/false);
      EXPECT_GT(core->Metrics().preemptions, 0);
    }
    for (int round = 0; round < 2; ++round) {  // standalone sequences, made and freed
      SequenceState state = leader.NewSequence();
      std::vector<EntryOutput> outputs;
      const Tokens tokens = SomeTokens(30, 4 + round, vocab);
      BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
      ASSERT_OK(leader.Forward({&entry, 1}, outputs));
      entry.tokens = std::span<const int32_t>(tokens.data(), 1);
      ASSERT_OK(leader.Forward({&entry, 1}, outputs));
    }
    // A bad batch is refused on rank 0 before anything is sent.
    const size_t sent = messages.size();
    SequenceState state = leader.NewSequence();
    const Tokens bad = {static_cast<int32_t>(vocab)};
    BatchEntry entry{bad, &state, LogitsWanted::kLast, false};
    std::vector<EntryOutput> outputs;
    EXPECT_FALSE(leader.Forward({&entry, 1}, outputs).ok());
    // So are options the fast path does not implement, on the trunk and the MTP layer (refused after the
    // broadcast, they would end every rank).
    ForwardOptions recurrent;
    recurrent.kda_algorithm = KdaAlgorithm::kRecurrent;
    const Tokens good = {1};
    BatchEntry good_entry{good, &state, LogitsWanted::kLast, false};
    EXPECT_ERROR_CONTAINS(leader.Forward({&good_entry, 1}, outputs, recurrent), "kda_algorithm recurrent");
    const std::vector<float> hidden(leader.config().hidden_size);
    std::vector<float> logits;
    EXPECT_ERROR_CONTAINS(leader.MtpForward(state, hidden, good, logits, recurrent, nullptr),
                          "kda_algorithm recurrent");
    EXPECT_EQ(messages.size(), sent);
    ASSERT_OK(lockstep.Stop());
    EXPECT_GT(lockstep.plans(), 10);
    leader_calls = std::move(leader.calls);
  }
  ExpectReplayedBitForBit(follower_model, rank1, messages, leader_calls);
}

// Prefill/decode disaggregation under several ranks (docs/disaggregation.md "Several ranks"): a decode engine over
// the leader imports states exported by a single-rank engine, and its follower gets the imported bytes in the plans
// (EngineMirror::OnWrite) — every follower call gives the leader's logits bit for bit (a follower decoding from the
// lease's cleared slot would not), and the decode is the single-rank engine's own, n = 2 included. An export from
// an engine over the leader streams every layer (the hook runs on rank 0 alone) and ends with the single-rank
// export's logits. Golden tiny-sparse on the reference path, glint-tiny on the fast path.
// `flush_bytes` 1: every write is broadcast at once, not with the next plan. `speculative`: every engine runs the MTP
// layer (the decode engine's first MTP pair takes the transferred hidden row, which the plan carries inline).
void ImportsReachTheFollower(const testing::PathCase& c, size_t flush_bytes, bool speculative = false) {
  std::unique_ptr<WorkerPool> pools[3];
  const std::unique_ptr<Model> alone = testing::LoadPathModel(c, pools[0]);
  const std::unique_ptr<Model> follower_inner = testing::LoadPathModel(c, pools[1]);
  RecordingModel follower_model(*follower_inner);
  follower_model.computes_logits_as_at_tp2 = true;
  std::deque<std::vector<std::byte>> messages;
  FakeCommunicator rank0(0, &messages), rank1(1, &messages);
  std::vector<std::vector<float>> leader_calls;
  {
    LockstepLeader lockstep(testing::LoadPathModel(c, pools[2]), rank0);
    lockstep.set_write_flush_bytes(flush_bytes);
    RecordingModel leader(lockstep);
    const int64_t vocab = leader.config().vocab_size;
    auto single = testing::MakeCore(*alone, testing::SizedOptions(*alone, 2, 40, 8, speculative));
    auto prefill = testing::MakeCore(leader, testing::SizedOptions(leader, 2, 40, 8, speculative));
    auto decode = testing::MakeCore(leader, testing::SizedOptions(leader, 2, 40, 8, speculative));
    uint64_t lease = 0;
    RequestId id = 0;
    for (const int64_t length : {29, 48}) {  // ending inside a block, and at a checkpoint position
      const Tokens prompt = SomeTokens(length, length, vocab);
      const auto exported = [&](EngineCore& core, bool stream) {
        auto sink = std::make_shared<testing::Collector>();
        Request request = testing::Greedy(prompt, 1, sink);
        request.export_state = true;
        request.stream_layers = stream;
        EXPECT_OK(core.Add(++id, std::move(request)));
        testing::RunToCompletion(core);
        return sink;
      };
      const auto snapshot = exported(*single, false)->outputs.back().snapshot;
      ASSERT_NE(snapshot, nullptr);
      const auto streamed = exported(*prefill, true);
      const int64_t layers = leader.config().num_hidden_layers;
      ASSERT_EQ(static_cast<int64_t>(streamed->outputs.size()), layers + 1);
      EXPECT_TRUE(streamed->outputs.back().snapshot->logits == snapshot->logits);
      const auto expected = std::make_shared<testing::Collector>();
      Request aggregated = testing::Greedy(prompt, 8, expected);
      aggregated.n = 2;
      ASSERT_OK(single->Add(++id, std::move(aggregated)));
      testing::RunToCompletion(*single);
      ASSERT_OK(decode->Lease(++lease, length, 60));
      const auto got = std::make_shared<testing::Collector>();
      Request request = testing::Greedy(prompt, 8, got);
      request.n = 2;  // the second sample forks from the imported state: a slot copy the follower mirrors too
      request.imported = snapshot;
      request.lease = lease;
      ASSERT_OK(decode->Add(++id, std::move(request)));
      testing::RunToCompletion(*decode);
      for (int64_t sample = 0; sample < 2; ++sample) {
        EXPECT_EQ(got->TokensOf(id, sample), expected->TokensOf(id - 1, sample)) << length << " sample " << sample;
      }
    }
    if (speculative) {  // the same drafts as the single-rank engine's decodes (its exports draft nothing)
      EXPECT_GT(decode->Metrics().spec_drafts, 0);
      EXPECT_EQ(decode->Metrics().spec_draft_tokens, single->Metrics().spec_draft_tokens);
      EXPECT_EQ(decode->Metrics().spec_accepted_tokens, single->Metrics().spec_accepted_tokens);
    }
    testing::ExpectPoolsAtStart(*decode);
    testing::ExpectPoolsAtStart(*prefill);
    decode.reset();
    prefill.reset();
    ASSERT_OK(lockstep.Stop());
    leader_calls = std::move(leader.calls);
  }
  ExpectReplayedBitForBit(follower_model, rank1, messages, leader_calls);
}

TEST(Lockstep, ImportedStatesReachTheFollowerWithTheNextPlan) {
  ImportsReachTheFollower({"glint-tiny", true}, LockstepLeader::kWriteFlushBytes);
  ImportsReachTheFollower({"tiny-sparse", false}, LockstepLeader::kWriteFlushBytes);
}

TEST(Lockstep, ImportedStatesReachTheFollowerWhenFlushedAtOnce) { ImportsReachTheFollower({"glint-tiny", true}, 1); }

TEST(Lockstep, ImportedStatesWithTheMtpLayerReachTheFollower) {
  ImportsReachTheFollower({"glint-tiny", true}, LockstepLeader::kWriteFlushBytes, /*speculative=*/true);
}

TEST(Lockstep, TruncatedMessagesAreErrors) {
  WireWriter writer;
  writer.Put<uint64_t>(7);
  writer.PutVector(std::vector<int32_t>{1, 2, 3});
  std::vector<std::byte> bytes = writer.bytes();
  {
    WireReader reader(bytes);
    EXPECT_EQ(reader.Get<uint64_t>(), 7u);
    EXPECT_EQ(reader.GetVector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
    EXPECT_TRUE(reader.done());
    EXPECT_OK(reader.status());
  }
  bytes.resize(bytes.size() - 2);  // the last element cut short
  WireReader reader(bytes);
  reader.Get<uint64_t>();
  EXPECT_TRUE(reader.GetVector<int32_t>().empty());
  EXPECT_ERROR_CONTAINS(reader.status(), "cannot read a vector of 3 elements");
  // A count far beyond the bytes left allocates nothing.
  WireWriter huge;
  huge.Put<uint64_t>(uint64_t{1} << 60);
  WireReader lying(huge.bytes());
  EXPECT_TRUE(lying.GetVector<float>().empty());
  EXPECT_FALSE(lying.ok());
}

}  // namespace
}  // namespace glint
