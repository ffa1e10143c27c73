// The memory layer without a model: exact block ids, reference counts, eviction order, checkpoints, forks, and
// the integrity check after every operation (tests/unit, tier 4 of docs/design.md §5).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "base/aligned_buffer.h"
#include "memory/block_pool.h"
#include "memory/cache_manager.h"
#include "memory/checkpoint_pool.h"
#include "memory/item_arena.h"
#include "memory/slot_pool.h"
#include "test_util.h"

namespace glint {
namespace {

using Ids = std::vector<int32_t>;

std::vector<int32_t> Tokens(int32_t first, int64_t count) {
  std::vector<int32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(ItemArena, FixedIsAlignedZeroedAndChecked) {
  ASSERT_OK_AND_ASSIGN(ItemArena arena, ItemArena::Fixed(3, 128));
  EXPECT_EQ(arena.count(), 3);
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.Item(i)) % kItemAlignment, 0u);
    for (int b = 0; b < 128; ++b) EXPECT_EQ(arena.Item(i)[b], std::byte{0});
  }
  EXPECT_EQ(arena.Item(1) - arena.Item(0), 128);
  EXPECT_ERROR_CONTAINS(ItemArena::Fixed(3, 100), "not a positive multiple of 64");
  EXPECT_ERROR_CONTAINS(ItemArena::Fixed(-1, 64), "outside");
}

// A pool of 2 MiB or more starts on a 2 MiB boundary (huge-page advice: KDA states and latents streamed every step),
// zeroed to its end like a small one.
TEST(ItemArena, LargePoolsStartOnHugePageBoundaries) {
  const int64_t item_bytes = 64 * 1024;
  ASSERT_OK_AND_ASSIGN(ItemArena arena, ItemArena::Fixed(40, item_bytes));  // 2.5 MiB
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.Item(0)) % AlignedBuffer::kHugePage, 0u);
  EXPECT_EQ(arena.Item(39) - arena.Item(0), 39 * item_bytes);
  for (int64_t b = 0; b < item_bytes; b += 61) ASSERT_EQ(arena.Item(39)[b], std::byte{0}) << b;
}

TEST(ItemArena, GrowableItemsDoNotMove) {
  ASSERT_OK_AND_ASSIGN(ItemArena arena, ItemArena::Growable(64));
  EXPECT_EQ(arena.Append(), 0);
  std::byte* first = arena.Item(0);
  for (int i = 1; i < 50; ++i) EXPECT_EQ(arena.Append(), i);
  EXPECT_EQ(arena.Item(0), first);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.Item(49)) % kItemAlignment, 0u);
}

TEST(BlockPool, AllocatesInOrderAndRefusesWithoutChange) {
  BlockPool pool(4, 2);
  EXPECT_EQ(pool.Allocate(3), (std::optional<Ids>{Ids{0, 1, 2}}));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.Allocate(2), std::nullopt);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.FreeQueue(), Ids{3});
  EXPECT_OK(pool.CheckIntegrity());
}

TEST(BlockPool, UncachedGoToTheHeadCachedToTheTail) {
  BlockPool pool(5, 2);
  const Ids blocks = *pool.Allocate(4);  // 0 1 2 3; queue: 4
  ASSERT_TRUE(pool.Register(1, 11, kRootBlockHash, std::vector<int32_t>{1, 2}));
  ASSERT_TRUE(pool.Register(2, 22, 11, std::vector<int32_t>{3, 4}));
  for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) pool.Release(*block);  // 3 2 1 0
  // 3 (uncached) → head; 2 (cached) → tail; 1 (cached) → tail; 0 (uncached) → head.
  EXPECT_EQ(pool.FreeQueue(), (Ids{0, 3, 4, 2, 1}));
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_OK(pool.CheckIntegrity(std::vector<int32_t>(5, 0)));
  // The three uncached blocks go first; the fourth allocation evicts the least recently released cached block.
  std::vector<BlockHash> evicted;
  pool.set_eviction_listener(
      [&](int32_t, BlockHash hash, BlockHash, std::span<const int32_t>) { evicted.push_back(hash); });
  EXPECT_EQ(pool.Allocate(3), (std::optional<Ids>{Ids{0, 3, 4}}));
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(pool.Allocate(1), (std::optional<Ids>{Ids{2}}));
  EXPECT_EQ(evicted, std::vector<BlockHash>{22});
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_FALSE(pool.Lookup(22, 11, std::vector<int32_t>{3, 4}).has_value());
  EXPECT_EQ(pool.Lookup(11, kRootBlockHash, std::vector<int32_t>{1, 2}), std::optional<int32_t>(1));
  EXPECT_OK(pool.CheckIntegrity());
}

