// The scheduler without a model (as vLLM's scheduler tests): exact chunks, budget arithmetic, block ids,
// preemption order, prefix hits and forks, with the integrity check after every step; and several cache partitions
// (--dp-attention: one per rank): the partition chosen, preemption and forks within a partition.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "memory/cache_manager.h"
#include "test_util.h"

namespace glint {
namespace {

using Ids = std::vector<int32_t>;

std::vector<int32_t> Tokens(int32_t first, int64_t count) {
  std::vector<int32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// Blocks of 4 tokens (64 bytes), slots of 128 bytes; checkpoints every 8 tokens when prefix caching is on.
CacheManagerOptions MemoryOptions(int64_t blocks, int64_t slots, bool prefix = false, int64_t checkpoints = 4) {
  CacheManagerOptions o;
  o.block_tokens = 4;
  o.block_bytes = 64;
  o.num_blocks = blocks;
  o.slot_bytes = 128;
  o.num_slots = slots;
  o.checkpoint_bytes = 64;
  o.num_checkpoints = prefix ? checkpoints : 0;
  o.prefix_caching = prefix;
  o.checkpoint_interval = 8;
  return o;
}
std::unique_ptr<CacheManager> Memory(int64_t blocks, int64_t slots, bool prefix = false, int64_t checkpoints = 4) {
  return CacheManager::Create(MemoryOptions(blocks, slots, prefix, checkpoints)).value();
}

struct Chunk {
  SequenceId id;
  int64_t start, count;
  bool samples;
  bool operator==(const Chunk&) const = default;
};
std::ostream& operator<<(std::ostream& out, const Chunk& c) {
  return out << "{" << c.id << ", " << c.start << ", " << c.count << ", " << c.samples << "}";
}
std::vector<Chunk> ChunksOf(const StepPlan& plan) {
  std::vector<Chunk> chunks;
  for (const ScheduledChunk& c : plan.chunks) chunks.push_back({c.id, c.start, c.count, c.samples});
  return chunks;
}

// What the engine does after the model ran: commit, then append a token (100 + id) to each sampling sequence.
void Finish(Scheduler& scheduler, const StepPlan& plan) {
  scheduler.Complete(plan);
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.samples) scheduler.AppendToken(c.id, static_cast<int32_t>(100 + c.id));
  }
  ASSERT_OK(scheduler.CheckIntegrity());
}

TEST(Scheduler, BudgetDecodesFirstThenPrefillChunksThenAdmissions) {
  auto memory = Memory(64, 4);
  Scheduler scheduler(*memory, {.max_batch_tokens = 16});
  scheduler.Add(1, Tokens(0, 10), 0);
  scheduler.Add(2, Tokens(0, 20), 1);
  scheduler.Add(3, Tokens(0, 5), 2);
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 0, 10, true}, {2, 0, 6, false}}));
  EXPECT_EQ(plan.tokens, 16);
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{1, 2}));
  EXPECT_EQ(memory->BlockTable(1), (Ids{0, 1, 2}));
  EXPECT_EQ(memory->BlockTable(2), (Ids{3, 4}));
  Finish(scheduler, plan);
  // Step 2: 1 decodes; 2 continues its prefill with what is left of the budget; 3 gets the last token of budget.
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 10, 1, true}, {2, 6, 14, true}, {3, 0, 1, false}}));
  EXPECT_EQ(plan.tokens, 16);
  Finish(scheduler, plan);
  EXPECT_EQ(memory->BlockTable(2), (Ids{3, 4, 5, 6, 7}));
  // Step 3: two decodes, then 3's prefill.
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 11, 1, true}, {2, 20, 1, true}, {3, 1, 4, true}}));
  Finish(scheduler, plan);
  EXPECT_EQ(scheduler.Get(1).tokens.size(), 13u);
  EXPECT_EQ(scheduler.Get(3).computed, 5);
  for (SequenceId id : {1, 2, 3}) scheduler.Finish(id);
  EXPECT_EQ(memory->Stats().blocks_used, 0);
  EXPECT_EQ(memory->Stats().slots_used, 0);
  ASSERT_OK(scheduler.CheckIntegrity());
}

TEST(Scheduler, ALongPromptDelaysDecodesByAtMostOneChunk) {
  auto memory = Memory(128, 4);
  Scheduler scheduler(*memory, {.max_batch_tokens = 8});
  scheduler.Add(1, Tokens(0, 3), 0);
  Finish(scheduler, scheduler.Schedule());  // 1 prefills and starts decoding
  scheduler.Add(2, Tokens(0, 100), 1);
  for (int step = 0; step < 14; ++step) {
    const StepPlan plan = scheduler.Schedule();
    ASSERT_GE(plan.chunks.size(), 1u);
    EXPECT_EQ(ChunksOf(plan)[0], (Chunk{1, 3 + step, 1, true})) << "the decode comes first in step " << step;
    if (step < 13) {
      EXPECT_EQ(ChunksOf(plan)[1], (Chunk{2, 7 * step, 7, false})) << step;
    }
    Finish(scheduler, plan);
  }
  EXPECT_EQ(scheduler.Get(2).computed, 98);
}

