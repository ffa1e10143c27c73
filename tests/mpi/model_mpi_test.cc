// Expert parallelism on the golden fixtures, under mpirun with 2, 3 and 4 ranks (docs/distributed.md, "Tests"):
// every rank loads the model twice — alone (one rank, every expert) and as its shard of the N-rank plan — and runs
// the same sequences through both, on the fp32 reference and on the fast path.
//
// Tolerance. The only change is where the MoE sum is rounded: one rank adds the chosen experts (ascending, shared
// last) into one accumulator; N ranks add their contiguous, ascending share into N accumulators that are then
// summed in rank order in double (dist/communicator.h). So each MoE output element moves by at most
// ≈ (N + 1) · 2⁻²⁴ · Σ_k |w_k · expert_k(x)| — one fp32 rounding of each partial and of the total, the size of
// fp32's own summation-order noise. The equivalence tests that change only fp32 summation order use
// 1e-5 × std(logits) (model_test PrefillEqualsChunksEqualsDecode); we use the same bound, and require identical
// top-1 tokens, expert choices and indexer selections. The fast path quantizes activations to int8 after each
// MoE output, where a one-ulp change can move a value across a rounding boundary (one int8 step, 1/127 of a
// group's maximum); the fast bound is therefore that of a few such flips, 1e-3 × std(logits) (the same bound the
// golden README allows the fp32 path against float64), measured far below it.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/worker_pool.h"
#include "io/safetensors.h"
#include "model/fast_convert.h"
#include "model/fast_model.h"
#include "mpi_test_main.h"
#include "test_util.h"

namespace glint {
namespace {

constexpr double kReferenceTolerance = 1e-5;  // × std(logits), see above
constexpr double kFastTolerance = 1e-3;       // × std(logits), see above

class RecordingTrace : public Trace {
 public:
  bool Wants(int sequence) const override { return sequence == 0; }
  void Floats(int, const std::string& name, std::span<const float> values, std::vector<int64_t>) override {
    floats[name].insert(floats[name].end(), values.begin(), values.end());
  }
  void Ints(int, const std::string& name, std::span<const int32_t> values, std::vector<int64_t>) override {
    ints[name].insert(ints[name].end(), values.begin(), values.end());
  }
  std::map<std::string, std::vector<float>> floats;
  std::map<std::string, std::vector<int32_t>> ints;
};

struct SequenceRun {
  std::vector<float> logits, mtp_logits;
  RecordingTrace trace, mtp_trace;
};

SequenceRun RunSequence(const Model& model, const std::vector<int32_t>& tokens) {
  SequenceRun run;
  SequenceState state = model.NewSequence();
  std::vector<EntryOutput> outputs;
  BatchEntry entry{tokens, &state, LogitsWanted::kAll, true};
  Status status = model.Forward({&entry, 1}, outputs, {}, &run.trace);
  EXPECT_TRUE(status.ok()) << status.ToString();
  if (!status.ok()) return run;
  run.logits = outputs[0].logits;
  const int64_t pairs = static_cast<int64_t>(tokens.size()) - 1, d = model.config().hidden_size;
  if (model.has_mtp() && pairs > 0) {
    status = model.MtpForward(state, std::span<const float>(outputs[0].hidden.data(), pairs * d),
                              std::span<const int32_t>(tokens.data() + 1, pairs), run.mtp_logits, {}, &run.mtp_trace);
    EXPECT_TRUE(status.ok()) << status.ToString();
  }
  return run;
}

void ExpectSameChoicesAndClose(const SequenceRun& alone, const SequenceRun& sharded, int64_t vocab, double tolerance) {
  for (const auto& [name, ints] : alone.trace.ints) {
    if (name.ends_with("moe_experts") || name.ends_with("indexer_selected")) {
      EXPECT_EQ(sharded.trace.ints.at(name), ints) << name;
    }
  }
  for (const char* name : {"mtp.moe_experts", "mtp.indexer_selected"}) {
    if (alone.mtp_trace.ints.count(name)) {
      EXPECT_EQ(sharded.mtp_trace.ints.at(name), alone.mtp_trace.ints.at(name)) << name;
    }
  }
  for (const auto* pair : {&alone.logits, &alone.mtp_logits}) {
    const std::vector<float>& one = *pair;
    const std::vector<float>& many = pair == &alone.logits ? sharded.logits : sharded.mtp_logits;
    ASSERT_EQ(one.size(), many.size());
    if (one.empty()) continue;
    const double error = testing::MaxAbsError(many, one), bound = tolerance * testing::StdDev(one);
    EXPECT_LE(error, bound) << (pair == &alone.logits ? "logits" : "mtp logits");
    for (size_t r = 0; r < one.size() / vocab; ++r) {
      auto argmax = [&](const std::vector<float>& v) {
        return std::max_element(v.begin() + r * vocab, v.begin() + (r + 1) * vocab) - (v.begin() + r * vocab);
      };
      EXPECT_EQ(argmax(many), argmax(one)) << "row " << r;
    }
    if (testing::World().rank() == 0) {
      std::printf("  %d ranks, %s: max |Δ| %.3g = %.3g × std (bound %.3g)\n", testing::World().size(),
                  pair == &alone.logits ? "logits" : "mtp logits", error, error / testing::StdDev(one), tolerance);
    }
  }
}

class ExpertParallel : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Dir() const { return testing::TestDataPath("golden/" + GetParam()); }
  std::vector<std::vector<int32_t>> Sequences() const { return testing::GoldenOutputs(GetParam()).Tokens(); }
};

TEST_P(ExpertParallel, ReferenceMatchesOneRank) {
  ASSERT_OK_AND_ASSIGN(auto alone, ReferenceModel::Load(Dir()));
  ModelParallel parallel{&testing::World(), 0, 0};
  ASSERT_OK_AND_ASSIGN(auto sharded, ReferenceModel::Load(Dir(), {}, parallel));
  const ShardPlan plan = sharded->shard_plan();
  ASSERT_EQ(plan.ranks, testing::World().size());
  // Another rank's experts are not in memory.
  const ModelConfig& c = sharded->config();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.mlp_kinds[l] != MlpKind::kMoe) continue;
    for (int64_t e = 0; e < c.n_routed_experts; ++e) {
      EXPECT_EQ(sharded->weights().layers[l].moe.experts[e].down_proj.empty(), !plan.experts().Holds(e))
          << l << " " << e;
    }
    EXPECT_EQ(sharded->weights().layers[l].moe.shared[0].down_proj.empty(), !plan.holds_shared_expert());
  }
  EXPECT_LT(sharded->weight_bytes(), alone->weight_bytes());
  for (const auto& tokens : Sequences()) {
    ExpectSameChoicesAndClose(RunSequence(*alone, tokens), RunSequence(*sharded, tokens), c.vocab_size,
                              kReferenceTolerance);
  }
}