TEST(BlockPool, AcquireTakesACachedBlockOutOfTheFreeQueue) {
  BlockPool pool(3, 2);
  const Ids blocks = *pool.Allocate(1);
  ASSERT_TRUE(pool.Register(blocks[0], 7, kRootBlockHash, std::vector<int32_t>{5, 6}));
  pool.Release(blocks[0]);
  EXPECT_EQ(pool.FreeQueue(), (Ids{1, 2, 0}));
  pool.Acquire(0);
  pool.Acquire(0);
  EXPECT_EQ(pool.ref_count(0), 2);
  EXPECT_EQ(pool.FreeQueue(), (Ids{1, 2}));
  pool.Release(0);
  EXPECT_EQ(pool.FreeQueue(), (Ids{1, 2}));
  pool.Release(0);
  EXPECT_EQ(pool.FreeQueue(), (Ids{1, 2, 0}));
  EXPECT_OK(pool.CheckIntegrity());
}

TEST(BlockPool, LookupVerifiesTheKeyAndRegisterKeepsTheFirstCopy) {
  BlockPool pool(3, 2);
  const Ids blocks = *pool.Allocate(2);
  ASSERT_TRUE(pool.Register(blocks[0], 99, kRootBlockHash, std::vector<int32_t>{1, 2}));
  // A colliding hash with other tokens or another parent is not a hit.
  EXPECT_FALSE(pool.Lookup(99, kRootBlockHash, std::vector<int32_t>{1, 3}).has_value());
  EXPECT_FALSE(pool.Lookup(99, 5, std::vector<int32_t>{1, 2}).has_value());
  EXPECT_FALSE(pool.Register(blocks[1], 99, kRootBlockHash, std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(pool.is_cached(blocks[1]));
  EXPECT_EQ(pool.num_cached(), 1);
  EXPECT_NE(HashBlock(kRootBlockHash, std::vector<int32_t>{1, 2}), HashBlock(1, std::vector<int32_t>{1, 2}));
  EXPECT_EQ(HashBlock(3, std::vector<int32_t>{1, 2}), HashBlock(3, std::vector<int32_t>{1, 2}));
}

TEST(BlockPool, IntegrityReportsAWrongHolderCount) {
  BlockPool pool(2, 2);
  (void)pool.Allocate(1);
  EXPECT_ERROR_CONTAINS(pool.CheckIntegrity(std::vector<int32_t>{0, 0}), "block 0 has 1 holders");
}

TEST(SlotPool, LowestFreeFirst) {
  SlotPool pool(3);
  EXPECT_EQ(pool.Allocate(), 0);
  EXPECT_EQ(pool.Allocate(), 1);
  EXPECT_EQ(pool.Allocate(), 2);
  EXPECT_EQ(pool.Allocate(), std::nullopt);
  pool.Free(1);
  pool.Free(0);
  EXPECT_EQ(pool.Allocate(), 0);
  EXPECT_EQ(pool.num_used(), 2);
}

TEST(CheckpointPool, LeastRecentlyUsedIsEvicted) {
  CheckpointPool pool(2);
  EXPECT_EQ(pool.Take(100), 0);
  EXPECT_EQ(pool.Take(200), 1);
  EXPECT_EQ(pool.Take(200), std::nullopt);  // already there
  EXPECT_EQ(pool.Find(100), 0);             // 100 becomes the most recent
  EXPECT_EQ(pool.LruOrder(), (Ids{1, 0}));
  EXPECT_EQ(pool.Take(300), 1);  // evicts 200
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_EQ(pool.Peek(200), std::nullopt);
  pool.Drop(100);
  EXPECT_EQ(pool.Take(400), 0);  // the dropped id is free again, no eviction
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_OK(pool.CheckIntegrity());
  CheckpointPool none(0);
  EXPECT_EQ(none.Take(1), std::nullopt);
}

// ---------------------------------------------------------------------------------------------------------------
// CacheManager: blocks of 4 tokens, checkpoints every 8 tokens. The "state" in a slot is a position stamp the
// test writes, so that what a checkpoint restores can be checked.

CacheManagerOptions SmallOptions(int64_t blocks, int64_t slots, int64_t checkpoints, bool prefix = true) {
  CacheManagerOptions o;
  o.block_tokens = 4;
  o.block_bytes = 64;
  o.num_blocks = blocks;
  o.slot_bytes = 128;
  o.num_slots = slots;
  o.checkpoint_bytes = 64;
  o.num_checkpoints = checkpoints;
  o.prefix_caching = prefix;
  o.checkpoint_interval = 8;
  return o;
}

void StampSlot(CacheManager& m, SequenceId id, int64_t position) {
  std::memcpy(m.Slot(id), &position, sizeof(position));
  std::memcpy(m.Slot(id) + 64, &position, sizeof(position));  // beyond the checkpoint region: not kept
}
int64_t SlotStamp(CacheManager& m, SequenceId id, int64_t offset = 0) {
  int64_t position;
  std::memcpy(&position, m.Slot(id) + offset, sizeof(position));
  return position;
}

// Computes `tokens` in chunks that end at the given positions as a model would: the state at each checkpoint
// position passed is written to its target, and the slot ends stamped with the chunk's end.
void ComputeChunks(CacheManager& m, SequenceId id, const std::vector<int32_t>& tokens,
                   const std::vector<int64_t>& ends) {
  for (int64_t end : ends) {
    ASSERT_TRUE(m.Reserve(id, end));
    for (const CheckpointTarget& target : m.TakeCheckpoints(id, tokens, end)) {
      std::memcpy(target.data, &target.position, sizeof(target.position));
    }
    StampSlot(m, id, end);
    m.Commit(id, tokens, end);
    ASSERT_OK(m.CheckIntegrity());
  }
}

TEST(CacheManager, RefusesInconsistentOptions) {
  CacheManagerOptions o = SmallOptions(4, 1, 1);
  o.checkpoint_interval = 6;
  EXPECT_ERROR_CONTAINS(CacheManager::Create(o), "multiple of the block size");
  o = SmallOptions(4, 1, 0);
  EXPECT_ERROR_CONTAINS(CacheManager::Create(o), "needs at least one state checkpoint");
  o = SmallOptions(4, 1, 1);
  o.slot_bytes = 100;
  EXPECT_ERROR_CONTAINS(CacheManager::Create(o), "slot size 100");
  // Ids are int32: a larger pool is refused before any pool is built (docs/long-context.md).
  o = SmallOptions(4, 1, 1);
  o.num_blocks = kMaxItemsPerPool + 1;
  EXPECT_ERROR_CONTAINS(CacheManager::Create(o), "at most 2^31 − 1 items");
}

TEST(CacheManager, AdmitReserveFreeWithoutPrefixCaching) {
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(SmallOptions(6, 2, 0, /*prefix=*/false)));
  const std::vector<int32_t> tokens = Tokens(0, 10);
  EXPECT_EQ(m->FindPrefix(tokens).tokens, 0);
  ASSERT_TRUE(m->Admit(1, tokens, {}, 6));
  EXPECT_EQ(m->BlockTable(1), (Ids{0, 1}));
  EXPECT_EQ(m->SlotOf(1), 0);
  ASSERT_TRUE(m->Reserve(1, 10));
  EXPECT_EQ(m->BlockTable(1), (Ids{0, 1, 2}));
  ASSERT_TRUE(m->Admit(2, tokens, {}, 9));
  EXPECT_EQ(m->BlockTable(2), (Ids{3, 4, 5}));
  EXPECT_FALSE(m->Reserve(2, 13));  // needs a seventh block
  EXPECT_EQ(m->BlockTable(2), (Ids{3, 4, 5}));
  EXPECT_FALSE(m->CanAdmit({}, 1));  // no slot left
  ASSERT_OK(m->CheckIntegrity());
  m->Free(1);
  m->Free(2);
  const CacheStats stats = m->Stats();
  EXPECT_EQ(stats.blocks_used, 0);
  EXPECT_EQ(stats.slots_used, 0);
  EXPECT_EQ(stats.blocks_cached, 0);
  EXPECT_EQ(stats.prefix_queries, 0);
  ASSERT_OK(m->CheckIntegrity());
}

TEST(CacheManager, PrefixHitSharesBlocksAndRestoresTheDeepestCheckpoint) {
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(SmallOptions(16, 3, 4)));
  const std::vector<int32_t> a = Tokens(100, 20);
  ASSERT_TRUE(m->Admit(1, a, {}, 8));
  ComputeChunks(*m, 1, a, {8, 16, 20});
  EXPECT_EQ(m->BlockTable(1), (Ids{0, 1, 2, 3, 4}));
  CacheStats stats = m->Stats();
  EXPECT_EQ(stats.checkpoints_taken, 2);  // at 8 and 16
  EXPECT_EQ(stats.blocks_cached, 5);
  EXPECT_EQ(stats.checkpoints_missed, 0);

  // B shares 18 tokens with A: the deepest checkpoint below its length is at 16, covered by blocks 0..3.
  std::vector<int32_t> b = Tokens(100, 18);
  b.push_back(7);
  b.push_back(8);
  PrefixMatch match = m->FindPrefix(b);
  EXPECT_EQ(match.tokens, 16);
  EXPECT_EQ(match.blocks, (Ids{0, 1, 2, 3}));
  ASSERT_TRUE(m->Admit(2, b, match, 20));
  EXPECT_EQ(m->BlockTable(2), (Ids{0, 1, 2, 3, 5}));
  EXPECT_EQ(m->Committed(2), 16);
  EXPECT_EQ(SlotStamp(*m, 2), 16);     // the checkpoint's state
  EXPECT_EQ(SlotStamp(*m, 2, 64), 0);  // the rest of the slot starts empty
  for (int32_t block : {0, 1, 2, 3}) EXPECT_EQ(m->block_pool().ref_count(block), 2);
  ASSERT_OK(m->CheckIntegrity());

  // A prompt equal to A's first 16 tokens must compute at least its last token: it resumes at 8.
  const std::vector<int32_t> c = Tokens(100, 16);
  match = m->FindPrefix(c);
  EXPECT_EQ(match.tokens, 8);
  EXPECT_EQ(match.blocks, (Ids{0, 1}));
  // Unrelated tokens miss.
  EXPECT_EQ(m->FindPrefix(Tokens(0, 30)).tokens, 0);

  stats = m->Stats();
  EXPECT_EQ(stats.prefix_queries, 2);
  EXPECT_EQ(stats.prefix_hits, 1);
  EXPECT_EQ(stats.prefix_query_tokens, 40);
  EXPECT_EQ(stats.prefix_hit_tokens, 16);
  m->Free(1);
  m->Free(2);
  EXPECT_EQ(m->Stats().blocks_used, 0);
  ASSERT_OK(m->CheckIntegrity());
}