TEST(Scheduler, ChunksCarryTheCheckpointsTheyPass) {
  auto memory = Memory(64, 2, /*prefix=*/true);
  Scheduler scheduler(*memory, {.max_batch_tokens = 100});
  scheduler.Add(1, Tokens(0, 20), 0);
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 0, 20, true}}));  // no stop at 8 or 16
  ASSERT_EQ(plan.chunks[0].checkpoints.size(), 2u);
  EXPECT_EQ(plan.chunks[0].checkpoints[0].position, 8);
  EXPECT_EQ(plan.chunks[0].checkpoints[1].position, 16);
  Finish(scheduler, plan);
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 20, 1, true}}));
  EXPECT_TRUE(plan.chunks[0].checkpoints.empty());
  Finish(scheduler, plan);
  EXPECT_EQ(memory->Stats().checkpoints_taken, 2);
  EXPECT_EQ(memory->Stats().checkpoints_missed, 0);
}

TEST(Scheduler, AdmissionReusesTheCachedPrefix) {
  auto memory = Memory(64, 2, /*prefix=*/true);
  Scheduler scheduler(*memory, {.max_batch_tokens = 100});
  scheduler.Add(1, Tokens(0, 20), 0);
  for (int step = 0; step < 3; ++step) Finish(scheduler, scheduler.Schedule());
  scheduler.Finish(1);
  std::vector<int32_t> prompt = Tokens(0, 18);
  prompt.push_back(77);
  scheduler.Add(2, prompt, 1);
  const StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{2, 16, 3, true}}));
  EXPECT_EQ(scheduler.Get(2).prefix_hit_tokens, 16);
  // Blocks 0..3 are shared from the cache; the new one comes from the head of the free queue (never-used blocks
  // before 1's cached ones, which went to the tail).
  EXPECT_EQ(memory->BlockTable(2), (Ids{0, 1, 2, 3, 5}));
  Finish(scheduler, plan);
}

// Prompts of 20: a shared 18-token start (checkpoints at 8 and 16), then their own token.
std::vector<int32_t> SharedStart(int32_t own) {
  std::vector<int32_t> prompt = Tokens(0, 18);
  prompt.push_back(own);
  prompt.push_back(own);
  return prompt;
}

TEST(Scheduler, APromptWhoseStartIsBeingComputedWaitsForTheCache) {
  auto memory = Memory(64, 4, /*prefix=*/true, /*checkpoints=*/8);
  Scheduler scheduler(*memory, {.max_batch_tokens = 100});
  scheduler.Add(1, SharedStart(70), 0);
  scheduler.Add(2, SharedStart(71), 1);  // shares 18 tokens with 1, which nobody has computed yet
  scheduler.Add(3, Tokens(50, 6), 2);    // shares nothing: goes first
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{1, 3}));
  EXPECT_EQ(scheduler.Get(2).status, SequenceStatus::kWaiting);
  Finish(scheduler, plan);
  plan = scheduler.Schedule();  // 1's prompt is cached up to its checkpoint at 16: 2 computes only its own part
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{2}));
  EXPECT_EQ(scheduler.Get(2).prefix_hit_tokens, 16);
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 20, 1, true}, {3, 6, 1, true}, {2, 16, 4, true}}));
  Finish(scheduler, plan);
}

TEST(Scheduler, PassingOverDeferredPromptsIsBoundedPerStep) {
  auto memory = Memory(256, 16, /*prefix=*/true, /*checkpoints=*/8);
  Scheduler scheduler(*memory, {.max_batch_tokens = 200});
  for (int32_t i = 0; i < 10; ++i) scheduler.Add(i + 1, SharedStart(70 + i), i);  // 1 computes, 9 would wait
  scheduler.Add(20, Tokens(50, 6), 10);  // unrelated, behind 9 deferred ones: past the bound of 8
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{1}));
  Finish(scheduler, plan);
  plan = scheduler.Schedule();  // 1's start is cached: everyone is admitted
  EXPECT_EQ(plan.admitted.size(), 10u);
  Finish(scheduler, plan);
}

TEST(Scheduler, APromptWaitsForAStartInFlightOnlyWhenItGainsACheckpoint) {
  auto memory = Memory(64, 4, /*prefix=*/true, /*checkpoints=*/8);
  Scheduler scheduler(*memory, {.max_batch_tokens = 100});
  scheduler.Add(1, SharedStart(70), 0);
  std::vector<int32_t> short_share = Tokens(0, 7);  // under one checkpoint interval shared: nothing to wait for
  short_share.push_back(99);
  scheduler.Add(2, short_share, 1);
  const StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{1, 2}));
  Finish(scheduler, plan);
}

