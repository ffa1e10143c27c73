// The census (io/census.h) against parameter counts worked out by hand from the fixture shapes
// (tests/data/golden/README.md) and the release vision config; and its classification of odd checkpoints.
#include "io/census.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/checkpoint_schema.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace glint {
namespace {

int64_t Params(const Census& census, TensorGroup group) { return census.group(group).params; }

// tiny-dense: D=64, V=256, layers KDA 0,1,2 + DSA 3, KDA 2×32, MLA 4 heads q_lora 48 kv_lora 32 qk=v=32,
// indexer 4×32 kpool 4, MoE 8 experts (top-2) + 1 shared of width 32, dense MLP 128 on layer 0, hc_mult 4, MTP.
TEST(Census, TinyDenseFromHeadersMatchesHandCount) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(testing::TestDataPath("golden/tiny-dense")));
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(testing::TestDataPath("golden/tiny-dense")));
  const Census census = CensusFromCheckpoint(checkpoint, config);

  EXPECT_EQ(Params(census, TensorGroup::kEmbedding), 2 * 256 * 64);  // embed + lm_head = 32,768
  // KDA per layer: q,k,v 3·64·64 = 12288; o 64·64 = 4096; f_a,g_a 2·32·64 = 4096; f_b,g_b 2·64·32 = 4096;
  // b_proj 2·64 = 128; convs 3·64·4 = 768; A_log 2; dt_bias 64; o_norm 32 → 25570; × 3 layers.
  EXPECT_EQ(Params(census, TensorGroup::kKda), 3 * 25570);
  // MLA: q_a 48·64 = 3072; q_a_norm 48; q_b 128·48 = 6144; kv_a 32·64 = 2048; kv_a_norm 32; kv_b 256·32 = 8192;
  // o 64·128 = 8192 → 27728.
  EXPECT_EQ(Params(census, TensorGroup::kMla), 27728);
  // Indexer: wq_b 128·48 = 6144; wk 32·64 = 2048; k_norm w+b 64; weights_proj 4·64 = 256; gate 32·64 = 2048;
  // ape 4·32 = 128 → 10688.
  EXPECT_EQ(Params(census, TensorGroup::kIndexer), 10688);
  EXPECT_EQ(Params(census, TensorGroup::kDenseMlp), 3 * 128 * 64);              // 24,576
  EXPECT_EQ(Params(census, TensorGroup::kRoutedExperts), 3 * 8 * 3 * 32 * 64);  // 3 MoE layers × 8 × 6144
  EXPECT_EQ(Params(census, TensorGroup::kSharedExperts), 3 * 3 * 32 * 64);      // 18,432
  // Per layer 2 norms (128) + mHC 2 × (24·256 + 24 + 3) = 12342; routers 3 × (8·64 + 8) = 1560; final norm 64.
  EXPECT_EQ(Params(census, TensorGroup::kRouterMhcNorms), 4 * (128 + 12342) + 1560 + 64);  // 51,504
  // MTP: eh_proj 64·128 = 8192; 5 norms 320; DSA 27728 + 10688; MoE 520 + 6144 + 8·6144 = 55816 → 102744.
  EXPECT_EQ(Params(census, TensorGroup::kMtp), 8192 + 320 + 27728 + 10688 + 55816);
  EXPECT_EQ(Params(census, TensorGroup::kVision), 0);
  EXPECT_EQ(census.TotalParams(), 492606);
  EXPECT_EQ(census.mtp_routed_expert_params, 8 * 6144);
  EXPECT_EQ(census.embedding_lookup_params, 256 * 64);

  // FP8 payload: MLA q_a, q_b, kv_a, o = 3072 + 6144 + 2048 + 8192 bytes, each with one 128×128 block → one F32.
  EXPECT_EQ(census.group(TensorGroup::kMla).weight_bytes_by_dtype.at(DType::kF8E4M3), 19456u);
  EXPECT_EQ(census.group(TensorGroup::kMla).scale_bytes, 4u * 4);
  EXPECT_EQ(census.group(TensorGroup::kMla).weight_bytes_by_dtype.at(DType::kBF16), 2u * (48 + 32 + 8192));
  EXPECT_EQ(census.tensor_count, 352);
  EXPECT_EQ(census.dtypes.at(DType::kF8E4M3).tensors, 119);
  EXPECT_EQ(census.dtypes.at(DType::kF8E4M3).bytes, 284672u);
  EXPECT_EQ(census.dtypes.at(DType::kF32).tensors, 162);  // 43 F32 weights + 119 scales
  EXPECT_TRUE(census.unknown_names.empty());
  EXPECT_TRUE(census.missing.empty());
  EXPECT_TRUE(census.shape_mismatches.empty());

  // Active per token: the trunk (389,862 = total − MTP) with routed experts at 2/8: 389862 − 147456·6/8 = 279270.
  EXPECT_DOUBLE_EQ(ActiveParams(census, config, {}), 279270);
  EXPECT_DOUBLE_EQ(ActiveParams(census, config, {.include_embedding_lookup = false}), 279270 - 16384);
  // + MTP with its routed experts at 2/8: 102744 − 49152·6/8 = 65880.
  EXPECT_DOUBLE_EQ(ActiveParams(census, config, {.include_mtp = true}), 279270 + 65880);
}

