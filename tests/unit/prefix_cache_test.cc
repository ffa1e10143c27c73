// The prefix cache's checkpoint budget, spacing policy and disk tier without a model (docs/engine.md "Checkpoint
// spacing", "Disk tier"): the policy's properties checked exhaustively, which checkpoints a cache manager demotes
// and evicts, the capacity plan's checkpoint budget, and the disk tier's files — round trips, damaged, truncated
// and foreign files as misses, the size budget, directory errors, and a prefix read back into memory.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "cache_manager_test_util.h"
#include "engine/capacity.h"
#include "engine/prefix_disk.h"
#include "io/config.h"
#include "memory/cache_manager.h"
#include "memory/checkpoint_policy.h"
#include "memory/disk_tier.h"
#include "test_util.h"

namespace glint {
namespace {

using Ids = std::vector<int32_t>;

// ---------------------------------------------------------------------------------------------------------------
// The tail policy (memory/checkpoint_policy.h), by brute force over every frontier up to 600 intervals.

TEST(TailPolicy, KeepsTheDenseNewestAndIsMonotone) {
  for (int64_t dense : {1, 2, 4, 8}) {
    for (int64_t newest = 1; newest <= 600; ++newest) {
      for (int64_t index = 1; index <= newest; ++index) {
        const bool kept = TailPolicyKeeps(index, newest, dense);
        if (newest - index < dense) {
          EXPECT_TRUE(kept) << index << " behind " << newest;
        }
        // Once dropped, never kept again as the frontier advances (the cache manager demotes each at most once).
        if (index < newest && !TailPolicyKeeps(index, newest - 1, dense)) {
          EXPECT_FALSE(kept) << index << " came back at " << newest << " (dense " << dense << ")";
        }
      }
    }
  }
}

TEST(TailPolicy, KeepsLogarithmicallyManyAndBoundsTheRecompute) {
  EXPECT_EQ(TailPolicyKeptCount(352, 4), 25);   // 90K tokens at interval 256
  EXPECT_EQ(TailPolicyKeptCount(4096, 4), 40);  // 1M tokens
  for (int64_t dense : {1, 2, 4, 8}) {
    for (int64_t newest = 1; newest <= 600; ++newest) {
      const double levels = std::log2(static_cast<double>(newest) / dense + 1) + 1;
      EXPECT_LE(TailPolicyKeptCount(newest, dense), dense * levels) << newest;
      // A prompt leaving the chain at interval q resumes at the deepest kept checkpoint ≤ q (0: from scratch) and
      // recomputes fewer than 2 · ((newest − q) / dense + 1) intervals.
      int64_t deepest = 0;
      for (int64_t q = 1; q <= newest; ++q) {
        if (TailPolicyKeeps(q, newest, dense)) deepest = q;
        EXPECT_LT(q - deepest, 2 * ((newest - q) / dense + 1)) << "q " << q << " newest " << newest;
      }
    }
  }
}

TEST(TailPolicy, Names) {
  EXPECT_EQ(ParseCheckpointPolicy("tail").value(), CheckpointPolicy::kTail);
  EXPECT_EQ(ParseCheckpointPolicy("uniform").value(), CheckpointPolicy::kUniform);
  EXPECT_ERROR_CONTAINS(ParseCheckpointPolicy("lru"), "expected tail or uniform");
}

// ---------------------------------------------------------------------------------------------------------------
// CacheManager: blocks of 4 tokens, a checkpoint every 8 (as memory_test.cc); checkpoints hold their position.

std::vector<int32_t> Tokens(int32_t first, int64_t count) {
  std::vector<int32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

CacheManagerOptions Options(int64_t blocks, int64_t checkpoints, CheckpointPolicy policy, int64_t dense = 2) {
  CacheManagerOptions o = testing::SmallCacheManagerOptions(blocks, checkpoints);
  o.checkpoint_policy = policy;
  o.dense_checkpoints = dense;
  return o;
}

// Computes `tokens` up to `end` in chunks of `chunk` as a model would: checkpoints hold their position, every
// block's bytes hold its first position.
void Compute(CacheManager& m, SequenceId id, const std::vector<int32_t>& tokens, int64_t from, int64_t end,
             int64_t chunk) {
  for (int64_t at = std::min(from + chunk, end);; at = std::min(at + chunk, end)) {
    ASSERT_TRUE(m.Reserve(id, at));
    for (const CheckpointTarget& target : m.TakeCheckpoints(id, tokens, at)) {
      std::memcpy(target.data, &target.position, sizeof(target.position));
    }
    const std::vector<int32_t>& table = m.BlockTable(id);
    for (int64_t p = (at - 1) / 4 * 4; p >= 0 && p >= from / 4 * 4; p -= 4) {
      std::memcpy(m.block_arena().Item(table[p / 4]), &p, sizeof(p));
    }
    std::memcpy(m.Slot(id), &at, sizeof(at));
    m.Commit(id, tokens, at);
    ASSERT_OK(m.CheckIntegrity());
    if (at == end) break;
  }
}

// The positions 8, 16, … of `tokens` a lookup can resume at (a prompt of that length plus one token).
std::vector<int64_t> Resumable(const CacheManager& m, const std::vector<int32_t>& tokens) {
  std::vector<int64_t> positions;
  for (int64_t p = 8; p < static_cast<int64_t>(tokens.size()); p += 8) {
    std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + p);
    prompt.push_back(-1);
    if (m.FindPrefix(prompt).tokens == p) positions.push_back(p);
  }
  return positions;
}

// 20 checkpoints of one sequence into a pool of 8: uniform LRU keeps the last 8; the tail policy demotes the
// ones its spacing drops (evicted first) and keeps a spread reaching back to 64 of 160 tokens.
TEST(CheckpointSpacing, TailPolicyKeepsASpreadUniformKeepsTheNewest) {
  const std::vector<int32_t> a = Tokens(0, 161);
  ASSERT_OK_AND_ASSIGN(auto uniform, CacheManager::Create(Options(64, 8, CheckpointPolicy::kUniform)));
  ASSERT_TRUE(uniform->Admit(1, a, {}, 8));
  Compute(*uniform, 1, a, 0, 161, 8);
  EXPECT_EQ(Resumable(*uniform, a), (std::vector<int64_t>{104, 112, 120, 128, 136, 144, 152, 160}));
  EXPECT_EQ(uniform->Stats().checkpoints_demoted, 0);

  ASSERT_OK_AND_ASSIGN(auto tail, CacheManager::Create(Options(64, 8, CheckpointPolicy::kTail)));
  ASSERT_TRUE(tail->Admit(1, a, {}, 8));
  Compute(*tail, 1, a, 0, 161, 8);
  // What the policy keeps at newest = 20 with dense 2 (indices × 8 tokens), all of which fit in 8.
  std::vector<int64_t> kept;
  for (int64_t index = 1; index <= 20; ++index) {
    if (TailPolicyKeeps(index, 20, 2)) kept.push_back(index * 8);
  }
  EXPECT_EQ(kept, (std::vector<int64_t>{64, 96, 128, 144, 152, 160}));
  const std::vector<int64_t> resumable = Resumable(*tail, a);
  for (int64_t p : kept) EXPECT_TRUE(std::count(resumable.begin(), resumable.end(), p)) << p;
  // The pool is full: the policy's 6 and the 2 demoted most recently, not evicted yet (demoted ones go first).
  EXPECT_EQ(resumable.size(), 8u);
  EXPECT_EQ(tail->Stats().checkpoints_demoted, 2);
  EXPECT_EQ(tail->Stats().checkpoints_used, 8);
  ASSERT_OK(tail->CheckIntegrity());
}

// A hit on a demoted checkpoint makes it ordinary (most recently used, not demoted).
TEST(CheckpointSpacing, AHitOnADemotedCheckpointKeepsIt) {
  const std::vector<int32_t> a = Tokens(0, 57);
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(Options(64, 16, CheckpointPolicy::kTail, /*dense=*/1)));
  ASSERT_TRUE(m->Admit(1, a, {}, 8));
  Compute(*m, 1, a, 0, 57, 8);  // newest 7: kept 4 (level 2), 6, 7 … 1, 3, 5 demoted
  EXPECT_EQ(m->Stats().checkpoints_demoted, 4);
  m->Free(1);
  std::vector<int32_t> b(a.begin(), a.begin() + 24);
  b.push_back(999);
  const PrefixMatch match = m->FindPrefix(b);
  ASSERT_EQ(match.tokens, 24);  // index 3, demoted but still held
  ASSERT_TRUE(m->Admit(2, b, match, 25));
  EXPECT_EQ(m->Stats().checkpoints_demoted, 3);
  int64_t restored = 0;
  std::memcpy(&restored, m->Slot(2), sizeof(restored));
  EXPECT_EQ(restored, 24);
  ASSERT_OK(m->CheckIntegrity());
}

// ---------------------------------------------------------------------------------------------------------------
// The capacity plan's checkpoint budget.

TEST(CheckpointBudget, GivenBytesSetTheCountAndTheReportSaysSo) {
  const ModelConfig c = LoadModelConfig(testing::TestDataPath("golden/tiny-dense")).value();
  const CacheLayout layout = MakeCacheLayout(c, {.block_tokens = 64}).value();
  EngineOptions o;
  o.memory_bytes = 8 << 20;
  o.max_seqs = 2;
  o.checkpoint_memory_bytes = 10 * layout.checkpoint_bytes + 5;
  const CapacityReport r = PlanCapacity(c, layout, o, 0).value();
  EXPECT_EQ(r.num_checkpoints, 10);
  EXPECT_EQ(r.checkpoints_total_bytes, 10 * layout.checkpoint_bytes);
  EXPECT_EQ(r.num_blocks, (o.memory_bytes - 2 * layout.slot_bytes - 10 * layout.checkpoint_bytes) / layout.block_bytes);
  const std::string report = r.ToString();
  EXPECT_NE(report.find("checkpoints 10 ×"), std::string::npos) << report;
  EXPECT_NE(report.find("--prefix-checkpoint-memory"), std::string::npos) << report;
  EXPECT_NE(report.find("spacing     tail"), std::string::npos) << report;
  o.checkpoint_memory_bytes = o.memory_bytes;
  EXPECT_ERROR_CONTAINS(PlanCapacity(c, layout, o, 0), "leaves nothing for cache blocks");
  o.checkpoint_memory_bytes = layout.checkpoint_bytes - 1;
  EXPECT_ERROR_CONTAINS(PlanCapacity(c, layout, o, 0), "at least one KDA state checkpoint");
  o.checkpoint_memory_bytes = 0;  // the fraction, as before
  EXPECT_EQ(PlanCapacity(c, layout, o, 0).value().num_checkpoints,
            static_cast<int64_t>((o.memory_bytes - 2 * layout.slot_bytes) * 0.2) / layout.checkpoint_bytes);
}

}  // namespace
}  // namespace glint