TEST(Scheduler, AnOnlinePromptNeverWaitsForABatchPrefill) {
  auto memory = Memory(64, 4, /*prefix=*/true, /*checkpoints=*/8);
  Scheduler scheduler(*memory, {.max_batch_tokens = 10});
  scheduler.Add(1, SharedStart(70), 0, {}, SequencePriority::kBatch);
  scheduler.Add(2, SharedStart(71), 1, {}, SequencePriority::kBatch);
  StepPlan plan = scheduler.Schedule();  // 1 computes 10 of its 20; 2, a batch sequence too, waits for it
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 0, 10, false}}));
  Finish(scheduler, plan);
  scheduler.Add(3, SharedStart(72), 2);  // online, sharing the 18 tokens 1 is still computing
  plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{3})) << "batch prefill is throttled beside online work";
  EXPECT_EQ(scheduler.Get(2).status, SequenceStatus::kWaiting);
  Finish(scheduler, plan);
}

TEST(Scheduler, AdmissionTakesWhatIsFreeInArrivalOrder) {
  auto memory = Memory(6, 4);
  Scheduler scheduler(*memory, {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 16), 0);  // takes 4 of 6 blocks
  Finish(scheduler, scheduler.Schedule());
  scheduler.Add(2, Tokens(0, 12), 1);  // would need 3 blocks; 1 is left after 1's growth
  scheduler.Add(3, Tokens(0, 2), 2);
  StepPlan plan = scheduler.Schedule();
  // 1 decodes into a fifth block; 2 takes the last block for a shortened first chunk; 3 waits for memory.
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 16, 1, true}, {2, 0, 4, false}}));
  EXPECT_EQ(scheduler.Get(3).status, SequenceStatus::kWaiting);
  Finish(scheduler, plan);
}

TEST(Scheduler, PreemptsTheNewestAndRecomputesItLater) {
  auto memory = Memory(5, 3);
  Scheduler scheduler(*memory, {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 8), 0);  // blocks 0 1
  scheduler.Add(2, Tokens(0, 8), 1);  // blocks 2 3
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{1, 2}));
  Finish(scheduler, plan);      // both at 8 computed, 9 tokens
  plan = scheduler.Schedule();  // 1 takes block 4; 2 finds none free: 2 (the newest) is preempted
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 8, 1, true}}));
  EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{2}));
  EXPECT_EQ(memory->BlockTable(1), (Ids{0, 1, 4}));
  EXPECT_EQ(scheduler.Get(2).status, SequenceStatus::kWaiting);
  EXPECT_EQ(scheduler.Get(2).tokens.size(), 9u);  // prompt + its generated token, to recompute
  EXPECT_EQ(scheduler.num_preemptions(), 1);
  Finish(scheduler, plan);
  scheduler.Finish(1);
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{2, 0, 9, true}}));  // recompute prompt + generated, then sample
  Finish(scheduler, plan);
  EXPECT_EQ(scheduler.Get(2).tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 102, 102}));
}

// Batch jobs (docs/batch.md "Priority"): an online request that arrives while batch requests run is scheduled
// ahead of them, takes the budget first, and the batch sequences are the ones preempted.
TEST(Scheduler, AnOnlineRequestGoesBeforeRunningBatchRequests) {
  auto memory = Memory(64, 4);
  Scheduler scheduler(*memory, {.max_batch_tokens = 12});
  scheduler.Add(1, Tokens(0, 8), 0, {}, SequencePriority::kBatch);
  scheduler.Add(2, Tokens(0, 20), 1, {}, SequencePriority::kBatch);
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 0, 8, true}, {2, 0, 4, false}}));
  Finish(scheduler, plan);
  scheduler.Add(3, Tokens(50, 10), 2);  // online, arriving last
  plan = scheduler.Schedule();
  // The online prompt takes its whole chunk first; the batch sequences only decode beside it: the batch prefill
  // waits (it would fill the step, and the step is the online request's time to first token).
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{3, 0, 10, true}, {1, 8, 1, true}}));
  Finish(scheduler, plan);
  // The online request decodes now: the batch prefill goes on with what the decodes leave.
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{3, 10, 1, true}, {1, 9, 1, true}, {2, 4, 10, false}}));
  Finish(scheduler, plan);
}

TEST(Scheduler, NoBatchRequestIsAdmittedInAStepThatComputesAnOnlinePrompt) {
  auto memory = Memory(64, 4);
  Scheduler scheduler(*memory, {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 4), 0, {}, SequencePriority::kBatch);
  scheduler.Add(2, Tokens(50, 6), 1);  // online
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{2}));
  EXPECT_EQ(scheduler.Get(1).status, SequenceStatus::kWaiting);
  Finish(scheduler, plan);
  plan = scheduler.Schedule();  // the online request decodes: the batch one is admitted beside it
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{1}));
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{2, 6, 1, true}, {1, 0, 4, true}}));
  Finish(scheduler, plan);
}

