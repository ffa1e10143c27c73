// Under mpirun with 2–4 ranks at --tp 1 (docs/distributed.md "Collectives per step"):
//   - the collectives rank 0's communicator counts per step equal glint plan's model of them (plan/collectives.h)
//     for the same config and step — prefill over three passes, decode of two sequences, an MTP batch (one pass over
//     both entries: one MoE all-reduce): the count of each kind and the all-reduce bytes exactly, the plan
//     broadcast's bytes to its wire-format estimate;
//   - the followers skip lm_head (main and MTP layer: FastModel::lm_head_rows stays 0 on them) and rank 0's
//     outputs keep every row, within expert parallelism's tolerance of one process's.
#include <gtest/gtest.h>

#include <vector>

#include "base/worker_pool.h"
#include "fast/fast_model.h"
#include "lockstep/lockstep.h"
#include "model/model.h"
#include "mpi_test_main.h"
#include "plan/collectives.h"
#include "test_util.h"

namespace glint {
namespace {

constexpr int64_t kPassRows = 64;

std::vector<int32_t> Tokens(int64_t count, int64_t vocab, int32_t seed) {
  std::vector<int32_t> tokens(count);
  for (int64_t i = 0; i < count; ++i) tokens[i] = static_cast<int32_t>((seed * 7919 + i * 104729) % vocab);
  return tokens;
}

struct StepOutputs {
  std::vector<std::vector<float>> logits;    // per call and entry
  std::vector<CollectiveStats> collectives;  // per step, rank 0
};

// Rank 0: a prefill of 100 + 30 tokens (three passes of ≤ 64 rows), a decode step of both sequences, an MTP batch
// over both (2 and 1 pairs).
// `counted`: which stats to read (the communicator's own, or with those split from it: the tp groups').
StepOutputs RunSteps(const Model& model, Communicator& comm,
                     const CollectiveStats& (Communicator::*counted)() const = &Communicator::stats) {
  StepOutputs out;
  const int64_t vocab = model.config().vocab_size, d = model.config().hidden_size;
  SequenceState a = model.NewSequence(), b = model.NewSequence();
  const std::vector<int32_t> pa = Tokens(100, vocab, 1), pb = Tokens(30, vocab, 2);
  std::vector<EntryOutput> outputs;
  auto step = [&](std::vector<BatchEntry> batch) {
    const CollectiveStats before = (comm.*counted)();
    EXPECT_OK(model.Forward(batch, outputs));
    out.collectives.push_back((comm.*counted)().Since(before));
    for (const EntryOutput& o : outputs) out.logits.push_back(o.logits);
  };
  // Every row wants logits: each pass then holds some, so glint plan's lm_head gathers (one per pass holding a
  // logit row, which it takes as min(passes, logit rows)) are exact.
  step({{pa, &a, LogitsWanted::kAll, false}, {pb, &b, LogitsWanted::kAll, false}});
  const std::vector<int32_t> da = {5}, db = {9, 11};
  step({{da, &a, LogitsWanted::kLast, true}, {db, &b, LogitsWanted::kAll, true}});
  // The hidden inputs lie in the last Forward's outputs: the plan names them (rank 0's engine does the same).
  const std::vector<int32_t> na = {3}, nb = {4, 6};
  std::vector<MtpEntry> mtp = {{&a, std::span<const float>(outputs[0].hidden.data(), d), na, LogitsWanted::kLast},
                               {&b, std::span<const float>(outputs[1].hidden.data(), 2 * d), nb, LogitsWanted::kAll}};
  std::vector<std::vector<float>> drafts;
  const CollectiveStats before = (comm.*counted)();
  EXPECT_OK(model.MtpForwardBatch(mtp, drafts));
  out.collectives.push_back((comm.*counted)().Since(before));
  for (auto& logits : drafts) out.logits.push_back(logits);
  return out;
}

void ExpectPlanned(const CollectiveStats& measured, const std::vector<plan::CollectiveLine>& lines, const char* what) {
  int64_t broadcasts = 0, all_reduces = 0;
  uint64_t reduced = 0, plan_bytes = 0;
  for (const plan::CollectiveLine& line : lines) {
    if (line.op == plan::CollectiveOp::kBroadcast) broadcasts += line.calls, plan_bytes += line.payload;
    if (line.op == plan::CollectiveOp::kAllReduce) all_reduces += line.calls, reduced += line.payload;
    EXPECT_NE(line.op, plan::CollectiveOp::kAllGather) << "--tp 1 gathers no logits";
  }
  EXPECT_EQ(measured.of(CollectiveKind::kBroadcast).calls, broadcasts) << what;
  EXPECT_EQ(measured.of(CollectiveKind::kAllReduce).calls, all_reduces) << what;
  EXPECT_EQ(measured.of(CollectiveKind::kAllGather).calls, 0) << what;
  EXPECT_EQ(measured.of(CollectiveKind::kGather).calls, 0) << what << ": --tp 1 holds lm_head on rank 0 alone";
  EXPECT_EQ(measured.calls, broadcasts + all_reduces) << what;
  EXPECT_EQ(measured.of(CollectiveKind::kAllReduce).bytes_sent, reduced) << what;
  EXPECT_EQ(measured.of(CollectiveKind::kAllReduce).bytes_received, reduced * (testing::World().size() - 1)) << what;
  // The plan is the wire format's field sizes; the first plan of a sequence also carries nothing else, and the
  // releases of freed sequences (9 bytes each) come later: equal here.
  EXPECT_EQ(measured.of(CollectiveKind::kBroadcast).bytes_sent, plan_bytes) << what;
}

// Every kind's calls, the all-reduce bytes and the gathered bytes rank 0 counted per step equal the plan's lines.
void ExpectEveryKindPlanned(const CollectiveStats& measured, std::vector<plan::CollectiveLine> lines, bool mtp_only,
                            const char* what) {
  if (mtp_only) {  // drop the Forward's lines (a StepShape always has its Forward)
    std::erase_if(lines, [](const plan::CollectiveLine& l) { return l.what.find("MTP") == std::string::npos; });
  }
  int64_t calls[4] = {0, 0, 0, 0};
  uint64_t reduced = 0, gathered = 0;
  for (const plan::CollectiveLine& line : lines) {
    calls[static_cast<int>(line.op)] += line.calls;
    if (line.op == plan::CollectiveOp::kAllReduce) reduced += line.payload;
    if (line.op == plan::CollectiveOp::kGather) gathered += line.BytesReceived(true);
  }
  EXPECT_EQ(measured.of(CollectiveKind::kBroadcast).calls, calls[static_cast<int>(plan::CollectiveOp::kBroadcast)])
      << what;
  EXPECT_EQ(measured.of(CollectiveKind::kAllReduce).calls, calls[static_cast<int>(plan::CollectiveOp::kAllReduce)])
      << what;
  EXPECT_EQ(measured.of(CollectiveKind::kGather).calls, calls[static_cast<int>(plan::CollectiveOp::kGather)]) << what;
  EXPECT_GT(measured.of(CollectiveKind::kGather).calls, 0) << what << ": lm_head is split by vocabulary";
  EXPECT_EQ(measured.of(CollectiveKind::kAllReduce).bytes_sent, reduced) << what;
  EXPECT_EQ(measured.of(CollectiveKind::kGather).bytes_received, gathered) << what;
  EXPECT_EQ(measured.calls, calls[0] + calls[1] + calls[2] + calls[3]) << what;
}

// RunSteps' three steps (prefill 100 + 30 tokens in passes of 64, a decode of 1 + 2 rows, an MTP call of 3 rows).
void ExpectStepsPlanned(const StepOutputs& many, const ModelConfig& config, const plan::ParallelLayout& layout) {
  ASSERT_EQ(many.collectives.size(), 3u);
  ExpectEveryKindPlanned(many.collectives[0],
                         plan::CollectivesPerStep(config, layout, {2, 130, 130, kPassRows, 0, 0, 0}), false, "prefill");
  ExpectEveryKindPlanned(many.collectives[1], plan::CollectivesPerStep(config, layout, {2, 3, 3, kPassRows, 0, 0, 0}),
                         false, "decode");
  plan::StepShape mtp{0, 0, 0, kPassRows, 0, 2, 3};  // one MTP call over both entries, 3 rows drafting
  mtp.mtp_logit_rows = 3;
  ExpectEveryKindPlanned(many.collectives[2], plan::CollectivesPerStep(config, layout, mtp), true, "MTP batch");
}

TEST(Collectives, MeasuredPerStepEqualsThePlanAndFollowersSkipLmHead) {
  Communicator& comm = testing::World();
  const std::string dir = testing::TestDataPath("golden/tiny-dense");
  WorkerPool pool(1);
  FastModelOptions options;
  options.max_tokens_per_pass = kPassRows;
  std::unique_ptr<FastModel> alone;
  if (comm.rank() == 0) {
    ASSERT_OK_AND_ASSIGN(alone, FastModel::Load(dir, pool, options));
  }
  options.parallel = {&comm, 1, 0};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> shard, FastModel::Load(dir, pool, options));
  const FastModel* shard_view = shard.get();
  if (comm.rank() != 0) {
    ASSERT_OK(RunLockstepFollower(*shard, comm));
    EXPECT_EQ(shard_view->lm_head_rows(), 0) << "a follower at --tp 1 computed logits nobody reads";
    return;
  }
  const ModelConfig config = shard->config();
  LockstepLeader leader(std::move(shard), comm);
  const StepOutputs many = RunSteps(leader, comm);
  ASSERT_OK(leader.Stop());
  EXPECT_GT(shard_view->lm_head_rows(), 0);

