// --dp-attention on the golden fixtures under mpirun with 2, 3 and 4 ranks (docs/distributed.md "Attention
// data-parallel"): several sequences spread over the ranks (sequence i on rank i mod N), prefilled in passes small
// enough that the ranks need different numbers of passes, then decoded a few steps, teacher-forced so that every
// rank knows the next tokens. Rank 0's logits of every sequence must be bit for bit those of the replicated
// layout (--ep N without --dp-attention): a row's MoE partial sums are the same and are added in the same order
// (dist/row_exchange.h). And the exchange is counted: no all-reduce, two all-to-alls per MoE layer and pass and
// one per pass for the head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/worker_pool.h"
#include "fast/fast_model.h"
#include "mpi_test_main.h"
#include "test_util.h"

namespace glint {
namespace {

constexpr int64_t kPassRows = 16;  // small passes: a prefill of ~60 rows per rank takes several
constexpr int kSequences = 5;
constexpr int kDecodeSteps = 3;

class DpAttention : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Dir() const { return testing::TestDataPath("golden/" + GetParam()); }
};

// Sequence i: a prefix of the fixture's token sequences, of a length that differs per sequence.
std::vector<std::vector<int32_t>> Prompts(const std::string& fixture) {
  const std::vector<std::vector<int32_t>> golden = testing::GoldenOutputs(fixture).Tokens();
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kSequences; ++i) {
    const std::vector<int32_t>& source = golden[i % golden.size()];
    const size_t length = std::min(source.size() - kDecodeSteps, static_cast<size_t>(9 + 13 * i));
    prompts.emplace_back(source.begin(), source.begin() + length);
  }
  return prompts;
}

// This rank's state of sequence i under --dp-attention: its own memory when it holds the sequence, else a view
// with none (as the lockstep follower makes one).
SequenceState DpState(const Model& model, int owner) {
  if (owner == testing::World().rank()) {
    SequenceState state = model.NewSequence();
    state.attention_rank = owner;
    return state;
  }
  SequenceState state;
  state.owner = &model;
  state.owned = std::make_unique<OwnedSequenceMemory>();
  state.attention_rank = owner;
  return state;
}

// Prefill then teacher-forced decode steps; each step one Forward per group of sequences (`groups`: sequence
// indices). Rank 0's logits [steps][sequences].
std::vector<std::vector<std::vector<float>>> RunAll(const Model& model, std::vector<SequenceState>& states,
                                                    const std::vector<std::vector<int32_t>>& prompts,
                                                    const std::string& fixture,
                                                    const std::vector<std::vector<int>>& groups) {
  const std::vector<std::vector<int32_t>> golden = testing::GoldenOutputs(fixture).Tokens();
  std::vector<std::vector<std::vector<float>>> logits(kDecodeSteps + 1, std::vector<std::vector<float>>(kSequences));
  for (int step = 0; step <= kDecodeSteps; ++step) {
    for (const std::vector<int>& group : groups) {
      std::vector<std::vector<int32_t>> tokens(group.size());
      std::vector<BatchEntry> batch;
      for (size_t g = 0; g < group.size(); ++g) {
        const int i = group[g];
        const std::vector<int32_t>& source = golden[i % golden.size()];
        tokens[g] = step == 0 ? prompts[i] : std::vector<int32_t>{source[prompts[i].size() + step - 1]};
        batch.push_back(BatchEntry{tokens[g], &states[i], step == 0 ? LogitsWanted::kAll : LogitsWanted::kLast});
      }
      std::vector<EntryOutput> outputs;
      const Status status = model.Forward(batch, outputs);
      EXPECT_TRUE(status.ok()) << status.ToString();
      if (!status.ok()) return logits;
      for (size_t g = 0; g < group.size(); ++g) logits[step][group[g]] = std::move(outputs[g].logits);
    }
  }
  return logits;
}

