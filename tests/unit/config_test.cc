#include "io/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "base/file.h"
#include "io/checkpoint_schema.h"
#include "test_util.h"

namespace glint {
namespace {

using Json = nlohmann::json;

Json ReleaseConfig() {
  auto text = ReadFile(testing::TestDataPath("glm-5.3-flash-config.json"));
  EXPECT_TRUE(text.ok());
  return Json::parse(*text);
}

TEST(ModelConfig, ParsesTheReleaseConfig) {
  ASSERT_OK_AND_ASSIGN(ModelConfig c, LoadModelConfig(testing::TestDataPath("glm-5.3-flash-config.json")));
  EXPECT_EQ(c.vocab_size, 154880);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_hidden_layers, 45);
  EXPECT_EQ(c.NumLayersOf(AttentionKind::kKda), 34);
  EXPECT_EQ(c.NumLayersOf(AttentionKind::kDsa), 11);
  for (int i = 0; i < 45; ++i) {
    EXPECT_EQ(c.attention_kinds[i], i % 4 == 3 ? AttentionKind::kDsa : AttentionKind::kKda) << i;
    EXPECT_EQ(c.mlp_kinds[i], i < 3 ? MlpKind::kDense : MlpKind::kMoe) << i;
  }
  EXPECT_EQ(c.kda_num_heads, 64);
  EXPECT_EQ(c.kda_head_dim, 128);
  EXPECT_EQ(c.kda_gate_lower_bound, -5.0f);
  EXPECT_EQ(c.index_kpool, 4);
  EXPECT_EQ(c.IndexTopkPools(), 512);
  EXPECT_EQ(c.DenseRegimeTokens(), 2051);
  EXPECT_EQ(c.n_routed_experts, 288);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{154820, 154827, 154829}));
  EXPECT_TRUE(c.fp8);
  EXPECT_EQ(c.fp8_block_rows, 128);
  EXPECT_TRUE(c.HasMtp());
  EXPECT_TRUE(c.vision.present);
  EXPECT_EQ(c.vision.depth, 24);
}

TEST(ModelConfig, ParsesTheGoldenConfigs) {
  for (const char* name : {"golden/tiny-dense", "golden/tiny-sparse"}) {
    ASSERT_OK_AND_ASSIGN(ModelConfig c, LoadModelConfig(testing::TestDataPath(name)));
    ASSERT_OK_AND_ASSIGN(GenerationConfig g, LoadGenerationConfig(testing::TestDataPath(name), c));
    EXPECT_EQ(g.top_p, 0.95f);
    EXPECT_EQ(g.eos_token_ids, c.eos_token_ids);
  }
}

TEST(ModelConfig, FlatTextOnlyLayoutIsAccepted) {
  Json root = ReleaseConfig();
  Json flat = root["text_config"];
  flat["architectures"] = root["architectures"];
  ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(flat.dump()));
  EXPECT_EQ(c.num_hidden_layers, 45);
  EXPECT_FALSE(c.fp8);
}