TEST(CacheManager, FinishedSequencesStayCachedUntilEvictedLeastRecentFirst) {
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(SmallOptions(6, 2, 2)));
  const std::vector<int32_t> a = Tokens(0, 9);
  ASSERT_TRUE(m->Admit(1, a, {}, 8));
  ComputeChunks(*m, 1, a, {8, 9});  // blocks 0 1 cached, block 2 partial; checkpoint at 8
  m->Free(1);                       // release 2 (head), 1, 0 (tail)
  EXPECT_EQ(m->block_pool().FreeQueue(), (Ids{2, 3, 4, 5, 1, 0}));
  EXPECT_EQ(m->FindPrefix(a).tokens, 8);
  // Another sequence takes five blocks: 2 3 4 5, then block 1 — evicting the end of A's chain, and with it the
  // checkpoint at 8 (it can no longer be reached).
  const std::vector<int32_t> other = Tokens(50, 20);
  ASSERT_TRUE(m->Admit(2, other, {}, 20));
  EXPECT_EQ(m->BlockTable(2), (Ids{2, 3, 4, 5, 1}));
  EXPECT_EQ(m->Stats().block_evictions, 1);
  EXPECT_EQ(m->Stats().checkpoints_used, 0);
  EXPECT_EQ(m->FindPrefix(a).tokens, 0);
  ASSERT_OK(m->CheckIntegrity());
}