// tiny-sparse: D=96, V=320, KDA layers 0,1,2,4,5,6 (3×32), DSA 3,7 (MLA 4 heads, q_lora 64, kv_lora 48, qk=v=32;
// indexer 8×32), dense MLP 192 on layers 0,1, MoE 16 experts (top-4) + 1 shared of width 32 on layers 2..7.
TEST(Census, TinySparseFromHeadersMatchesHandCount) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(testing::TestDataPath("golden/tiny-sparse")));
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(testing::TestDataPath("golden/tiny-sparse")));
  const Census census = CensusFromCheckpoint(checkpoint, config);
  EXPECT_EQ(Params(census, TensorGroup::kEmbedding), 2 * 320 * 96);
  // KDA: 3·96·96 + 96·96 + 2·32·96 + 2·96·32 + 3·96 + 3·96·4 + 3 + 96 + 32 = 50723 per layer, 6 layers.
  EXPECT_EQ(Params(census, TensorGroup::kKda), 6 * 50723);
  // MLA: 64·96 + 64 + 128·64 + 48·96 + 48 + 256·48 + 96·128 = 43632 per layer, 2 layers.
  EXPECT_EQ(Params(census, TensorGroup::kMla), 2 * 43632);
  // Indexer: 256·64 + 32·96 + 64 + 8·96 + 32·96 + 4·32 = 23488 per layer.
  EXPECT_EQ(Params(census, TensorGroup::kIndexer), 2 * 23488);
  EXPECT_EQ(Params(census, TensorGroup::kDenseMlp), 2 * 3 * 192 * 96);
  EXPECT_EQ(Params(census, TensorGroup::kRoutedExperts), 6 * 16 * 3 * 32 * 96);
  EXPECT_EQ(Params(census, TensorGroup::kSharedExperts), 6 * 3 * 32 * 96);
  // 8 × (2·96 + 2·(24·384 + 24 + 3)) + 6 × (16·96 + 16) + 96.
  EXPECT_EQ(Params(census, TensorGroup::kRouterMhcNorms), 8 * (192 + 18486) + 6 * 1552 + 96);
  // eh_proj 96·192 + 5·96 + DSA (43632 + 23488) + MoE (1552 + 9216 + 16·9216).
  EXPECT_EQ(Params(census, TensorGroup::kMtp), 18432 + 480 + 67120 + 158224);
  EXPECT_EQ(census.TotalParams(), 1953730);
  // The dense MLP is 192 wide: gate/up [192, 96] and down [96, 192] have 2 scale blocks each, all others 1.
  EXPECT_EQ(census.group(TensorGroup::kDenseMlp).scale_bytes, 2u * 3 * 2 * 4);
  EXPECT_EQ(census.dtypes.at(DType::kF32).elements, 155887);  // includes 375 + 6 scale elements
}

// With fp8 in the config, the config-only census must give the exact bytes of the FP8 release, group by group.
TEST(Census, ConfigCensusEqualsHeaderCensusOnGoldenCheckpoints) {
  for (const char* fixture : {"golden/tiny-dense", "golden/tiny-sparse"}) {
    SCOPED_TRACE(fixture);
    ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(testing::TestDataPath(fixture)));
    ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(testing::TestDataPath(fixture)));
    const Census from_headers = CensusFromCheckpoint(checkpoint, config);
    const Census from_config = CensusFromConfig(config);
    for (int g = 0; g < kNumTensorGroups; ++g) {
      if (static_cast<TensorGroup>(g) == TensorGroup::kVision) continue;  // the fixtures ship no vision tower
      EXPECT_EQ(from_config.groups[g].params, from_headers.groups[g].params) << g;
      EXPECT_EQ(from_config.groups[g].weight_bytes, from_headers.groups[g].weight_bytes) << g;
      EXPECT_EQ(from_config.groups[g].scale_bytes, from_headers.groups[g].scale_bytes) << g;
    }
    EXPECT_TRUE(from_config.vision_estimated);
    EXPECT_GT(Params(from_config, TensorGroup::kVision), 0);
    EXPECT_EQ(Params(from_headers, TensorGroup::kVision), 0);
  }
}

