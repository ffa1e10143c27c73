// --kv-cache-dtype (quant/kv_rows.h) through both forward paths on the trained tiny model (docs/quality.md):
//   - the cache holds exactly the encoded rows: the first DSA layer's latents and pooled keys (whose inputs do not
//     depend on any DSA cache) equal the fp32 cache's rows encoded and decoded, bit for bit;
//   - the reference path with each compact dtype stays within the measured quality budget of the fp32 cache;
//   - the fast path agrees with the reference path under each dtype as closely as it does with fp32 caches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "base/worker_pool.h"
#include "engine/capacity.h"
#include "fast/fast_model.h"
#include "io/config.h"
#include "io/token_file.h"
#include "model/forward_common.h"
#include "model/model.h"
#include "model_checks.h"
#include "test_util.h"

namespace glint {
namespace {

using testing::Accumulate;
using testing::Agreement;

constexpr KvCacheDtype kCompact[] = {KvCacheDtype::kBfloat16, KvCacheDtype::kFp8, KvCacheDtype::kInt8};

// A sequence bound to memory laid out with `dtype`, and the memory itself.
struct BoundSequence {
  std::shared_ptr<const CacheLayout> layout;
  ItemArena blocks, slot;
  std::vector<int32_t> table;
  SequenceState state;
};

std::unique_ptr<BoundSequence> Bind(const Model& model, KvCacheDtype dtype, int64_t tokens) {
  auto bound = std::make_unique<BoundSequence>();
  CacheOptions options;
  options.block_tokens = 16;
  options.kv_dtype = dtype;
  bound->layout = std::make_shared<const CacheLayout>(model.CacheLayoutFor(options).value());
  const int64_t blocks = (tokens + 15) / 16;
  bound->blocks = ItemArena::Fixed(blocks, bound->layout->block_bytes).value();
  bound->slot = ItemArena::Fixed(1, bound->layout->slot_bytes).value();
  std::memset(bound->slot.Item(0), 0, bound->layout->slot_bytes);
  for (int64_t b = 0; b < blocks; ++b) bound->table.push_back(static_cast<int32_t>(b));
  bound->state = model.BindSequence(bound->layout, {&bound->blocks, &bound->table, bound->slot.Item(0)}, 0);
  return bound;
}

std::vector<float> Logits(const Model& model, BoundSequence& bound, const std::vector<int32_t>& tokens) {
  std::vector<EntryOutput> outputs;
  BatchEntry entry{tokens, &bound.state, LogitsWanted::kAll, false};
  const Status status = model.Forward({&entry, 1}, outputs);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return outputs.empty() ? std::vector<float>{} : outputs[0].logits;
}

// The layout sizes each DSA segment for the dtype, and the capacity report says how the cache is stored.
TEST(KvCacheLayout, SegmentsAndCapacityFollowTheDtype) {
  const ModelConfig c = LoadModelConfig(testing::TestDataPath("golden/tiny-dense")).value();  // 1 DSA layer
  const int64_t rank = c.kv_lora_rank, e = c.index_head_dim, pools = 64 / c.index_kpool;
  const auto aligned = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
  for (KvCacheDtype dtype :
       {KvCacheDtype::kFloat32, KvCacheDtype::kBfloat16, KvCacheDtype::kFp8, KvCacheDtype::kInt8}) {
    CacheOptions options;
    options.kv_dtype = dtype;
    const CacheLayout layout = MakeCacheLayout(c, options).value();
    const int64_t scale = KvCacheDtypeHasScale(dtype) ? 4 : 0;
    const int64_t latents = aligned(aligned(64 * rank * KvValueBytes(dtype)) + 64 * scale);
    const int64_t keys = aligned(aligned(pools * e * KvValueBytes(dtype)) + pools * scale);
    EXPECT_EQ(layout.block_bytes, latents + keys) << KvCacheDtypeName(dtype);  // values, then the rows' scales
    EngineOptions engine;
    engine.kv_cache_dtype = dtype;
    engine.memory_bytes = int64_t{64} << 20;
    const CapacityReport report = PlanCapacity(c, layout, engine, 0).value();
    EXPECT_NE(report.ToString().find(StrCat("DSA layer, ", KvCacheDtypeName(dtype))), std::string::npos)
        << report.ToString();
  }
  CacheOptions bad;
  bad.kv_dtype = static_cast<KvCacheDtype>(9);
  EXPECT_FALSE(MakeCacheLayout(c, bad).ok());
}

class KvCacheDtypeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::TestDataPath("../../models/glint-tiny");
    reference_ = ReferenceModel::Load(dir).value();
    fast_ = FastModel::Load(dir, pool_).value();
    sequences_ =
        ReadTokenSequences(testing::TestDataPath("glint-tiny/crosscheck_tokens.json"), reference_->config().vocab_size)
            .value();
    ASSERT_FALSE(sequences_.empty());
  }
  int64_t FirstDsaLayer() const {
    const ModelConfig& c = reference_->config();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (c.attention_kinds[l] == AttentionKind::kDsa) return l;
    }
    return -1;
  }

  WorkerPool pool_{2};
  std::unique_ptr<ReferenceModel> reference_;
  std::unique_ptr<FastModel> fast_;
  std::vector<std::vector<int32_t>> sequences_;
};