TEST(Scheduler, BatchPrefillBesideOnlineSequencesIsCapped) {
  for (int64_t cap : {0, 5, 30}) {
    SCOPED_TRACE(cap);
    auto memory = Memory(64, 4);
    Scheduler scheduler(*memory, {.max_batch_tokens = 64, .batch_prefill_beside_online = cap});
    scheduler.Add(1, Tokens(0, 4), 0);                                  // online, decodes from step 2
    scheduler.Add(2, Tokens(50, 40), 1, {}, SequencePriority::kBatch);  // a long batch prompt
    Finish(scheduler, scheduler.Schedule());  // the online prompt alone (no batch prefill beside an online prompt)
    StepPlan plan = scheduler.Schedule();     // the online sequence decodes: the batch prompt gets the cap
    const int64_t first = cap;
    std::vector<Chunk> expected = {{1, 4, 1, true}};
    if (first > 0) expected.push_back({2, 0, first, false});
    EXPECT_EQ(ChunksOf(plan), expected);
    Finish(scheduler, plan);
    scheduler.Finish(1);  // online traffic ends: the batch prompt takes the whole budget left
    plan = scheduler.Schedule();
    EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{2, first, 40 - first, true}})) << "no cap without online";
    Finish(scheduler, plan);
  }
}

TEST(Scheduler, AWaitingOnlineRequestIsAdmittedBeforeWaitingBatchRequests) {
  auto memory = Memory(64, 1);  // one slot: admission order is visible
  Scheduler scheduler(*memory, {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 4), 0, {}, SequencePriority::kBatch);
  scheduler.Add(2, Tokens(0, 4), 1);  // online, newer
  const StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{2}));
  EXPECT_EQ(scheduler.Get(1).status, SequenceStatus::kWaiting);
  Finish(scheduler, plan);
}

TEST(Scheduler, ABatchSequenceYieldsItsSlotToAnOnlineRequest) {
  auto memory = Memory(64, 2);
  Scheduler scheduler(*memory, {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 4), 0, {}, SequencePriority::kBatch);
  scheduler.Add(2, Tokens(0, 4), 1, {}, SequencePriority::kBatch);
  Finish(scheduler, scheduler.Schedule());  // both slots taken by the batch
  scheduler.Add(3, Tokens(50, 6), 2);       // online
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{2})) << "the newest batch sequence gives up its slot";
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{3}));
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{3, 0, 6, true}, {1, 4, 1, true}}));
  Finish(scheduler, plan);
  // Online sequences never yield: with the slots held by one online and one batch sequence, a second online
  // request takes the batch one's slot, and a third waits.
  scheduler.Add(4, Tokens(60, 3), 3);
  plan = scheduler.Schedule();
  EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{1}));
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{4}));
  Finish(scheduler, plan);
  scheduler.Add(5, Tokens(70, 3), 4);
  plan = scheduler.Schedule();
  EXPECT_TRUE(plan.preempted.empty());
  EXPECT_EQ(scheduler.Get(5).status, SequenceStatus::kWaiting);
  Finish(scheduler, plan);
}

TEST(Scheduler, MemoryPressurePreemptsBatchSequencesBeforeOnlineOnes) {
  auto memory = Memory(5, 3);
  Scheduler scheduler(*memory, {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 8), 0, {}, SequencePriority::kBatch);  // older, but batch
  Finish(scheduler, scheduler.Schedule());                          // 2 blocks
  scheduler.Add(2, Tokens(0, 8), 1);                                // online
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{2}));
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{2, 0, 8, true}, {1, 8, 1, true}}));
  Finish(scheduler, plan);
  plan = scheduler.Schedule();  // no free block for two growing sequences: the batch one goes
  EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{1}));
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{2, 8, 1, true}}));
  Finish(scheduler, plan);
}

TEST(Scheduler, APrefillChunkShrinksToTheFreeBlocks) {
  auto memory = Memory(4, 2);
  Scheduler scheduler(*memory, {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 6), 0);
  Finish(scheduler, scheduler.Schedule());  // 2 blocks
  scheduler.Add(2, Tokens(0, 30), 1);
  const StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 6, 1, true}, {2, 0, 8, false}}));
  Finish(scheduler, plan);
}

TEST(Scheduler, ChildrenForkWhenTheParentHasComputedItsPrompt) {
  auto memory = Memory(16, 3);
  Scheduler scheduler(*memory, {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 6), 0);
  scheduler.AddChild(2, 1, 0);
  scheduler.AddChild(3, 1, 0);
  EXPECT_EQ(scheduler.Children(1), (std::vector<SequenceId>{2, 3}));
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 0, 6, true}}));  // children are not scheduled
  scheduler.Complete(plan);
  EXPECT_TRUE(scheduler.Fork(2));
  EXPECT_TRUE(scheduler.Fork(3));
  EXPECT_EQ(memory->BlockTable(2), (Ids{0, 2}));
  EXPECT_EQ(memory->BlockTable(3), (Ids{0, 3}));
  EXPECT_EQ(memory->block_pool().ref_count(0), 3);
  for (SequenceId id : {1, 2, 3}) scheduler.AppendToken(id, static_cast<int32_t>(200 + id));
  ASSERT_OK(scheduler.CheckIntegrity());
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 6, 1, true}, {2, 6, 1, true}, {3, 6, 1, true}}));
  Finish(scheduler, plan);
}

