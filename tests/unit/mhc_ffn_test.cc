// mHC, RMSNorm, dense MLP, MoE routing and the final norm + lm_head, each checked in isolation against the golden
// intermediates: every step starts from the golden input of that step, so a failure names the first component
// that drifts. Tolerance: the golden README's bound for an fp32 implementation, 1e-4 relative RMS per
// intermediate (≈10× the fp32 deviation it measured); expert choices must be identical.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "io/config.h"
#include "kernels/reference.h"
#include "model/ffn.h"
#include "model/mhc.h"
#include "model/weights.h"
#include "test_util.h"

namespace glint {
namespace {

constexpr double kIntermediateTolerance = 1e-4;

class GoldenLayers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = testing::TestDataPath("golden/" + GetParam());
    config_ = LoadModelConfig(dir).value();
    checkpoint_ = std::make_unique<Checkpoint>(Checkpoint::Open(dir).value());
    weights_ = std::make_unique<ModelWeights>(LoadModelWeights(*checkpoint_, config_).value());
    golden_ = std::make_unique<testing::GoldenOutputs>(GetParam());
  }
  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<testing::GoldenOutputs> golden_;
};

TEST_P(GoldenLayers, MhcNormsAndFfnMatchLayerByLayer) {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size, hc = c.hc_mult;
  const std::vector<float> embedding = golden_->Floats("hidden.emb");
  const int64_t tokens = static_cast<int64_t>(embedding.size()) / d;
  std::vector<float> previous_streams(tokens * hc * d);  // [T, hc, D]
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t s = 0; s < hc; ++s) std::copy_n(&embedding[t * d], d, &previous_streams[(t * hc + s) * d]);
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const LayerWeights& layer = weights_->layers[l];
    const std::string p = "layer." + std::to_string(l) + ".";
    const std::vector<float> attn_out = golden_->Floats(p + "attn_out");
    const std::vector<float> ffn_out = golden_->Floats(p + "ffn_out");
    std::vector<float> attn_in(tokens * d), ffn_in(tokens * d), ffn_result(tokens * d);
    std::vector<float> streams = previous_streams;
    std::vector<RouterChoice> choices;
    std::vector<float> collapsed(d);
    for (int64_t t = 0; t < tokens; ++t) {
      float* x = &streams[t * hc * d];
      MhcCoefficients attn = MhcComputeCoefficients(layer.hc_attn, c, x);
      MhcRead(attn, x, hc, d, collapsed.data());
      ref::RmsNorm(collapsed.data(), layer.input_layernorm.data(), d, c.rms_norm_eps, &attn_in[t * d]);
      MhcWrite(attn, &attn_out[t * d], hc, d, x);
      MhcCoefficients ffn = MhcComputeCoefficients(layer.hc_ffn, c, x);
      MhcRead(ffn, x, hc, d, collapsed.data());
      ref::RmsNorm(collapsed.data(), layer.post_attention_layernorm.data(), d, c.rms_norm_eps, &ffn_in[t * d]);
      // The FFN runs on the golden ffn_in so its error is measured alone.
      const std::vector<float> golden_ffn_in = golden_->Floats(p + "ffn_in");
      if (layer.mlp_kind == MlpKind::kDense) {
        SwiGluMlp(layer.mlp, c.swiglu_limit, &golden_ffn_in[t * d], &ffn_result[t * d]);
      } else {
        choices.push_back(MoeForward(layer.moe, c, &golden_ffn_in[t * d], &ffn_result[t * d]));
      }
      MhcWrite(ffn, &ffn_out[t * d], hc, d, x);
    }
    EXPECT_LT(testing::RelativeRmsError(attn_in, golden_->Floats(p + "attn_in")), kIntermediateTolerance);
    EXPECT_LT(testing::RelativeRmsError(ffn_in, golden_->Floats(p + "ffn_in")), kIntermediateTolerance);
    EXPECT_LT(testing::RelativeRmsError(ffn_result, ffn_out), kIntermediateTolerance);
    EXPECT_LT(testing::RelativeRmsError(streams, golden_->Floats(p + "streams")), kIntermediateTolerance);
    if (layer.mlp_kind == MlpKind::kMoe) {
      const std::vector<int32_t> experts = golden_->Ints(p + "moe_experts");
      const std::vector<float> weights = golden_->Floats(p + "moe_weights");
      const std::vector<float> margins = golden_->Floats(p + "moe_margin");
      const int64_t k = c.num_experts_per_tok;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < k; ++i) {
          ASSERT_EQ(choices[t].experts[i], experts[t * k + i]) << "token " << t;
          EXPECT_NEAR(choices[t].weights[i], weights[t * k + i], 1e-5 * std::fabs(weights[t * k + i]) + 1e-7);
        }
        EXPECT_NEAR(choices[t].margin, margins[t], 1e-5);
      }
    }
    previous_streams = golden_->Floats(p + "streams");
  }
  // Final collapse, norm and lm_head from the golden last streams.
  std::vector<float> normed(tokens * d), logits(tokens * c.vocab_size), mean(d);
  for (int64_t t = 0; t < tokens; ++t) {
    MhcCollapseMean(&previous_streams[t * hc * d], hc, d, mean.data());
    ref::RmsNorm(mean.data(), weights_->final_norm.data(), d, c.rms_norm_eps, &normed[t * d]);
  }
  EXPECT_LT(testing::RelativeRmsError(normed, golden_->Floats("final.normed")), kIntermediateTolerance);
  const std::vector<float> golden_normed = golden_->Floats("final.normed");
  ref::Linear(golden_normed.data(), tokens, weights_->lm_head.data.data(), c.vocab_size, d, logits.data());
  const std::vector<float> golden_logits = golden_->Floats("logits.0");
  EXPECT_LT(testing::MaxAbsError(logits, golden_logits), 1e-3 * testing::StdDev(golden_logits));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenLayers, ::testing::Values("tiny-dense", "tiny-sparse"));

