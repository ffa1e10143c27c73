#include "model/weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "base/file.h"
#include "io/checkpoint_schema.h"
#include "quant/formats.h"
#include "test_util.h"

namespace glint {
namespace {

struct Loaded {
  ModelConfig config;
  Checkpoint checkpoint;
};

Loaded Open(const std::string& fixture) {
  auto config = LoadModelConfig(testing::TestDataPath(fixture));
  auto checkpoint = Checkpoint::Open(testing::TestDataPath(fixture));
  EXPECT_TRUE(config.ok() && checkpoint.ok());
  return {std::move(config).value(), std::move(checkpoint).value()};
}

TEST(Weights, BindsBothGoldenCheckpoints) {
  for (const char* fixture : {"golden/tiny-dense", "golden/tiny-sparse"}) {
    Loaded loaded = Open(fixture);
    ASSERT_OK_AND_ASSIGN(ModelWeights w, LoadModelWeights(loaded.checkpoint, loaded.config));
    const ModelConfig& c = loaded.config;
    ASSERT_EQ(w.layers.size(), static_cast<size_t>(c.num_hidden_layers));
    EXPECT_EQ(w.embed_tokens.rows, c.vocab_size);
    ASSERT_NE(w.mtp, nullptr);
    EXPECT_EQ(w.mtp->eh_proj.cols, 2 * c.hidden_size);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const LayerWeights& layer = w.layers[l];
      if (layer.attention_kind == AttentionKind::kKda) {
        EXPECT_EQ(layer.kda.q_conv.cols, c.kda_conv_kernel);
        EXPECT_EQ(layer.kda.q_conv.rows, c.KdaWidth());
      } else {
        EXPECT_EQ(layer.dsa.kv_b_proj.rows, c.num_attention_heads * (c.qk_head_dim + c.v_head_dim));
      }
      if (layer.mlp_kind == MlpKind::kMoe) {
        EXPECT_EQ(layer.moe.experts.size(), static_cast<size_t>(c.n_routed_experts));
      }
    }
  }
}

// FP8 dequantization: W[r, c] = e4m3(code) · scale_inv[r / 128, c / 128], checked element by element on the
// tiny-sparse dense MLP, whose 192 rows span a full and a partial block.
TEST(Weights, Fp8DequantizationUsesTheRightBlockScale) {
  Loaded loaded = Open("golden/tiny-sparse");
  ASSERT_OK_AND_ASSIGN(ModelWeights w, LoadModelWeights(loaded.checkpoint, loaded.config));
  const std::string name = "model.language_model.layers.0.mlp.gate_proj.weight";
  ASSERT_OK_AND_ASSIGN(TensorView codes, loaded.checkpoint.View(name));
  ASSERT_OK_AND_ASSIGN(TensorView scales, loaded.checkpoint.View(name + "_scale_inv"));
  float scale[2];
  std::memcpy(scale, scales.bytes.data(), sizeof(scale));
  ASSERT_NE(scale[0], scale[1]);
  const Matrix& gate = w.layers[0].mlp.gate_proj;
  for (int64_t r = 0; r < gate.rows; ++r) {
    for (int64_t c = 0; c < gate.cols; ++c) {
      const float expected = Fp8E4m3ToFloat(codes.bytes[r * gate.cols + c]) * scale[r / 128];
      ASSERT_EQ(gate.Row(r)[c], expected) << r << "," << c;
    }
  }
}

// A tensor-parallel slice decodes to exactly the slice of the whole tensor: FP8 (block scales at an offset that is
// not a block boundary), BF16 and F32, rows and columns; a region outside the tensor is refused.
TEST(Weights, RegionDecodeIsTheSliceOfTheWholeDecode) {
  Loaded loaded = Open("golden/tiny-sparse");
  const std::string layer0 = "model.language_model.layers.0.";
  for (const std::string& name : {layer0 + "mlp.gate_proj.weight", layer0 + "mlp.down_proj.weight",
                                  layer0 + "self_attn.f_b_proj.weight", layer0 + "self_attn.dt_bias"}) {
    ASSERT_OK_AND_ASSIGN(TensorView view, loaded.checkpoint.View(name));
    const TensorInfo* scale_info = loaded.checkpoint.Find(name + "_scale_inv");
    const TensorView scale = scale_info != nullptr ? loaded.checkpoint.ViewOf(*scale_info) : TensorView{};
    const TensorView* scale_ptr = scale_info != nullptr ? &scale : nullptr;
    const int64_t b = loaded.config.fp8_block_rows, bc = loaded.config.fp8_block_cols;
    ASSERT_OK_AND_ASSIGN(std::vector<float> whole, DecodeToFloat(view, scale_ptr, b, bc));
    const int64_t rows = view.shape()[0], cols = static_cast<int64_t>(whole.size()) / rows;
    const TensorRegion region{rows / 3, rows - 1, cols > 1 ? cols / 4 : 0, cols > 1 ? cols - 3 : 1};
    ASSERT_OK_AND_ASSIGN(std::vector<float> part, DecodeRegionToFloat(view, scale_ptr, b, bc, region));
    const int64_t width = region.col_end - region.col_begin;
    ASSERT_EQ(static_cast<int64_t>(part.size()), (region.row_end - region.row_begin) * width) << name;
    for (int64_t r = region.row_begin; r < region.row_end; ++r) {
      for (int64_t c = region.col_begin; c < region.col_end; ++c) {
        ASSERT_EQ(part[(r - region.row_begin) * width + c - region.col_begin], whole[r * cols + c]) << name;
      }
    }
    EXPECT_ERROR_CONTAINS(DecodeRegionToFloat(view, scale_ptr, b, bc, {0, rows + 1, 0, -1}), "has no rows");
  }
}

// Rewrites the golden checkpoint with one change and expects LoadModelWeights to refuse it by name.
class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override { loaded_ = std::make_unique<Loaded>(Open("golden/tiny-dense")); }