TEST(Scheduler, AChildWithoutMemoryComputesItsOwnPrompt) {
  auto memory = Memory(16, 1);
  Scheduler scheduler(*memory, {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 6), 0);
  scheduler.AddChild(2, 1, 0);
  StepPlan plan = scheduler.Schedule();
  scheduler.Complete(plan);
  EXPECT_FALSE(scheduler.Fork(2));  // the only slot is the parent's
  EXPECT_EQ(scheduler.Get(2).status, SequenceStatus::kWaiting);
  scheduler.AppendToken(1, 201);
  ASSERT_OK(scheduler.CheckIntegrity());
  scheduler.Finish(1);
  plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{2, 0, 6, true}}));
  Finish(scheduler, plan);
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

TEST(Scheduler, TheWatermarkKeepsRoomForRunningSequencesOnly) {
  {
    auto memory = Memory(6, 2);
    Scheduler scheduler(*memory, {.max_batch_tokens = 64, .watermark_blocks = 2});
    scheduler.Add(1, Tokens(0, 23), 0);
    const StepPlan plan = scheduler.Schedule();  // nothing runs: all 6 blocks may be used at once
    EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 0, 23, true}}));
    Finish(scheduler, plan);
  }
  auto memory = Memory(8, 2);
  Scheduler scheduler(*memory, {.max_batch_tokens = 64, .watermark_blocks = 2});
  scheduler.Add(1, Tokens(0, 23), 0);
  Finish(scheduler, scheduler.Schedule());
  scheduler.Add(2, Tokens(0, 3), 1);
  const StepPlan plan = scheduler.Schedule();  // 2 blocks free, both kept for 1 to grow into
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 23, 1, true}}));
  EXPECT_EQ(scheduler.Get(2).status, SequenceStatus::kWaiting);
  Finish(scheduler, plan);
}

// Speculative decoding: a decode with a draft computes one more position (budget and blocks included); an accepted
// draft advances the sequence by two positions, a rejected one by one; without room in the budget the decode runs
// alone and the draft waits.
TEST(Scheduler, DraftsRideAlongWithDecodesWhenThereIsRoom) {
  auto memory = Memory(8, 4);
  Scheduler scheduler(*memory, {.max_batch_tokens = 16});
  scheduler.Add(1, Tokens(0, 7), 0);
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(ChunksOf(plan), (std::vector<Chunk>{{1, 0, 7, true}}));
  Finish(scheduler, plan);  // positions 0..6 computed, token 101 appended
  scheduler.SetDrafts(1, 1);
  plan = scheduler.Schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].count, 1);
  EXPECT_EQ(plan.chunks[0].draft, 1);
  EXPECT_EQ(plan.tokens, 2);
  EXPECT_EQ(memory->BlockTable(1), (Ids{0, 1, 2}));  // positions 7 and 8: the draft's block is reserved too
  plan.chunks[0].accepted = 1;
  scheduler.AppendToken(1, 55);  // the draft, kept
  scheduler.SetDrafts(1, 0);
  Finish(scheduler, plan);  // and the bonus token
  EXPECT_EQ(scheduler.Get(1).computed, 9);
  EXPECT_EQ(scheduler.Get(1).tokens.size(), 10u);
  scheduler.SetDrafts(1, 1);  // rejected: one position
  plan = scheduler.Schedule();
  EXPECT_EQ(plan.chunks[0].draft, 1);
  scheduler.SetDrafts(1, 0);
  Finish(scheduler, plan);
  EXPECT_EQ(scheduler.Get(1).computed, 10);
  // No room in the budget: the decode runs alone and the draft stays for a later step.
  auto tight_memory = Memory(8, 4);
  Scheduler tight(*tight_memory, {.max_batch_tokens = 1});
  tight.Add(2, Tokens(0, 3), 0);
  plan = tight.Schedule();
  Finish(tight, plan);
  tight.SetDrafts(2, 1);
  plan = tight.Schedule();
  EXPECT_EQ(plan.chunks[0].draft, 0);
  EXPECT_EQ(plan.tokens, 1);
  tight.SetDrafts(2, 0);
  Finish(tight, plan);
}

