// The trained default model models/glint-tiny (docs/training.md) against what the PyTorch training tool
// (tools/train, a second, independent implementation) recorded for it:
//  - glint's tokenizer loads its tokenizer.json and encodes held-out text to the ids the training data used;
//  - the checkpoint loads (exactly ExpectedTensors, FP8 where the release is FP8);
//  - the fp32 reference model's logits on held-out sequences match the PyTorch float64 logits on the same
//    exported weights, and its held-out perplexity is the recorded one.
// Tolerances: fp32 vs float64 on the golden fixtures deviates ≤ 2.5e-5 × std(logits); we allow 1e-3 × std (the
// golden bound) and require identical top-1 tokens; the NLL is a mean of ~200 log-probabilities, each within
// ~1e-5, so 1e-4 relative catches any real disagreement.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/checkpoint_schema.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace glint {
namespace {

constexpr double kLogitTolerance = 1e-3;  // × std(logits)
constexpr double kNllRelativeTolerance = 1e-4;

std::string ModelDir() { return testing::TestDataPath("../../models/glint-tiny"); }
std::string Data(const std::string& name) { return testing::TestDataPath("glint-tiny/" + name); }

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

TEST(GlintTiny, TokenizerEncodesHeldOutTextAsTheTrainingDataDid) {
  ASSERT_OK_AND_ASSIGN(Tokenizer tokenizer, Tokenizer::Load(ModelDir()));
  const nlohmann::json cases = ReadJson(Data("tokenizer_cases.json"));
  ASSERT_GE(cases.size(), 10u);
  for (const auto& entry : cases) {
    const std::string text = entry["text"].get<std::string>();
    ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, tokenizer.Encode(text));
    EXPECT_EQ(ids, entry["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(tokenizer.Decode(ids), text);
  }
}

TEST(GlintTiny, SpecialTokensSitAtTheReleaseOffsetsFromTheEnd) {
  ASSERT_OK_AND_ASSIGN(Tokenizer tokenizer, Tokenizer::Load(ModelDir()));
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(ModelDir()));
  const int64_t v = config.vocab_size;
  EXPECT_EQ(tokenizer.TokenId("<|endoftext|>"), v - 60);
  EXPECT_EQ(tokenizer.TokenId("[gMASK]"), v - 58);
  EXPECT_EQ(tokenizer.TokenId("<sop>"), v - 56);
  EXPECT_EQ(tokenizer.TokenId("<|user|>"), v - 53);
  EXPECT_EQ(tokenizer.TokenId("<|assistant|>"), v - 52);
  EXPECT_EQ(tokenizer.TokenId("<think>"), v - 39);
  EXPECT_EQ(tokenizer.TokenId("</think>"), v - 38);
  EXPECT_TRUE(tokenizer.IsSpecial(v - 53));
  EXPECT_LE(tokenizer.vocab_size(), v);
}

TEST(GlintTiny, CheckpointHasTheReleaseLayout) {
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(ModelDir()));
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(ModelDir()));
  int64_t fp8 = 0;
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    const TensorInfo* info = checkpoint.Find(spec.name);
    ASSERT_NE(info, nullptr) << spec.name;
    if (spec.storage == TensorStorage::kFp8Block) {
      EXPECT_EQ(info->dtype, DType::kF8E4M3) << spec.name;
      EXPECT_NE(checkpoint.Find(spec.name + "_scale_inv"), nullptr) << spec.name;
      ++fp8;
    }
  }
  EXPECT_GT(fp8, 0);
  // The layer pattern the issue asks for: 3 KDA : 1 DSA with the last layer KDA, MoE after a dense first layer.
  ASSERT_GE(config.num_hidden_layers, 5);
  EXPECT_EQ(config.attention_kinds.back(), AttentionKind::kKda);
  EXPECT_EQ(config.attention_kinds[3], AttentionKind::kDsa);
  EXPECT_EQ(config.mlp_kinds[0], MlpKind::kDense);
  EXPECT_EQ(config.mlp_kinds.back(), MlpKind::kMoe);
  EXPECT_EQ(config.hc_mult, 4);
  EXPECT_EQ(config.num_nextn_predict_layers, 1);
}

TEST(GlintTiny, ReferenceLogitsMatchPyTorchAndPerplexityIsTheRecordedOne) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReferenceModel> model, ReferenceModel::Load(ModelDir()));
  const int64_t vocab = model->config().vocab_size;
  ASSERT_OK_AND_ASSIGN(auto sequences, ReadTokenSequences(Data("crosscheck_tokens.json"), vocab));
  ASSERT_OK_AND_ASSIGN(Checkpoint reference, Checkpoint::Open(Data("crosscheck_logits.safetensors")));
  const nlohmann::json expected = ReadJson(Data("expected.json"));
  // The first sequence must reach past the dense regime, so the indexer's choices are part of the check.
  ASSERT_GT(static_cast<int64_t>(sequences[0].size()), model->config().DenseRegimeTokens());

  double nll = 0;
  int64_t predicted = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const std::vector<int32_t>& tokens = sequences[i];
    SequenceState state = model->NewSequence();
    std::vector<EntryOutput> outputs;
    BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
    ASSERT_OK(model->Forward({&entry, 1}, outputs));
    const std::vector<float>& ours = outputs[0].logits;  // [T, V]
    ASSERT_OK_AND_ASSIGN(TensorView view, reference.View("logits." + std::to_string(i)));
    ASSERT_EQ(view.dtype(), DType::kF32);
    std::span<const float> theirs = view.As<float>();
    ASSERT_EQ(ours.size(), theirs.size());
    const std::vector<float> theirs_copy(theirs.begin(), theirs.end());
    const double relative_error = testing::MaxAbsError(ours, theirs_copy) / testing::StdDev(theirs_copy);
    EXPECT_LT(relative_error, kLogitTolerance) << "sequence " << i;
    std::printf("sequence %zu (%zu tokens): max |logit error| = %.2e x std(logits)\n", i, tokens.size(),
                relative_error);
    for (size_t t = 0; t < tokens.size(); ++t) {
      const float* row = ours.data() + t * vocab;
      const float* their_row = theirs_copy.data() + t * vocab;
      EXPECT_EQ(std::max_element(row, row + vocab) - row, std::max_element(their_row, their_row + vocab) - their_row)
          << "sequence " << i << " position " << t;
      if (t + 1 < tokens.size()) {  // −log p(x_{t+1} | x_≤t), log-sum-exp in double
        const double max = *std::max_element(row, row + vocab);
        double sum = 0;
        for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
        nll += max + std::log(sum) - row[tokens[t + 1]];
        ++predicted;
      }
    }
  }
  EXPECT_EQ(predicted, expected["crosscheck_predicted_tokens"].get<int64_t>());
  const double recorded = expected["crosscheck_nll_per_token"].get<double>();
  std::printf("held-out NLL %.6f nats/token (perplexity %.3f); PyTorch recorded %.6f\n", nll / predicted,
              std::exp(nll / predicted), recorded);
  EXPECT_NEAR(nll / predicted, recorded, kNllRelativeTolerance * recorded)
      << "perplexity " << std::exp(nll / predicted) << " vs recorded " << std::exp(recorded);
}

}  // namespace
}  // namespace glint