TEST(CacheManager, CheckpointPoolIsLeastRecentlyUsed) {
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(SmallOptions(32, 2, 2)));
  const std::vector<int32_t> a = Tokens(0, 25);
  ASSERT_TRUE(m->Admit(1, a, {}, 8));
  ComputeChunks(*m, 1, a, {8, 16, 24, 25});  // three checkpoints into a pool of two: the one at 8 is evicted
  EXPECT_EQ(m->Stats().checkpoints_taken, 3);
  EXPECT_EQ(m->Stats().checkpoint_evictions, 1);
  EXPECT_EQ(m->FindPrefix(Tokens(0, 12)).tokens, 0);
  EXPECT_EQ(m->FindPrefix(Tokens(0, 17)).tokens, 16);
  EXPECT_EQ(m->FindPrefix(a).tokens, 24);
}

TEST(CacheManager, AdmissionCountsMatchedFreeBlocksAsTaken) {
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(SmallOptions(4, 2, 1)));
  const std::vector<int32_t> a = Tokens(0, 9);
  ASSERT_TRUE(m->Admit(1, a, {}, 9));
  ComputeChunks(*m, 1, a, {8, 9});
  m->Free(1);  // 3 blocks cached-or-free, one never used: all four free
  std::vector<int32_t> b = Tokens(0, 8);
  b.insert(b.end(), {90, 91, 92, 93, 94, 95, 96, 97, 98});
  const PrefixMatch match = m->FindPrefix(b);
  ASSERT_EQ(match.tokens, 8);
  // Blocks 0, 1 come from the match; 17 tokens need 5 blocks: 3 new ones, but only 2 remain once 0, 1 are taken.
  EXPECT_FALSE(m->CanAdmit(match, 17));
  EXPECT_FALSE(m->Admit(2, b, match, 17));
  EXPECT_FALSE(m->IsLive(2));
  EXPECT_TRUE(m->Admit(2, b, match, 16));
  EXPECT_EQ(m->BlockTable(2), (Ids{0, 1, 2, 3}));
  ASSERT_OK(m->CheckIntegrity());
}