// --speculative-tokens K: a decode verifies as many of its drafts as budget and blocks allow (the first ones), and
// advances by 1 + the accepted ones.
TEST(Scheduler, SeveralDraftsRideAlongAsFarAsThereIsRoom) {
  auto memory = Memory(8, 4);
  Scheduler scheduler(*memory, {.max_batch_tokens = 16});
  scheduler.Add(1, Tokens(0, 7), 0);
  StepPlan plan = scheduler.Schedule();
  Finish(scheduler, plan);  // positions 0..6 computed
  scheduler.SetDrafts(1, 3);
  plan = scheduler.Schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].draft, 3);
  EXPECT_EQ(plan.tokens, 4);
  EXPECT_EQ(memory->BlockTable(1), (Ids{0, 1, 2}));  // positions 7..10
  plan.chunks[0].accepted = 2;
  scheduler.AppendToken(1, 55);
  scheduler.AppendToken(1, 56);
  scheduler.SetDrafts(1, 0);
  Finish(scheduler, plan);  // and the token replacing the third draft
  EXPECT_EQ(scheduler.Get(1).computed, 10);
  // A budget of 3: the decode and its first two drafts.
  auto tight_memory = Memory(8, 4);
  Scheduler tight(*tight_memory, {.max_batch_tokens = 3});
  tight.Add(2, Tokens(0, 3), 0);
  plan = tight.Schedule();
  Finish(tight, plan);
  tight.SetDrafts(2, 4);
  plan = tight.Schedule();
  EXPECT_EQ(plan.chunks[0].draft, 2);
  EXPECT_EQ(plan.tokens, 3);
  tight.SetDrafts(2, 0);
  Finish(tight, plan);
}

// A draft never preempts anyone (it is dropped when its position has no block), and preemption drops it.
TEST(Scheduler, ADraftNeverPreemptsAndPreemptionDropsIt) {
  auto memory = Memory(4, 4);
  Scheduler scheduler(*memory, {.max_batch_tokens = 16});
  scheduler.Add(1, Tokens(0, 7), 0);
  scheduler.Add(2, Tokens(0, 7), 1);
  StepPlan plan = scheduler.Schedule();
  Finish(scheduler, plan);  // blocks {0, 1} and {2, 3}: positions 0..7 each, none free
  scheduler.SetDrafts(2, 1);
  plan = scheduler.Schedule();
  // 2's decode at 7 fits its block; its draft at 8 would need a fifth block: dropped, nobody preempted.
  EXPECT_TRUE(plan.preempted.empty());
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[1].id, 2);
  EXPECT_EQ(plan.chunks[1].draft, 0);
  Finish(scheduler, plan);
  EXPECT_EQ(scheduler.Get(2).drafts, 1);  // still waiting for room
  // 1's decode at 8 needs a block: the newest (2) is preempted, and its draft goes with its memory.
  plan = scheduler.Schedule();
  EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{2}));
  EXPECT_EQ(scheduler.Get(2).drafts, 0);
  Finish(scheduler, plan);
}

// ---- several cache partitions (--dp-attention: one per rank, docs/distributed.md "Attention data-parallel"): which
// partition a new sequence goes to (the most free memory, ties to the lowest; a prefix hit's partition when it has
// room), against a simple reference over random states; preemption in the partition that is short; forks in the
// parent's partition; and a partition whose memory another rank holds. ----

struct Partitions {
  std::vector<std::unique_ptr<CacheManager>> owned;
  std::vector<CacheManager*> pointers() const {
    std::vector<CacheManager*> all;
    for (const auto& p : owned) all.push_back(p.get());
    return all;
  }
  CacheManager& operator[](size_t p) const { return *owned[p]; }
};

Partitions Make(const std::vector<CacheManagerOptions>& options) {
  Partitions partitions;
  for (const CacheManagerOptions& o : options) partitions.owned.push_back(CacheManager::Create(o).value());
  return partitions;
}

// Puts `tokens` into the partition's prefix cache (blocks and checkpoints), as a sequence that ran and ended.
void Cache(CacheManager& memory, std::span<const int32_t> tokens) {
  constexpr SequenceId kVisitor = 1'000'000;
  const int64_t n = static_cast<int64_t>(tokens.size());
  ASSERT_TRUE(memory.Admit(kVisitor, tokens, PrefixMatch{}, n));
  memory.TakeCheckpoints(kVisitor, tokens, n);
  memory.Commit(kVisitor, tokens, n);
  memory.Free(kVisitor);
}

TEST(PartitionScheduler, NewSequencesGoWhereTheMostMemoryIsFreeTiesToTheLowest) {
  const Partitions p = Make({MemoryOptions(16, 4), MemoryOptions(16, 4)});
  Scheduler scheduler(p.pointers(), {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 8), 0);  // tie: partition 0, its blocks 0 1
  scheduler.Add(2, Tokens(0, 8), 1);  // partition 1 has more free: its blocks 0 1
  scheduler.Add(3, Tokens(0, 4), 2);  // tie again: partition 0, block 2
  const StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{1, 2, 3}));
  EXPECT_EQ(scheduler.Get(1).partition, 0);
  EXPECT_EQ(scheduler.Get(2).partition, 1);
  EXPECT_EQ(scheduler.Get(3).partition, 0);
  EXPECT_EQ(p[0].BlockTable(1), (Ids{0, 1}));
  EXPECT_EQ(p[1].BlockTable(2), (Ids{0, 1}));
  EXPECT_EQ(p[0].BlockTable(3), (Ids{2}));
  EXPECT_FALSE(p[1].IsLive(1));
  Finish(scheduler, plan);
  for (SequenceId id : {1, 2, 3}) scheduler.Finish(id);
  ASSERT_OK(scheduler.CheckIntegrity());
  for (int i = 0; i < 2; ++i) EXPECT_EQ(p[i].Stats().slots_used + p[i].Stats().blocks_used, 0);
}