TEST(Router, NanScoresNeverSelectAnOutOfRangeExpert) {
  ModelConfig c;
  c.hidden_size = 2;
  c.n_routed_experts = 4;
  c.num_experts_per_tok = 2;
  c.routed_scaling_factor = 2.5f;
  MoeWeights w;
  w.router = {4, 2, {1, 0, 0, 1, NAN, NAN, -1, 0}};
  w.e_score_correction_bias = {0, 0, 0, 0};
  const float x[2] = {1.0f, 2.0f};
  RouterChoice choice = Route(w, c, x);
  ASSERT_EQ(choice.experts.size(), 2u);
  for (int32_t e : choice.experts) {
    EXPECT_GE(e, 0);
    EXPECT_LT(e, 4);
    EXPECT_NE(e, 2);  // the NaN expert ranks last
  }
  // Unbiased, normalised, × 2.5: the two chosen weights sum to 2.5.
  EXPECT_NEAR(choice.weights[0] + choice.weights[1], 2.5f, 1e-6);
}

TEST(Router, BiasDecidesTheChoiceButNotTheWeights) {
  ModelConfig c;
  c.hidden_size = 1;
  c.n_routed_experts = 3;
  c.num_experts_per_tok = 1;
  c.routed_scaling_factor = 1.0f;
  c.norm_topk_prob = false;
  MoeWeights w;
  w.router = {3, 1, {2.0f, 1.0f, 0.0f}};
  w.e_score_correction_bias = {0.0f, 0.0f, 1.0f};  // lifts expert 2 (sigmoid 0.5 + 1) above expert 0 (0.88)
  const float x[1] = {1.0f};
  RouterChoice choice = Route(w, c, x);
  ASSERT_EQ(choice.experts, std::vector<int32_t>{2});
  EXPECT_FLOAT_EQ(choice.weights[0], 0.5f);  // unbiased sigmoid(0)
}

TEST(SwiGlu, GateIsClampedAboveOnlyAndUpOnBothSides) {
  MlpWeights w;
  w.gate_proj = {2, 1, {20.0f, -20.0f}};
  w.up_proj = {2, 1, {-30.0f, 30.0f}};
  w.down_proj = {1, 2, {1.0f, 1.0f}};
  const float x[1] = {1.0f};
  float y[1];
  SwiGluMlp(w, 10.0f, x, y);
  // unit 0: silu(min(20,10)) · clamp(−30) = silu(10) · −10; unit 1: silu(−20) (not clamped below) · 10.
  const double expected = 10.0 / (1 + std::exp(-10.0)) * -10.0 + (-20.0 / (1 + std::exp(20.0))) * 10.0;
  EXPECT_NEAR(y[0], expected, 1e-4);
}

}  // namespace
}  // namespace glint