TEST_F(KvCacheDtypeTest, CacheHoldsExactlyTheEncodedRows) {
  const std::vector<int32_t>& tokens = sequences_.back();  // the short one: storage does not depend on length
  const int64_t layer = FirstDsaLayer();
  ASSERT_GE(layer, 0);
  for (const Model* model : {static_cast<const Model*>(reference_.get()), static_cast<const Model*>(fast_.get())}) {
    auto fp32 = Bind(*model, KvCacheDtype::kFloat32, tokens.size());
    Logits(*model, *fp32, tokens);
    const DsaCache exact = DsaLayerCache(fp32->state, layer);
    const std::vector<float> latents = GatherLatents(exact), keys = GatherPooledKeys(exact);
    for (KvCacheDtype dtype : kCompact) {
      auto compact = Bind(*model, dtype, tokens.size());
      Logits(*model, *compact, tokens);
      const DsaCache cache = DsaLayerCache(compact->state, layer);
      ASSERT_EQ(cache.dtype, dtype);
      const auto expect_encoded = [&](const std::vector<float>& rows, const std::vector<float>& stored, int64_t n,
                                      const char* what) {
        ASSERT_EQ(rows.size(), stored.size());
        std::vector<std::byte> values(n * KvValueBytes(dtype));
        std::vector<float> decoded(n);
        for (size_t r = 0; r < rows.size() / n; ++r) {
          float scale = 0;
          EncodeKvRow(dtype, rows.data() + r * n, n, values.data(), &scale);
          DecodeKvRow(dtype, values.data(), &scale, n, decoded.data());
          ASSERT_EQ(std::memcmp(decoded.data(), stored.data() + r * n, n * sizeof(float)), 0)
              << what << " row " << r << ", " << KvCacheDtypeName(dtype);
        }
      };
      expect_encoded(latents, GatherLatents(cache), cache.kv_lora_rank, "latent");
      expect_encoded(keys, GatherPooledKeys(cache), cache.index_head_dim, "pooled key");
    }
  }
}

// Measured on the 208 cross-check positions (docs/quality.md), reference path, against the fp32 cache: top-1 100 %
// for every dtype, mean KL 4e-11 (bf16), 1.3e-8 (fp8), 3.8e-9 (int8) nats. Bounds ≈ 10× the measured KL (the
// KL of a rounding error ε grows as ε², so 10× is ≈ 3× the rounding step) and at most 2 flips.
TEST_F(KvCacheDtypeTest, ReferencePathStaysWithinTheMeasuredBudget) {
  const double kl_bound[] = {5e-10, 2e-7, 5e-8};  // bf16, fp8, int8
  const int64_t vocab = reference_->config().vocab_size;
  std::vector<std::vector<float>> fp32_logits;  // [sequence][T × V]
  for (const auto& tokens : sequences_) {
    auto fp32 = Bind(*reference_, KvCacheDtype::kFloat32, tokens.size());
    fp32_logits.push_back(Logits(*reference_, *fp32, tokens));
  }
  for (size_t d = 0; d < std::size(kCompact); ++d) {
    Agreement agreement;
    for (size_t i = 0; i < sequences_.size(); ++i) {
      auto compact = Bind(*reference_, kCompact[d], sequences_[i].size());
      Accumulate(fp32_logits[i], Logits(*reference_, *compact, sequences_[i]), vocab, agreement);
    }
    std::printf("reference path, %s vs fp32 cache: top-1 %.2f%% of %lld, mean KL %.3g nats\n",
                std::string(KvCacheDtypeName(kCompact[d])).c_str(), 100 * agreement.top1(),
                static_cast<long long>(agreement.rows), agreement.mean_kl());
    EXPECT_GE(agreement.top1_equal, agreement.rows - 2);
    EXPECT_LE(agreement.mean_kl(), kl_bound[d]);
  }
}

// The fast path against the reference path, both with the same cache dtype: the W8A8 budget of
// docs/quality.md (top-1 ≥ 98 %, KL ≤ 3e-4; measured with fp32 caches: 99.04 %, 7.8e-5), for every dtype.
TEST_F(KvCacheDtypeTest, FastPathAgreesWithTheReferenceUnderEveryDtype) {
  const int64_t vocab = reference_->config().vocab_size;
  for (KvCacheDtype dtype :
       {KvCacheDtype::kFloat32, KvCacheDtype::kBfloat16, KvCacheDtype::kFp8, KvCacheDtype::kInt8}) {
    Agreement agreement;
    for (const auto& tokens : sequences_) {
      auto on_reference = Bind(*reference_, dtype, tokens.size());
      auto on_fast = Bind(*fast_, dtype, tokens.size());
      Accumulate(Logits(*reference_, *on_reference, tokens), Logits(*fast_, *on_fast, tokens), vocab, agreement);
    }
    std::printf("%s cache, fast vs reference path: top-1 %.2f%% of %lld, mean KL %.3g nats\n",
                std::string(KvCacheDtypeName(dtype)).c_str(), 100 * agreement.top1(),
                static_cast<long long>(agreement.rows), agreement.mean_kl());
    EXPECT_GE(agreement.top1(), 0.98);
    EXPECT_LE(agreement.mean_kl(), 3e-4);
  }
}

}  // namespace
}  // namespace glint