// Known gap: on tiny-sparse the unforced fast path flips a near-tie indexer selection (layer 7, sequence 1) under
// the reordered sum, and the random model then diverges; the check there needs the 1-rank run's choices forced
// (ForcedChoices), which is not written yet. So this test runs on tiny-dense only.
TEST_P(ExpertParallel, FastPathMatchesOneRankFromCheckpointAndContainer) {
  if (GetParam() != "tiny-dense") GTEST_SKIP() << "fast path unforced on tiny-sparse: near-tie selection, see above";
  WorkerPool pool(1);
  ASSERT_OK_AND_ASSIGN(auto alone, FastModel::Load(Dir(), pool));
  FastModelOptions options;
  options.parallel = {&testing::World(), 1, 0};
  ASSERT_OK_AND_ASSIGN(auto sharded, FastModel::Load(Dir(), pool, options));
  // The same shard mapped from a container holding every expert (one container for any rank count).
  const std::string dir = testing::MakeTempDir("ep_container");
  for (const char* file : {"config.json"}) {
    ASSERT_OK_AND_ASSIGN(std::string text, ReadFile(JoinPath(Dir(), file)));
    ASSERT_OK(WriteFileAtomic(JoinPath(dir, file), text));
  }
  {
    ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(Dir()));
    ASSERT_OK_AND_ASSIGN(auto plan, PlanFastWeights(checkpoint, alone->config(), {}));
    ASSERT_OK(WriteFastContainer(plan, pool, JoinPath(dir, kContainerFileName), {}));
  }
  ASSERT_OK_AND_ASSIGN(auto mapped, FastModel::Load(dir, pool, options));
  EXPECT_TRUE(mapped->load_report().from_container);
  EXPECT_EQ(mapped->weight_bytes(), sharded->weight_bytes());

  // Per-rank bytes = replicated + this rank's experts: what it lacks is exactly the other ranks' experts.
  const ModelConfig& c = alone->config();
  const ShardPlan plan = sharded->shard_plan();
  uint64_t others = 0;
  auto count_moe = [&](const FastMoeWeights& moe) {
    for (int64_t e = 0; e < c.n_routed_experts; ++e) {
      if (!plan.experts().Holds(e)) others += moe.experts[e].gate_up.bytes() + moe.experts[e].down.bytes();
    }
    if (!plan.holds_shared_expert()) others += moe.shared[0].gate_up.bytes() + moe.shared[0].down.bytes();
  };
  for (const FastLayerWeights& layer : alone->weights().layers) {
    if (layer.mlp_kind == MlpKind::kMoe) count_moe(layer.moe);
  }
  if (alone->weights().mtp != nullptr) count_moe(alone->weights().mtp->moe);
  EXPECT_EQ(static_cast<uint64_t>(sharded->weight_bytes()), static_cast<uint64_t>(alone->weight_bytes()) - others);

  for (const auto& tokens : Sequences()) {
    const SequenceRun one = RunSequence(*alone, tokens), many = RunSequence(*sharded, tokens);
    ExpectSameChoicesAndClose(one, many, c.vocab_size, kFastTolerance);
    const SequenceRun from_container = RunSequence(*mapped, tokens);
    EXPECT_EQ(from_container.logits, many.logits) << "container and checkpoint shards differ";
  }
}

TEST_P(ExpertParallel, TensorParallelIsRefusedWithAReason) {
  ModelParallel parallel{&testing::World(), testing::World().size(), 1};
  EXPECT_ERROR_CONTAINS(ReferenceModel::Load(Dir(), {}, parallel), "tensor parallelism");
  parallel = {&testing::World(), 1, testing::World().size() + 1};
  EXPECT_ERROR_CONTAINS(ReferenceModel::Load(Dir(), {}, parallel), "must equal the number of ranks");
}

INSTANTIATE_TEST_SUITE_P(Golden, ExpertParallel, ::testing::Values("tiny-dense", "tiny-sparse"),
                         [](const auto& info) { return info.param == "tiny-dense" ? "dense" : "sparse"; });

}  // namespace
}  // namespace glint