TEST_P(DpAttention, ManySequencesBitIdenticalToReplicatedExpertParallel) {
  const int ranks = testing::World().size();
  WorkerPool pool(1);
  FastModelOptions options;
  options.max_tokens_per_pass = kPassRows;
  options.parallel = {&testing::World(), 1, 0};
  ASSERT_OK_AND_ASSIGN(auto replicated, FastModel::Load(Dir(), pool, options));
  options.parallel.dp_attention = true;
  ASSERT_OK_AND_ASSIGN(auto spread, FastModel::Load(Dir(), pool, options));
  ASSERT_TRUE(spread->shard_plan().dp_attention);
  const std::vector<std::vector<int32_t>> prompts = Prompts(GetParam());

  std::vector<SequenceState> replicated_states, spread_states;
  for (int i = 0; i < kSequences; ++i) {
    replicated_states.push_back(replicated->NewSequence());
    spread_states.push_back(DpState(*spread, i % ranks));
  }
  // The replicated layout runs each rank's sequences in a call of their own: its passes then hold the rows the
  // rank's passes hold under --dp-attention (a sequence split over two passes is computed as a chunked prefill,
  // whose KDA arithmetic depends on where the split falls).
  std::vector<std::vector<int>> by_rank(ranks), all(1);
  for (int i = 0; i < kSequences; ++i) by_rank[i % ranks].push_back(i), all[0].push_back(i);
  std::erase_if(by_rank, [](const std::vector<int>& group) { return group.empty(); });
  const auto expected = RunAll(*replicated, replicated_states, prompts, GetParam(), by_rank);
  const CollectiveStats before = testing::World().stats();
  const auto got = RunAll(*spread, spread_states, prompts, GetParam(), all);
  const CollectiveStats exchanged = testing::World().stats().Since(before);

  EXPECT_EQ(exchanged.all_reduces, 0);
  const ModelConfig& c = spread->config();
  const int64_t moe_layers = std::count(c.mlp_kinds.begin(), c.mlp_kinds.end(), MlpKind::kMoe);
  int64_t passes = 0;  // the rank with the most rows sets the count of every call
  for (int step = 0; step <= kDecodeSteps; ++step) {
    std::vector<int64_t> rows(ranks, 0);
    for (int i = 0; i < kSequences; ++i) rows[i % ranks] += step == 0 ? static_cast<int64_t>(prompts[i].size()) : 1;
    passes += (*std::max_element(rows.begin(), rows.end()) + kPassRows - 1) / kPassRows;
  }
  EXPECT_EQ(exchanged.all_to_alls, passes * (2 * moe_layers + 1));
  for (int i = 0; i < kSequences; ++i) {
    EXPECT_EQ(spread_states[i].tokens, replicated_states[i].tokens) << "sequence " << i;
  }
  if (testing::World().rank() != 0) return;  // only rank 0 receives logits
  for (int step = 0; step <= kDecodeSteps; ++step) {
    for (int i = 0; i < kSequences; ++i) {
      const std::vector<float>& a = expected[step][i];
      const std::vector<float>& b = got[step][i];
      ASSERT_FALSE(a.empty());
      ASSERT_EQ(a.size(), b.size()) << "step " << step << " sequence " << i;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "step " << step << " sequence " << i << " (held by rank " << i % ranks << ")";
    }
  }
}

TEST_P(DpAttention, RefusesTensorParallelAndTheExpertCache) {
  WorkerPool pool(1);
  FastModelOptions options;
  options.parallel = {&testing::World(), testing::World().size(), 1};
  options.parallel.dp_attention = true;
  const Status status = FastModel::Load(Dir(), pool, options).status();
  EXPECT_NE(status.message().find("--dp-attention runs whole attention on each sequence's rank: it needs --tp 1"),
            std::string::npos)
      << status.ToString();
  options.parallel = {&testing::World(), 1, 0};
  options.parallel.dp_attention = true;
  options.expert_memory = uint64_t{1} << 20;
  EXPECT_ERROR_CONTAINS(FastModel::Load(Dir(), pool, options), "--dp-attention does not run with --expert-memory");
}

INSTANTIATE_TEST_SUITE_P(Golden, DpAttention, ::testing::Values("tiny-sparse", "tiny-dense"));

}  // namespace
}  // namespace glint