  const plan::ParallelLayout layout{comm.size(), 1};
  plan::StepShape prefill{2, 130, 130, kPassRows, 0, 0, 0};
  plan::StepShape decode{2, 3, 3, kPassRows, 0, 0, 0};
  plan::StepShape mtp{0, 0, 0, kPassRows, 0, 2, 3};  // one MTP call over both entries: one MoE all-reduce
  mtp.mtp_logit_rows = 3;
  ASSERT_EQ(many.collectives.size(), 3u);
  ExpectPlanned(many.collectives[0], plan::CollectivesPerStep(config, layout, prefill), "prefill");
  ExpectPlanned(many.collectives[1], plan::CollectivesPerStep(config, layout, decode), "decode");
  // An MTP-only step: drop the Forward's lines (a StepShape always has its Forward).
  std::vector<plan::CollectiveLine> mtp_lines = plan::CollectivesPerStep(config, layout, mtp);
  std::erase_if(mtp_lines, [](const plan::CollectiveLine& line) { return line.what.find("MTP") == std::string::npos; });
  ExpectPlanned(many.collectives[2], mtp_lines, "MTP batch");

  // The same calls on one process: what the followers skip never reaches rank 0, whose outputs stay those of
  // expert parallelism — one process's within the fast path's tolerance of model_mpi_test (1e-3 × std; the MoE
  // sums' rounding only), with every logit row there.
  SingleProcessCommunicator single;
  const StepOutputs one = RunSteps(*alone, single);
  ASSERT_EQ(one.logits.size(), many.logits.size());
  for (size_t i = 0; i < one.logits.size(); ++i) {
    ASSERT_EQ(one.logits[i].size(), many.logits[i].size()) << i;
    EXPECT_LE(testing::MaxAbsError(many.logits[i], one.logits[i]), 1e-3 * testing::StdDev(one.logits[i])) << i;
  }
}

// --lm-head-split-rows 4 at --tp 1 (tiny-dense): passes of at most 4 rows wanting logits (the prefill's last pass of
// 2 rows, the decode's 3, the MTP call's 3) compute lm_head split by vocabulary over every rank, rank 0 gathering the
// columns; the full passes of 64 compute it whole on rank 0. Rank 0's logits are bit for bit those without the split
// (each logit is one vocabulary row's dot product, computed whole on one rank by the same kernel), the followers
// compute their share of the rows, and the counts per step equal the plan's with the same threshold.
TEST(Collectives, LmHeadSplitOverEveryRankKeepsTheLogitsAndMatchesThePlan) {
  Communicator& comm = testing::World();
  const std::string dir = testing::TestDataPath("golden/tiny-dense");
  WorkerPool pool(1);
  constexpr int64_t kSplitRows = 4;
  std::vector<StepOutputs> runs;
  for (const int64_t split_rows : {int64_t{0}, kSplitRows}) {
    FastModelOptions options;
    options.max_tokens_per_pass = kPassRows;
    options.parallel = {&comm, 1, 0};
    options.parallel.head_split_rows = split_rows;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> shard, FastModel::Load(dir, pool, options));
    ASSERT_EQ(shard->shard_plan().head_split(), split_rows > 0);
    const FastModel* shard_view = shard.get();
    if (comm.rank() != 0) {
      ASSERT_OK(RunLockstepFollower(*shard, comm));
      // The prefill's last pass (2 rows), the decode (3), the MTP call (3).
      EXPECT_EQ(shard_view->lm_head_rows(), split_rows > 0 ? 2 + 3 + 3 : 0);
      continue;
    }
    LockstepLeader leader(std::move(shard), comm);
    runs.push_back(RunSteps(leader, comm));
    ASSERT_OK(leader.Stop());
  }
  if (comm.rank() != 0) return;
  ASSERT_EQ(runs.size(), 2u);
  ASSERT_EQ(runs[0].logits.size(), runs[1].logits.size());
  for (size_t i = 0; i < runs[0].logits.size(); ++i) EXPECT_EQ(runs[0].logits[i], runs[1].logits[i]) << i;
  ASSERT_OK_AND_ASSIGN(const ModelConfig config, LoadModelConfig(dir));
  ExpectStepsPlanned(runs[1], config, plan::ParallelLayout{comm.size(), 1, kSplitRows});
}