  // Copies every tensor except `drop`, replacing `replace` by (dtype, shape, bytes all `fill`) when given, plus
  // `extra`.
  Result<ModelWeights> LoadWith(const std::string& drop, const std::string& replace = "", DType dtype = DType::kF32,
                                std::vector<int64_t> shape = {}, const std::string& extra = "", uint8_t fill = 0) {
    SafetensorsWriter writer;
    for (const TensorInfo& info : loaded_->checkpoint.tensors()) {
      if (info.name == drop) continue;
      TensorView view = loaded_->checkpoint.ViewOf(info);
      if (info.name == replace) {
        int64_t n = 1;
        for (int64_t e : shape) n *= e;
        std::vector<uint8_t> zeros(n * DTypeSize(dtype), fill);
        EXPECT_OK(writer.Add(info.name, dtype, shape, zeros));
      } else {
        EXPECT_OK(writer.Add(info.name, info.dtype, info.shape, view.bytes));
      }
    }
    if (!extra.empty()) {
      const float one = 1.0f;
      EXPECT_OK(writer.AddF32(extra, {1}, std::span<const float>(&one, 1)));
    }
    const std::string dir = testing::MakeTempDir("broken");
    EXPECT_OK(writer.WriteTo(dir + "/model.safetensors"));
    checkpoint_ = std::make_unique<Checkpoint>(Checkpoint::Open(dir).value());
    return LoadModelWeights(*checkpoint_, loaded_->config);
  }

  std::unique_ptr<Loaded> loaded_;
  std::unique_ptr<Checkpoint> checkpoint_;
};

TEST_F(BrokenCheckpoint, MissingTensor) {
  EXPECT_ERROR_CONTAINS(LoadWith("model.language_model.layers.2.self_attn.A_log"),
                        "tensor 'model.language_model.layers.2.self_attn.A_log' is missing");
}
TEST_F(BrokenCheckpoint, MissingScale) {
  EXPECT_ERROR_CONTAINS(LoadWith("model.language_model.layers.0.mlp.up_proj.weight_scale_inv"),
                        "has no 'model.language_model.layers.0.mlp.up_proj.weight_scale_inv'");
}
TEST_F(BrokenCheckpoint, WrongShape) {
  EXPECT_ERROR_CONTAINS(LoadWith("", "lm_head.weight", DType::kBF16, {255, 64}),
                        "'lm_head.weight' has shape [255, 64]; expected [256, 64]");
}
TEST_F(BrokenCheckpoint, WrongScaleShape) {
  EXPECT_ERROR_CONTAINS(LoadWith("", "model.language_model.layers.0.mlp.up_proj.weight_scale_inv", DType::kF32, {2, 1}),
                        "expected F32 [1, 1]");
}
TEST_F(BrokenCheckpoint, WrongDtype) {
  EXPECT_ERROR_CONTAINS(LoadWith("", "model.language_model.norm.weight", DType::kI32, {64}),
                        "has dtype I32; expected BF16, F16 or F32");
}
TEST_F(BrokenCheckpoint, UnknownTensor) {
  EXPECT_ERROR_CONTAINS(LoadWith("", "", DType::kF32, {}, "model.language_model.layers.0.mystery"),
                        "'model.language_model.layers.0.mystery' which GLM-5.3-Flash");
}
TEST_F(BrokenCheckpoint, NonFiniteWeightsAreRefusedByName) {
  // Bytes 0xFF make every F32 a NaN (exponent all ones, mantissa non-zero).
  EXPECT_ERROR_CONTAINS(LoadWith("", "model.language_model.norm.weight", DType::kF32, {64}, "", 0xFF),
                        "tensor 'model.language_model.norm.weight' holds 64 non-finite values");
}
TEST_F(BrokenCheckpoint, VisionTensorsAreSkipped) {
  EXPECT_OK(LoadWith("", "", DType::kF32, {}, "model.visual.blocks.0.attn.qkv.weight").status());
}

}  // namespace
}  // namespace glint