// The release vision tower (GLM-OCR ViT, hidden 1024, 24 blocks, 16 heads, MLP 4096, patch 14, temporal 2,
// merge 2, out 4096, merger 10240, biases on): 563.6 M, as WARP counts it (model-glm53.md §15).
TEST(Census, ReleaseVisionTowerEstimate) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(testing::TestDataPath("glm-5.3-flash-config.json")));
  int64_t params = 0;
  for (const TensorSpec& spec : VisionTowerTensors(config.vision)) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    params += n;
  }
  const int64_t patch = 1024 * 3 * 2 * 14 * 14 + 1024;                         // 1,205,248
  const int64_t block = 2 * 1024                                               // norm1, norm2
                        + (3 * 1024 * 1024 + 3 * 1024) + (1024 * 1024 + 1024)  // qkv, proj (+ biases)
                        + 2 * 64                                               // q_norm, k_norm (head_dim 64)
                        + 3 * 4096 * 1024 + (4096 + 4096 + 1024);              // gate, up, down (+ biases)
  const int64_t downsample = 4096 * 1024 * 2 * 2 + 4096;
  const int64_t merger = 4096 * 4096 + 2 * 4096 + 3 * 10240 * 4096;
  EXPECT_EQ(params, patch + 24 * block + 1024 + downsample + merger);
  EXPECT_EQ(params, 563627008);
}

// A checkpoint with a tensor dropped, one renamed, one reshaped, a vision tensor and an FP8 tensor without scales.
TEST(Census, ClassifiesUnknownMissingAndMisshapedTensors) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(testing::TestDataPath("golden/tiny-dense")));
  SafetensorsWriter writer;
  const std::string p(kLanguageModelPrefix);
  const std::string dropped = p + "layers.0.input_layernorm.weight";
  const std::string reshaped = p + "norm.weight";
  const std::string unscaled = p + "layers.3.self_attn.o_proj.weight";
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    if (spec.name == dropped) continue;
    std::vector<int64_t> shape = spec.shape;
    if (spec.name == reshaped) shape = {shape[0] + 1};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const bool fp8 = spec.storage == TensorStorage::kFp8Block;
    const DType dtype = fp8 ? DType::kF8E4M3 : spec.storage == TensorStorage::kF32 ? DType::kF32 : DType::kBF16;
    const std::string bytes(static_cast<size_t>(n) * DTypeSize(dtype), '\0');
    ASSERT_OK(writer.Add(spec.name, dtype, shape, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}));
    if (fp8 && spec.name != unscaled) {
      const std::vector<int64_t> scale_shape = ScaleShape(spec.shape, 128, 128);
      const std::string scale(static_cast<size_t>(scale_shape[0] * scale_shape[1]) * 4, '\0');
      ASSERT_OK(writer.Add(spec.name + "_scale_inv", DType::kF32, scale_shape,
                           {reinterpret_cast<const uint8_t*>(scale.data()), scale.size()}));
    }
  }
  const std::string two_bf16(4, '\0');
  const std::span<const uint8_t> two_values(reinterpret_cast<const uint8_t*>(two_bf16.data()), 4);
  ASSERT_OK(writer.Add("model.visual.blocks.0.norm1.weight", DType::kBF16, {2}, two_values));
  ASSERT_OK(writer.Add("model.visual.blocks.0.attn.qkv.weight_scale_inv", DType::kF32, {1}, two_values));
  ASSERT_OK(writer.Add(p + "layers.0.mystery.weight", DType::kBF16, {2}, two_values));
  const std::string dir = testing::MakeTempDir("census");
  ASSERT_OK(writer.WriteTo(dir + "/model.safetensors"));
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(dir));
  const Census census = CensusFromCheckpoint(checkpoint, config);

  ASSERT_EQ(census.unknown_names.size(), 1u);
  EXPECT_EQ(census.unknown_names[0], p + "layers.0.mystery.weight");
  EXPECT_EQ(census.unknown.params, 2);
  ASSERT_EQ(census.missing.size(), 2u);
  EXPECT_EQ(census.missing[0].name, dropped);
  EXPECT_EQ(census.missing[1].name, unscaled + "_scale_inv");
  ASSERT_EQ(census.shape_mismatches.size(), 1u);
  EXPECT_EQ(census.shape_mismatches[0].name, reshaped);
  EXPECT_NE(census.shape_mismatches[0].detail.find("expected [64], found [65]"), std::string::npos);
  EXPECT_EQ(Params(census, TensorGroup::kVision), 2);
  EXPECT_EQ(census.group(TensorGroup::kVision).scale_bytes, 4u);
  // Everything else is as in the real fixture, less the dropped norm (64) and plus the reshaped one's extra value.
  EXPECT_EQ(census.TotalParams(), 492606 - 64 + 1 + 2 + 2);
}

}  // namespace
}  // namespace glint