TEST(CacheManager, ForkSharesFullBlocksAndCopiesThePartialOne) {
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(SmallOptions(8, 3, 2)));
  const std::vector<int32_t> a = Tokens(0, 6);
  ASSERT_TRUE(m->Admit(1, a, {}, 6));
  ComputeChunks(*m, 1, a, {6});
  std::memset(m->block_arena().Item(m->BlockTable(1)[1]), 0x5a, 64);
  ASSERT_TRUE(m->Fork(1, 2));
  EXPECT_EQ(m->BlockTable(1), (Ids{0, 1}));
  EXPECT_EQ(m->BlockTable(2), (Ids{0, 2}));
  EXPECT_EQ(m->block_pool().ref_count(0), 2);
  EXPECT_EQ(std::memcmp(m->block_arena().Item(2), m->block_arena().Item(1), 64), 0);
  EXPECT_EQ(SlotStamp(*m, 2), 6);
  EXPECT_EQ(SlotStamp(*m, 2, 64), 6);  // the whole slot is copied
  EXPECT_EQ(m->Committed(2), 6);
  ASSERT_OK(m->CheckIntegrity());
  m->Free(1);
  m->Free(2);
  EXPECT_EQ(m->Stats().blocks_used, 0);
  ASSERT_OK(m->CheckIntegrity());
}

TEST(CacheManager, CheckpointsInsideAChunkAndPinning) {
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(SmallOptions(16, 2, 1)));
  const std::vector<int32_t> a = Tokens(0, 20);
  ASSERT_TRUE(m->Admit(1, a, {}, 20));
  // Positions 8 and 16 are both in the chunk, but the pool has one checkpoint: it is pinned by the first target,
  // so the second cannot evict it while it is being written.
  const std::vector<CheckpointTarget> targets = m->TakeCheckpoints(1, a, 20);
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0].position, 8);
  EXPECT_EQ(m->FindPrefix(a).tokens, 0);  // not findable before Commit (its blocks are not cached yet either)
  m->Commit(1, a, 20);
  EXPECT_EQ(m->Stats().checkpoints_taken, 1);
  EXPECT_EQ(m->Stats().checkpoints_missed, 1);  // the one at 16
  EXPECT_EQ(m->FindPrefix(a).tokens, 8);
  ASSERT_OK(m->CheckIntegrity());
  // A sequence freed before its step completed drops the checkpoints it took (they hold nothing valid).
  const std::vector<int32_t> b = Tokens(100, 20);
  ASSERT_TRUE(m->Admit(2, b, {}, 20));
  ASSERT_EQ(m->TakeCheckpoints(2, b, 20).size(), 1u);  // evicts the unpinned checkpoint at 8 of `a`
  EXPECT_EQ(m->Stats().checkpoints_used, 1);
  m->Free(2);
  EXPECT_EQ(m->Stats().checkpoints_used, 0);
  EXPECT_EQ(m->Stats().checkpoints_taken, 1);
  ASSERT_OK(m->CheckIntegrity());
}