// Each mutation of the release config must be refused with a message naming the key and what was expected.
TEST(ModelConfig, RefusesContradictionsAndUnsupportedValues) {
  struct Case {
    std::string what;
    std::function<void(Json&)> mutate;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"rope", [](Json& t) { t["qk_rope_head_dim"] = 64; }, "'qk_rope_head_dim' is 64; glint supports only 0"},
      {"mhc off", [](Json& t) { t["mhc"] = false; }, "'mhc' is false"},
      {"shared indexer", [](Json& t) { t["indexer_types"][5] = "shared"; }, "'shared' at layer 5"},
      {"layer_types length", [](Json& t) { t["layer_types"].erase(0); }, "44 entries"},
      {"layer_types value", [](Json& t) { t["layer_types"][0] = "full_attention"; }, "'full_attention' at layer 0"},
      {"kda_layers 1-based",
       [](Json& t) {
         for (auto& i : t["linear_attn_config"]["kda_layers"]) i = i.get<int>() + 1;
       },
       "kda_layers"},
      {"full_attn_layers", [](Json& t) { t["linear_attn_config"]["full_attn_layers"][0] = 2; }, "full_attn_layers"},
      {"mlp types vs first_k", [](Json& t) { t["first_k_dense_replace"] = 2; }, "first_k_dense_replace = 2"},
      {"topk % kpool", [](Json& t) { t["index_topk"] = 2050; }, "a multiple of index_kpool"},
      {"kpool missing", [](Json& t) { t.erase("index_kpool"); }, "missing 'index_kpool'"},
      {"kv heads", [](Json& t) { t["num_key_value_heads"] = 8; }, "num_key_value_heads"},
      {"qk_head_dim", [](Json& t) { t["qk_head_dim"] = 192; }, "qk_nope_head_dim + qk_rope_head_dim"},
      {"scoring", [](Json& t) { t["scoring_func"] = "softmax"; }, "'scoring_func' is 'softmax'"},
      {"groups", [](Json& t) { t["n_group"] = 8; }, "n_group/topk_group"},
      {"experts per tok", [](Json& t) { t["num_experts_per_tok"] = 300; }, "at most n_routed_experts"},
      {"eos range", [](Json& t) { t["eos_token_id"] = Json::array({154880}); }, "a token id in [0, 154880)"},
      {"wrong type", [](Json& t) { t["hidden_size"] = "4096"; }, "'hidden_size' is \"4096\"; expected an integer"},
      {"negative", [](Json& t) { t["hidden_size"] = -1; }, "expected a positive integer"},
      {"missing", [](Json& t) { t.erase("vocab_size"); }, "missing 'vocab_size'"},
      {"mtp layers", [](Json& t) { t["num_nextn_predict_layers"] = 3; }, "num_nextn_predict_layers"},
      {"tied", [](Json& t) { t["tie_word_embeddings"] = true; }, "tie_word_embeddings"},
      {"model type", [](Json& t) { t["model_type"] = "llama"; }, "'model_type' is 'llama'"},
      {"gate bound", [](Json& t) { t["linear_attn_config"].erase("gate_lower_bound"); }, "gate_lower_bound"},
      {"flat vs nested", [](Json& t) { t["linear_num_heads"] = 32; }, "'linear_num_heads' is 32"},
  };
  for (const Case& c : cases) {
    Json root = ReleaseConfig();
    c.mutate(root["text_config"]);
    SCOPED_TRACE(c.what);
    EXPECT_ERROR_CONTAINS(ParseModelConfig(root.dump()), c.expected);
  }
  Json root = ReleaseConfig();
  root["architectures"] = Json::array({"LlamaForCausalLM"});
  EXPECT_ERROR_CONTAINS(ParseModelConfig(root.dump()), "'LlamaForCausalLM'");
  root = ReleaseConfig();
  root["quantization_config"]["quant_method"] = "gptq";
  EXPECT_ERROR_CONTAINS(ParseModelConfig(root.dump()), "'quant_method' is 'gptq'");
  EXPECT_ERROR_CONTAINS(ParseModelConfig("{"), "not valid JSON");
  EXPECT_ERROR_CONTAINS(ParseModelConfig("[]"), "not a JSON object");
  EXPECT_ERROR_CONTAINS(LoadModelConfig("/nonexistent/dir"), "cannot open");
}