// The fast path at --tp 2 (--tp 3 on 3 ranks; --ep 2 on 4), tiny-dense (tiny-sparse at --tp 3) converted with
// 16-column groups so that KDA, MLA, the dense MLP and lm_head are all split: rank 0's world communicator with its tp
// group's collectives (stats_with_splits, what bench-model and bench-engine print) counts per step what glint plan
// models — calls of each kind, the all-reduce bytes, and the bytes of the lm_head gathers rank 0 receives.
TEST(Collectives, FastPathTensorParallelCountsEqualThePlan) {
  Communicator& comm = testing::World();
  const int tp = comm.size() % 2 == 0 ? 2 : comm.size();
  WorkerPool pool(1);
  FastModelOptions options;
  options.max_tokens_per_pass = kPassRows;
  options.convert.group = 16;
  options.parallel = {&comm, tp, comm.size() / tp};
  // tiny-sparse at --tp 3: its 3 KDA heads split (tiny-dense has 2).
  const char* fixture = tp == 3 ? "golden/tiny-sparse" : "golden/tiny-dense";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> shard,
                       FastModel::Load(testing::TestDataPath(fixture), pool, options));
  ASSERT_TRUE(shard->shard_plan().kda_split && shard->shard_plan().mla_split && shard->shard_plan().mlp_split)
      << "the test wants every kind of split sublayer";
  if (comm.rank() != 0) {
    ASSERT_OK(RunLockstepFollower(*shard, comm));
    return;
  }
  const ModelConfig config = shard->config();
  LockstepLeader leader(std::move(shard), comm);
  const StepOutputs many = RunSteps(leader, comm, &Communicator::stats_with_splits);
  ASSERT_OK(leader.Stop());

  const plan::ParallelLayout layout{comm.size(), tp};
  ASSERT_EQ(many.collectives.size(), 3u);
  ExpectStepsPlanned(many, config, layout);
}