TEST(CacheManager, SteppingOverACheckpointPositionIsCounted) {
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(SmallOptions(8, 1, 2)));
  const std::vector<int32_t> a = Tokens(0, 12);
  ASSERT_TRUE(m->Admit(1, a, {}, 12));
  m->Commit(1, a, 12);  // passed 8 without a checkpoint target
  EXPECT_EQ(m->Stats().checkpoints_missed, 1);
  EXPECT_EQ(m->Stats().checkpoints_taken, 0);
}

// Speculative decoding's MTP cache: a block's last row depends on the token after the block, so with
// key_next_token that token is part of the block's key. A block is cached only once it is known; a prompt that
// continues differently after a cached block does not reuse it; checkpoints whose key is not known yet are left
// for a later TakeCheckpoints.
TEST(CacheManager, KeyNextTokenKeysBlocksWithTheTokenAfterThem) {
  CacheManagerOptions options = SmallOptions(16, 3, 4);
  options.key_next_token = true;
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(options));
  std::vector<int32_t> a = Tokens(0, 8);  // exactly two blocks, nothing after them yet
  ASSERT_TRUE(m->Admit(1, a, {}, 8));
  EXPECT_TRUE(m->TakeCheckpoints(1, a, 8).empty());  // the key of position 8 needs token 8
  a.push_back(50);                                   // the sampled token
  const std::vector<CheckpointTarget> late = m->TakeCheckpoints(1, a, 8);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].position, 8);
  std::memcpy(late[0].data, &late[0].position, sizeof(late[0].position));
  m->Commit(1, a, 8);
  EXPECT_EQ(m->Stats().blocks_cached, 2);
  EXPECT_EQ(m->Stats().checkpoints_missed, 0);
  ASSERT_OK(m->CheckIntegrity());
  // The same eight tokens, then 50: the whole match (both blocks and the checkpoint at 8).
  std::vector<int32_t> same = a;
  same.push_back(60);
  EXPECT_EQ(m->FindPrefix(same).tokens, 8);
  // Then another token: the second block's key differs (its last MTP row would be wrong), so only the first block
  // is reusable, and without a checkpoint there (interval 8) nothing is.
  std::vector<int32_t> other(a.begin(), a.begin() + 8);
  other.push_back(51);
  other.push_back(60);
  EXPECT_EQ(m->FindPrefix(other).tokens, 0);
  // Fork: the child gets its own copy of the block holding the parent's last position even though it is full,
  // and keys it (and its checkpoint) with its own next token.
  ASSERT_TRUE(m->Fork(1, 2));
  EXPECT_EQ(m->BlockTable(2)[0], m->BlockTable(1)[0]);
  EXPECT_NE(m->BlockTable(2)[1], m->BlockTable(1)[1]);
  other.pop_back();
  const std::vector<CheckpointTarget> child = m->TakeCheckpoints(2, other, 8);
  ASSERT_EQ(child.size(), 1u);
  std::memcpy(child[0].data, &child[0].position, sizeof(child[0].position));
  m->Commit(2, other, 8);
  ASSERT_OK(m->CheckIntegrity());
  other.push_back(60);
  EXPECT_EQ(m->FindPrefix(other).tokens, 8);  // now the child's block and checkpoint serve this prompt
  const PrefixMatch match = m->FindPrefix(other);
  EXPECT_EQ(match.blocks, (Ids{m->BlockTable(2)[0], m->BlockTable(2)[1]}));
  m->Free(1);
  m->Free(2);
  EXPECT_EQ(m->Stats().blocks_used, 0);
  ASSERT_OK(m->CheckIntegrity());
}

}  // namespace
}  // namespace glint