TEST(PartitionScheduler, APrefixHitGoesToItsPartitionWhenThatHasRoomElseItMisses) {
  // Partition 1 is larger (more free memory), partition 0 holds the cached prefix and one slot.
  const Partitions p = Make({MemoryOptions(16, 1, true, 8), MemoryOptions(32, 2, true, 8)});
  Scheduler scheduler(p.pointers(), {.max_batch_tokens = 64});
  Cache(p[0], Tokens(0, 20));
  std::vector<int32_t> shared = Tokens(0, 18);
  shared.push_back(77);
  scheduler.Add(1, shared, 0);
  scheduler.Add(2, Tokens(500, 10), 1);  // no hit anywhere: the most free memory
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{1, 2}));
  EXPECT_EQ(scheduler.Get(1).partition, 0);
  EXPECT_EQ(scheduler.Get(1).prefix_hit_tokens, 16);  // the last checkpoint at or before 18
  EXPECT_EQ(scheduler.Get(2).partition, 1);
  Finish(scheduler, plan);
  // Partition 0's only slot is taken: the next prompt with the cached prefix goes to partition 1 and misses.
  scheduler.Add(3, shared, 2);
  plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{3}));
  EXPECT_EQ(scheduler.Get(3).partition, 1);
  EXPECT_EQ(scheduler.Get(3).prefix_hit_tokens, 0);
  Finish(scheduler, plan);
}

TEST(PartitionScheduler, PreemptionFreesTheNewestSequenceOfThePartitionThatIsShort) {
  const Partitions p = Make({MemoryOptions(2, 2), MemoryOptions(2, 2)});
  Scheduler scheduler(p.pointers(), {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 8), 0);  // partition 0 (tie), both its blocks
  scheduler.Add(2, Tokens(0, 4), 1);  // partition 1
  scheduler.Add(3, Tokens(0, 3), 2);  // partition 0 has no block left: partition 1
  StepPlan plan = scheduler.Schedule();
  EXPECT_EQ(plan.admitted, (std::vector<SequenceId>{1, 2, 3}));
  EXPECT_EQ(scheduler.Get(3).partition, 1);
  Finish(scheduler, plan);
  // 1 needs a block that partition 0 lacks: the newest there is 1 itself (3, newer, is in partition 1 and freeing
  // it would not help). 2 then needs one in partition 1: 3 goes.
  plan = scheduler.Schedule();
  EXPECT_EQ(plan.preempted, (std::vector<SequenceId>{1, 3}));
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].id, 2);
  EXPECT_EQ(p[1].BlockTable(2), (Ids{0, 1}));
  Finish(scheduler, plan);
  EXPECT_EQ(p[0].Stats().slots_used, 0);
  EXPECT_EQ(p[1].Stats().slots_used, 1);
}

TEST(PartitionScheduler, ChildrenForkInTheirParentsPartition) {
  const Partitions p = Make({MemoryOptions(16, 3), MemoryOptions(16, 3)});
  Scheduler scheduler(p.pointers(), {.max_batch_tokens = 64});
  scheduler.Add(5, Tokens(0, 4), 0);  // partition 0
  scheduler.Add(1, Tokens(0, 6), 1);  // partition 1
  scheduler.AddChild(2, 1, 1);
  const StepPlan plan = scheduler.Schedule();
  scheduler.Complete(plan);
  EXPECT_EQ(scheduler.Get(1).partition, 1);
  EXPECT_TRUE(scheduler.Fork(2));
  EXPECT_EQ(scheduler.Get(2).partition, 1);
  EXPECT_EQ(p[1].BlockTable(2), (Ids{0, 2}));  // shares the full block, copies the partial one
  EXPECT_EQ(p[1].block_pool().ref_count(0), 2);
  for (SequenceId id : {5, 1, 2}) scheduler.AppendToken(id, 9);
  ASSERT_OK(scheduler.CheckIntegrity());
}