// --tp = every rank on the reference path: the lm_head gather rank 0 counts per step (a single-sequence prefill,
// a decode, an MTP call) equals glint plan's line — calls and the bytes rank 0 receives, the other ranks' columns
// of the rows that want logits.
TEST(Collectives, LmHeadGatherEqualsThePlanAtTensorParallel) {
  Communicator& comm = testing::World();
  ASSERT_OK_AND_ASSIGN(auto model, ReferenceModel::Load(testing::TestDataPath("golden/tiny-dense"), {},
                                                        ModelParallel{&comm, comm.size(), 1}));
  const ModelConfig& c = model->config();
  const plan::ParallelLayout layout{comm.size(), comm.size()};
  SequenceState state = model->NewSequence();
  const std::vector<int32_t> prompt = Tokens(7, c.vocab_size, 3), next = {4};
  std::vector<EntryOutput> outputs;
  ASSERT_NE(model->tp_communicator(), nullptr);
  const Communicator& group = *model->tp_communicator();  // the gather runs over rank 0's tp group
  auto gathers = [&](const CollectiveStats& step, const plan::StepShape& shape, bool mtp, const char* what) {
    int64_t calls = 0;
    uint64_t received = 0;
    for (const plan::CollectiveLine& line : plan::CollectivesPerStep(c, layout, shape)) {
      if (line.op != plan::CollectiveOp::kGather || (line.what.find("MTP") != std::string::npos) != mtp) continue;
      calls += line.calls, received += line.BytesReceived(true);
    }
    EXPECT_GT(calls, 0) << what;
    EXPECT_EQ(step.of(CollectiveKind::kGather).calls, calls) << what;
    if (comm.rank() == 0) {
      EXPECT_EQ(step.of(CollectiveKind::kGather).bytes_received, received) << what;
    }
  };
  CollectiveStats before = group.stats();
  BatchEntry prefill{prompt, &state, LogitsWanted::kAll, true};
  ASSERT_OK(model->Forward({&prefill, 1}, outputs));
  gathers(group.stats().Since(before), {1, 7, 7, 512, 0, 0, 0}, false, "prefill, every row's logits");
  const std::vector<float> hidden = outputs[0].hidden;
  before = group.stats();
  BatchEntry decode{next, &state, LogitsWanted::kLast, false};
  ASSERT_OK(model->Forward({&decode, 1}, outputs));
  gathers(group.stats().Since(before), {1, 1, 1, 512, 0, 0, 0}, false, "decode");
  if (model->has_mtp()) {
    std::vector<float> logits;
    before = group.stats();
    ASSERT_OK(model->MtpForward(state, std::span<const float>(hidden.data(), 6 * c.hidden_size),
                                std::span<const int32_t>(prompt.data() + 1, 6), logits));
    plan::StepShape mtp{0, 0, 0, 512, 0, 1, 6};
    mtp.mtp_logit_rows = 6;  // MtpForward: every pair's logits
    gathers(group.stats().Since(before), mtp, true, "MTP layer");
    EXPECT_EQ(logits.size(), comm.rank() == 0 ? static_cast<size_t>(6 * c.vocab_size) : 0u);
  }
}

}  // namespace
}  // namespace glint