// Hostile configs (issue 18, finding 7): deep nesting overflowed the stack, and sizes no checkpoint has made
// `inspect` and `run` allocate until bad_alloc. Both are refused while parsing, before anything is sized.
TEST(ModelConfig, RefusesDeepNestingAndImplausibleSizes) {
  const std::string deep = "{\"x\":" + std::string(300000, '[') + std::string(300000, ']') + "}";
  EXPECT_ERROR_CONTAINS(ParseModelConfig(deep), "nested more than 64 levels");
  EXPECT_ERROR_CONTAINS(ParseGenerationConfig(deep, ModelConfig{}), "nested more than 64 levels");
  const std::pair<const char*, int64_t> too_large[] = {{"n_routed_experts", 1000000000},
                                                       {"num_hidden_layers", 1000000},
                                                       {"vocab_size", int64_t{1} << 30},
                                                       {"hidden_size", int64_t{1} << 20},
                                                       {"moe_intermediate_size", int64_t{1} << 30}};
  for (const auto& [key, value] : too_large) {
    Json root = ReleaseConfig();
    root["text_config"][key] = value;
    EXPECT_ERROR_CONTAINS(ParseModelConfig(root.dump()), StrCat("'", key, "' is ", value, "; expected at most"));
  }
  // Each size plausible alone, the product not: 4096 experts × 2^18 wide is petabytes.
  Json root = ReleaseConfig();
  root["text_config"]["n_routed_experts"] = 4096;
  root["text_config"]["moe_intermediate_size"] = 1 << 18;
  EXPECT_ERROR_CONTAINS(ParseModelConfig(root.dump()), "billion parameters; expected at most 2199 billion");
}

TEST(ModelConfig, MlpKindsDefaultToThreeDenseLayers) {
  Json root = ReleaseConfig();
  root["text_config"].erase("mlp_layer_types");
  root["text_config"].erase("first_k_dense_replace");
  ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(root.dump()));
  EXPECT_EQ(c.NumLayersOf(MlpKind::kDense), 3);
}

TEST(GenerationConfig, RejectsBadValues) {
  ASSERT_OK_AND_ASSIGN(ModelConfig c, LoadModelConfig(testing::TestDataPath("golden/tiny-dense")));
  EXPECT_ERROR_CONTAINS(ParseGenerationConfig(R"({"top_p": 1.5})", c), "'top_p' is 1.5");
  EXPECT_ERROR_CONTAINS(ParseGenerationConfig(R"({"eos_token_id": 999})", c), "eos_token_id");
  ASSERT_OK_AND_ASSIGN(GenerationConfig g, ParseGenerationConfig(R"({"temperature": 0.6})", c));
  EXPECT_EQ(g.eos_token_ids, c.eos_token_ids);
}

// The tensor inventory of the release must reproduce the published parameter counts (model-glm53.md §15).
TEST(CheckpointSchema, ReleaseParameterCountsMatchTheModelCard) {
  ASSERT_OK_AND_ASSIGN(ModelConfig c, LoadModelConfig(testing::TestDataPath("glm-5.3-flash-config.json")));
  double by_group[kNumTensorGroups] = {};
  for (const TensorSpec& spec : ExpectedTensors(c)) {
    double n = 1;
    for (int64_t extent : spec.shape) n *= static_cast<double>(extent);
    by_group[static_cast<int>(spec.group)] += n;
  }
  auto group = [&](TensorGroup g) { return by_group[static_cast<int>(g)]; };
  EXPECT_EQ(group(TensorGroup::kEmbedding), 2.0 * 154880 * 4096);
  EXPECT_EQ(group(TensorGroup::kRoutedExperts), 42.0 * 288 * 3 * 2048 * 4096);
  EXPECT_EQ(group(TensorGroup::kSharedExperts), 42.0 * 3 * 2048 * 4096);
  EXPECT_EQ(group(TensorGroup::kDenseMlp), 3.0 * 3 * 12288 * 4096);
  EXPECT_NEAR(group(TensorGroup::kKda) / 34, 137.7e6, 0.1e6);
  double trunk = 0;
  for (int g = 0; g < kNumTensorGroups; ++g) {
    if (g != static_cast<int>(TensorGroup::kMtp)) trunk += by_group[g];
  }
  EXPECT_NEAR(trunk, 313.3e9, 0.1e9);
  EXPECT_NEAR(group(TensorGroup::kMtp), 7.43e9, 0.01e9);
}

}  // namespace
}  // namespace glint