// The rule, written out plainly: among partitions with a free slot and at least one spare block (past the blocks
// a hit would take back from the free queue and, when some sequence runs there, the watermark), the longest prefix
// hit (ties: lowest), else the most free bytes (ties: lowest).
int ReferencePartition(const Partitions& p, const Scheduler& scheduler, const std::vector<SequenceId>& ids,
                       std::span<const int32_t> keys, int64_t watermark) {
  int best = -1;
  std::tuple<int64_t, int64_t, int> best_key;
  for (int i = 0; i < static_cast<int>(p.owned.size()); ++i) {
    const CacheManager& memory = p[i];
    if (memory.slot_pool().num_free() == 0) continue;
    const PrefixMatch match = memory.FindPrefix(keys);
    int64_t spare = memory.block_pool().num_free();
    for (int32_t block : match.blocks) spare -= memory.block_pool().ref_count(block) == 0 ? 1 : 0;
    const bool running_here = std::any_of(ids.begin(), ids.end(), [&](SequenceId id) {
      return scheduler.Contains(id) && scheduler.Get(id).status == SequenceStatus::kRunning &&
             scheduler.Get(id).partition == i;
    });
    if (running_here) spare -= watermark;
    if (spare < 1) continue;
    const int64_t free = memory.slot_pool().num_free() * 128 + memory.block_pool().num_free() * 64;
    const std::tuple<int64_t, int64_t, int> key{match.tokens, match.tokens > 0 ? 0 : free, -i};
    if (best < 0 || key > best_key) best = i, best_key = key;
  }
  return best;
}

TEST(PartitionScheduler, ThePartitionChosenMatchesASimpleReference) {
  std::mt19937 random(20261205);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<CacheManagerOptions> options;
    const int partitions = 2 + trial % 3;
    for (int i = 0; i < partitions; ++i) {
      options.push_back(MemoryOptions(std::uniform_int_distribution<int64_t>(6, 24)(random),
                                      std::uniform_int_distribution<int64_t>(1, 3)(random), true, 8));
    }
    const Partitions p = Make(options);
    constexpr int64_t kWatermark = 1;
    Scheduler scheduler(p.pointers(), {.max_batch_tokens = 24, .watermark_blocks = kWatermark});
    // Prompts from 3 shared starts of 16 tokens and their own tails, so that hits happen in some partitions.
    const auto prompt = [&] {
      std::vector<int32_t> tokens = Tokens(1000 * std::uniform_int_distribution<int>(0, 2)(random), 16);
      const int tail = std::uniform_int_distribution<int>(1, 12)(random);
      for (int t = 0; t < tail; ++t) tokens.push_back(std::uniform_int_distribution<int32_t>(0, 50)(random));
      return tokens;
    };
    std::vector<SequenceId> ids;
    for (int step = 0; step < 30; ++step) {
      for (int probe = 0; probe < 4; ++probe) {
        const std::vector<int32_t> keys = prompt();
        PrefixMatch match;
        ASSERT_EQ(scheduler.ChoosePartition(keys, 24, match), ReferencePartition(p, scheduler, ids, keys, kWatermark))
            << "trial " << trial << " step " << step;
      }
      if (std::bernoulli_distribution(0.6)(random)) {
        ids.push_back(static_cast<SequenceId>(ids.size()));
        scheduler.Add(ids.back(), prompt(), ids.back());
      }
      Finish(scheduler, scheduler.Schedule());
      for (SequenceId id : ids) {  // some end (their blocks stay cached in their partition)
        if (scheduler.Contains(id) && std::bernoulli_distribution(0.15)(random)) scheduler.Finish(id);
      }
      ASSERT_OK(scheduler.CheckIntegrity());
    }
  }
}

// Records what a partition tells its mirror.
class RecordingMirror final : public MemoryMirror {
 public:
  void OnCopy(std::byte* destination, const std::byte* source, int64_t bytes) override {
    copies.push_back({destination, source, bytes});
  }
  void OnZero(std::byte* destination, int64_t bytes) override { zeros.push_back({destination, nullptr, bytes}); }
  std::vector<std::tuple<std::byte*, const std::byte*, int64_t>> copies, zeros;
};

TEST(PartitionScheduler, APartitionAnotherRankHoldsIsBookedAndOnlyToldToTheMirror) {
  CacheManagerOptions o = MemoryOptions(8, 2, true);
  o.backed = false;  // address space only: touching it would fault
  auto memory = CacheManager::Create(o).value();
  EXPECT_FALSE(memory->block_arena().backed());
  EXPECT_FALSE(memory->slot_arena().backed());
  RecordingMirror mirror;
  memory->set_mirror(&mirror);
  Scheduler scheduler(*memory, {.max_batch_tokens = 64});
  scheduler.Add(1, Tokens(0, 6), 0);
  scheduler.AddChild(2, 1, 0);
  const StepPlan plan = scheduler.Schedule();
  ASSERT_EQ(mirror.zeros.size(), 1u);  // the new slot's clear, for its owner to make
  EXPECT_EQ(std::get<0>(mirror.zeros[0]), memory->Slot(1));
  scheduler.Complete(plan);
  ASSERT_TRUE(scheduler.Fork(2));
  ASSERT_EQ(mirror.copies.size(), 2u);  // the partial block and the slot
  EXPECT_EQ(std::get<0>(mirror.copies[1]), memory->Slot(2));
  EXPECT_EQ(std::get<1>(mirror.copies[1]), memory->Slot(1));
}

}  // namespace
}  // namespace glint
