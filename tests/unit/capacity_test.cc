// The cache layout and the capacity plan: exact byte counts for the tiny-dense fixture, the split of a budget,
// and budgets that cannot work.
#include "engine/capacity.h"

#include <gtest/gtest.h>

#include "io/config.h"
#include "model/cache_layout.h"
#include "test_util.h"

namespace glint {
namespace {

ModelConfig TinyDense() { return LoadModelConfig(testing::TestDataPath("golden/tiny-dense")).value(); }

TEST(CacheLayout, TinyDenseBytes) {
  const ModelConfig c = TinyDense();  // 3 KDA layers (2 heads × 32), 1 DSA layer (kv_lora 32, e 32, kpool 4)
  const CacheLayout layout = MakeCacheLayout(c, {.block_tokens = 64}).value();
  // Slot: per KDA layer conv 3·64·3·4 = 2304 B + S 2·32·32·4 = 8192 B; the DSA tail 2·3·32·4 = 768 B.
  EXPECT_EQ(layout.checkpoint_bytes, 3 * (2304 + 8192));
  EXPECT_EQ(layout.slot_bytes, 3 * (2304 + 8192) + 768);
  // Block: latents 64·32·4 = 8192 B + pooled keys 16·32·4 = 2048 B.
  EXPECT_EQ(layout.block_bytes, 8192 + 2048);
  EXPECT_DOUBLE_EQ(layout.BytesPerToken(), 160.0);
  EXPECT_EQ(layout.layers[3].latents, 0);
  EXPECT_EQ(layout.layers[3].pooled, 8192);
  EXPECT_EQ(layout.layers[1].conv, 2304 + 8192);
  const CacheLayout half = MakeCacheLayout(c, {.block_tokens = 64, .kda_state = KdaStateStorage::kBfloat16}).value();
  EXPECT_EQ(half.checkpoint_bytes, 3 * (2304 + 4096));
  EXPECT_ERROR_CONTAINS(MakeCacheLayout(c, {.block_tokens = 6}), "multiple of index_kpool");
}

// With speculative decoding the MTP layer's cache joins the layout: its latents and pooled keys in every block, its
// filling pool in the slot after the checkpoint part (a checkpoint at a block boundary has it empty).
TEST(CacheLayout, TinyDenseWithTheMtpCache) {
  const ModelConfig c = TinyDense();
  const CacheLayout layout = MakeCacheLayout(c, {.block_tokens = 64, .mtp = true}).value();
  EXPECT_TRUE(layout.has_mtp());
  EXPECT_EQ(layout.block_bytes, 2 * (8192 + 2048));
  EXPECT_EQ(layout.mtp_latents, 8192 + 2048);
  EXPECT_EQ(layout.mtp_pooled, 2 * 8192 + 2048);
  EXPECT_EQ(layout.checkpoint_bytes, 3 * (2304 + 8192));
  EXPECT_EQ(layout.slot_bytes, 3 * (2304 + 8192) + 2 * 768);
  EXPECT_EQ(layout.mtp_pending, 3 * (2304 + 8192) + 768);
  EXPECT_DOUBLE_EQ(layout.BytesPerToken(), 320.0);
  ModelConfig no_mtp = c;
  no_mtp.num_nextn_predict_layers = 0;
  EXPECT_ERROR_CONTAINS(MakeCacheLayout(no_mtp, {.block_tokens = 64, .mtp = true}), "needs a model with an MTP layer");
}

// Speculative decoding keeps one rollback copy of the KDA state per slot, counted before the blocks.
TEST(Capacity, SpeculativeDecodingCountsTheRollbackCopies) {
  const ModelConfig c = TinyDense();
  const CacheLayout layout = MakeCacheLayout(c, {.block_tokens = 64, .mtp = true}).value();
  EngineOptions o;
  o.memory_bytes = 1 << 20;
  o.max_seqs = 4;
  o.prefix_caching = false;
  o.speculative = SpeculativeMethod::kMtp;
  const CapacityReport r = PlanCapacity(c, layout, o, 0).value();
  EXPECT_EQ(r.rollback_bytes, 31488);
  EXPECT_EQ(r.rollback_total_bytes, 4 * 31488);
  EXPECT_EQ(r.num_blocks, ((1 << 20) - 4 * (32256 + 768) - 4 * 31488) / layout.block_bytes);
  EXPECT_EQ(r.slots_total_bytes + r.rollback_total_bytes + r.blocks_total_bytes + r.unused_bytes, 1 << 20);
  EXPECT_NE(r.ToString().find("rollback"), std::string::npos);
  o.max_seqs = (1 << 20) / (32256 + 768);  // fits without the rollback copies, not with them
  EXPECT_ERROR_CONTAINS(PlanCapacity(c, layout, o, 0), "rollback copy");
}

TEST(Capacity, SplitsTheBudgetSlotsCheckpointsBlocks) {
  const ModelConfig c = TinyDense();
  const CacheLayout layout = MakeCacheLayout(c, {.block_tokens = 64}).value();
  EngineOptions o;
  o.memory_bytes = 1 << 20;
  o.max_seqs = 4;
  o.checkpoint_fraction = 0.2;
  const CapacityReport r = PlanCapacity(c, layout, o, 12345).value();
  EXPECT_EQ(r.slots_total_bytes, 4 * 32256);
  const int64_t rest = (1 << 20) - 4 * 32256;
  EXPECT_EQ(r.num_checkpoints, static_cast<int64_t>(rest * 0.2) / 31488);
  EXPECT_EQ(r.num_blocks, (rest - r.num_checkpoints * 31488) / 10240);
  EXPECT_EQ(r.cache_tokens, r.num_blocks * 64);
  EXPECT_EQ(r.max_model_len, r.cache_tokens);
  EXPECT_EQ(r.slots_total_bytes + r.checkpoints_total_bytes + r.blocks_total_bytes + r.unused_bytes, 1 << 20);
  EXPECT_LT(r.unused_bytes, 10240);
  ASSERT_EQ(r.concurrency.front().first, 1024);
  EXPECT_EQ(r.concurrency.front().second, std::min<int64_t>(4, r.num_blocks / 16));
  EXPECT_EQ(r.concurrency.back(), (std::pair<int64_t, int64_t>{r.max_model_len, 1}));
  const std::string text = r.ToString();
  EXPECT_NE(text.find("tokens of cache"), std::string::npos) << text;
  EXPECT_NE(text.find("160 B"), std::string::npos) << text;

  o.prefix_caching = false;
  const CapacityReport plain = PlanCapacity(c, layout, o, 0).value();
  EXPECT_EQ(plain.num_checkpoints, 0);
  EXPECT_EQ(plain.num_blocks, rest / 10240);
}

// The figures docs/engine.md quotes for the release model (tests/data/glm-5.3-flash-config.json).
TEST(Capacity, ReleaseModelBytes) {
  const ModelConfig c = LoadModelConfig(testing::TestDataPath("glm-5.3-flash-config.json")).value();
  const CacheLayout layout = MakeCacheLayout(c, {.block_tokens = 64}).value();
  EXPECT_DOUBLE_EQ(layout.BytesPerToken(), 11 * (512 + 128 / 4) * 4);  // 23.4 KiB
  const int64_t kda_layer = 3 * 8192 * 3 * 4 + 64 * 128 * 128 * 4;     // conv 288 KiB + S 4 MiB
  EXPECT_EQ(layout.checkpoint_bytes, 34 * kda_layer);
  EXPECT_EQ(layout.slot_bytes, 34 * kda_layer + 11 * 2 * 3 * 128 * 4);  // + 33 KiB of indexer tails
  const CacheLayout half = MakeCacheLayout(c, {.block_tokens = 64, .kda_state = KdaStateStorage::kBfloat16}).value();
  EXPECT_EQ(half.checkpoint_bytes, 34 * (3 * 8192 * 3 * 4 + 64 * 128 * 128 * 2));
}

TEST(Capacity, ParsesSizes) {
  EXPECT_EQ(ParseByteSize("512").value(), 512);
  EXPECT_EQ(ParseByteSize("64K").value(), 64 * 1024);
  EXPECT_EQ(ParseByteSize("1.5G").value(), 3 * (int64_t{1} << 29));
  EXPECT_EQ(ParseByteSize("2GiB").value(), int64_t{2} << 30);
  EXPECT_EQ(ParseByteSize("100mb").value(), 100 << 20);
  EXPECT_ERROR_CONTAINS(ParseByteSize("lots"), "not a size");
  EXPECT_ERROR_CONTAINS(ParseByteSize("3X"), "unknown unit");
  EXPECT_ERROR_CONTAINS(ParseByteSize("0"), "out of range");
}

TEST(Capacity, MaxSeqsUpToMemoryTakesWhatHalfTheBudgetHolds) {
  const ModelConfig c = TinyDense();
  const CacheLayout layout = MakeCacheLayout(c, {.block_tokens = 64}).value();
  EngineOptions o;
  o.max_seqs_up_to_memory = true;
  o.prefix_caching = false;
  for (int64_t states : {1, 5, 40}) {
    o.memory_bytes = states * 2 * layout.slot_bytes + layout.slot_bytes;  // half holds `states` (and a half more)
    o.max_seqs = 16;
    EXPECT_EQ(PlanCapacity(c, layout, o, 0).value().num_slots, std::min<int64_t>(states, 16)) << states;
  }
  o.max_seqs = 1;  // never more than asked
  EXPECT_EQ(PlanCapacity(c, layout, o, 0).value().num_slots, 1);
  o.max_seqs_up_to_memory = false;  // --max-seqs given: exactly that, or a refusal
  o.max_seqs = o.memory_bytes / layout.slot_bytes + 1;
  EXPECT_ERROR_CONTAINS(PlanCapacity(c, layout, o, 0), "lower --max-seqs or raise --memory");
}

TEST(Capacity, BudgetsThatCannotWorkAreRefused) {
  const ModelConfig c = TinyDense();
  const CacheLayout layout = MakeCacheLayout(c, {.block_tokens = 64}).value();
  EngineOptions o;
  o.memory_bytes = 100000;
  o.max_seqs = 4;
  EXPECT_ERROR_CONTAINS(PlanCapacity(c, layout, o, 0), "holds at most 3 sequence states");
  o.memory_bytes = 1 << 20;
  o.max_model_len = 1 << 19;
  EXPECT_ERROR_CONTAINS(PlanCapacity(c, layout, o, 0), "can never fit");
  o.max_model_len = 0;
  o.checkpoint_interval = 100;
  EXPECT_ERROR_CONTAINS(PlanCapacity(c, layout, o, 0), "multiple of the block size");
  o.checkpoint_interval = 256;
  o.checkpoint_fraction = 0.001;
  EXPECT_ERROR_CONTAINS(PlanCapacity(c, layout, o, 0), "at least one KDA state checkpoint");
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

// Block, slot and checkpoint ids are int32 (docs/long-context.md): a budget of more than 2^31 − 1 blocks leaves the
// rest unused instead of overflowing the ids, and so does the checkpoint pool; --max-seqs past the range is refused.
TEST(Capacity, PoolsStopAtTheInt32IdRange) {
  const ModelConfig c = TinyDense();
  const CacheLayout layout = MakeCacheLayout(c, {.block_tokens = 64}).value();
  EngineOptions o;
  o.max_seqs = 4;
  o.prefix_caching = false;
  o.memory_bytes = 4 * layout.slot_bytes + (kMaxItemsPerPool + 100) * layout.block_bytes;
  const CapacityReport r = PlanCapacity(c, layout, o, 0).value();
  EXPECT_EQ(r.num_blocks, kMaxItemsPerPool);
  EXPECT_EQ(r.unused_bytes, 100 * layout.block_bytes);
  EXPECT_EQ(r.max_model_len, c.max_position_embeddings);
  o.prefix_caching = true;
  o.checkpoint_fraction = 0.99;
  o.memory_bytes = 4 * layout.slot_bytes + (kMaxItemsPerPool + 100) * 2 * layout.checkpoint_bytes;
  EXPECT_EQ(PlanCapacity(c, layout, o, 0).value().num_checkpoints, kMaxItemsPerPool);
  o.max_seqs = kMaxItemsPerPool + 1;
  EXPECT_ERROR_CONTAINS(PlanCapacity(c, layout, o, 0), "--max-seqs must be in 1 .. 2^31 − 1");
}

}  // namespace
}  // namespace glint
