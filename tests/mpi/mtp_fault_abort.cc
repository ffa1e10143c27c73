// A single-call MtpForward that fails after rank 0 broadcast its plan (docs/distributed.md "Failures"): here an
// expert read of the MTP layer failing on rank 1 under --expert-memory. Unlike the engine's MtpForwardBatch it has
// no per-entry error to return, so every rank must end, fast, with a message naming the rank and the cause — never
// a hang in a collective. This binary is run by ctest under `mpirun -np 2` and passes only if the output holds that
// message (PASS_REGULAR_EXPRESSION in tests/mpi/CMakeLists.txt; its exit status is the abort's, non-zero).
#include <gtest/gtest.h>

#include "base/worker_pool.h"
#include "expert_checks.h"
#include "fast/fast_model.h"
#include "lockstep/lockstep.h"
#include "mpi_test_main.h"
#include "test_util.h"

namespace glint {
namespace {

TEST(MtpForwardFault, EndsEveryRankWithAMessage) {
  Communicator& comm = testing::World();
  ASSERT_EQ(comm.size(), 2) << "run with mpirun -np 2";
  WorkerPool pool(1);
  const std::string container = testing::ConvertToContainer(testing::TestDataPath("golden/tiny-sparse"), pool);
  ASSERT_FALSE(container.empty());
  const testing::ExpertBudgets budgets = testing::BudgetsOf(container, pool);
  auto faults = std::make_shared<testing::FaultPlan>();
  FastModelOptions options = testing::FaultyCacheOptions(budgets.minimum, faults);
  options.parallel = {&comm, 1, 0};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> shard, FastModel::Load(container, pool, options));
  // Every MTP-layer expert rank 1 holds fails to read there (twice: the retry too); the trunk's read fine.
  if (comm.rank() == 1) {
    const ExpertRange mine = shard->shard_plan().experts();
    for (int64_t e = mine.begin; e < mine.end; ++e)
      faults->failing_offsets.insert(testing::ExpertExtentOffset(container, -1, e));
  }
  if (comm.rank() != 0) {
    ASSERT_OK(RunLockstepFollower(*shard, comm));
    ADD_FAILURE() << "rank 1 returned from following: the failed MTP call did not end it";
    return;
  }
  LockstepLeader leader(std::move(shard), comm);
  const int64_t d = leader.config().hidden_size;
  const std::vector<int32_t> prompt = testing::GoldenOutputs("tiny-sparse").Tokens()[0];
  ASSERT_GE(prompt.size(), 9u);
  const std::span<const int32_t> first(prompt.data(), 8);
  SequenceState state = leader.NewSequence();
  std::vector<EntryOutput> outputs;
  BatchEntry entry{first, &state, LogitsWanted::kAll, true};
  ASSERT_OK(leader.Forward({&entry, 1}, outputs));
  std::vector<float> logits;
  // The pairs (h_t, x_{t+1}) of positions 0–7: the MTP layer routes some of them to rank 1's experts.
  const Status status = leader.MtpForward(state, std::span<const float>(outputs[0].hidden.data(), 8 * d),
                                          std::span<const int32_t>(prompt.data() + 1, 8), logits);
  ADD_FAILURE() << "MtpForward returned (" << status.ToString() << ") instead of ending every rank";
}

}  // namespace
}  // namespace glint
