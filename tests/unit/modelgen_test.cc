// glint make-tiny: the written checkpoint loads, has exactly the schema's tensors with their release storage,
// holds the intended values within the rounding of its formats, is deterministic, and has a working tokenizer.
#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "base/file.h"
#include "io/census.h"
#include "io/checkpoint_schema.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "modelgen/make_tiny.h"
#include "modelgen/presets.h"
#include "modelgen/random_weights.h"
#include "modelgen/safetensors_stream.h"
#include "quant/formats.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace glint {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

// One default-preset model per test binary (generation takes about a second).
const std::string& DefaultModelDir() {
  static const std::string* dir = [] {
    auto* path = new std::string(JoinPath(testing::MakeTempDir("modelgen"), "tiny"));
    MakeTinyOptions options;
    options.out_dir = *path;
    auto report = MakeTinyModel(options);
    GLINT_CHECK(report.ok()) << report.status().ToString();
    return path;
  }();
  return *dir;
}

std::string ReadOrDie(const std::string& path) {
  auto text = ReadFile(path);
  GLINT_CHECK(text.ok()) << text.status().ToString();
  return *text;
}

uint64_t Fnv1a(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

const char* kFiles[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                        "tokenizer_config.json"};

TEST(MakeTiny, ConfigLoadsWithThePresetValues) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(DefaultModelDir()));
  EXPECT_EQ(config.vocab_size, 2048);
  EXPECT_EQ(config.hidden_size, 256);
  ASSERT_EQ(config.num_hidden_layers, 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(config.attention_kinds[i], i % 4 == 3 ? AttentionKind::kDsa : AttentionKind::kKda) << i;
    EXPECT_EQ(config.mlp_kinds[i], i == 0 ? MlpKind::kDense : MlpKind::kMoe) << i;
  }
  EXPECT_EQ(config.n_routed_experts, 16);
  EXPECT_EQ(config.num_experts_per_tok, 4);
  EXPECT_EQ(config.n_shared_experts, 1);
  EXPECT_EQ(config.kda_num_heads, 4);
  EXPECT_EQ(config.kda_head_dim, 64);
  EXPECT_EQ(config.num_attention_heads, 4);
  EXPECT_EQ(config.q_lora_rank, 128);
  EXPECT_EQ(config.kv_lora_rank, 64);
  EXPECT_EQ(config.qk_head_dim, 64);
  EXPECT_EQ(config.v_head_dim, 64);
  EXPECT_EQ(config.index_n_heads, 4);
  EXPECT_EQ(config.index_head_dim, 64);
  EXPECT_EQ(config.DenseRegimeTokens(), 67);
  EXPECT_EQ(config.hc_mult, 4);
  EXPECT_TRUE(config.HasMtp());
  EXPECT_EQ(config.pad_token_id, 2048 - 60);
  EXPECT_EQ(config.eos_token_ids, (std::vector<int64_t>{1988, 1995, 1997}));
  EXPECT_TRUE(config.fp8);
  EXPECT_EQ(config.fp8_block_rows, 128);
  ASSERT_OK_AND_ASSIGN(GenerationConfig generation, LoadGenerationConfig(DefaultModelDir(), config));
  EXPECT_FLOAT_EQ(generation.temperature, 1.0f);
  EXPECT_FLOAT_EQ(generation.top_p, 0.95f);
  EXPECT_EQ(generation.eos_token_ids, config.eos_token_ids);
}

TEST(MakeTiny, ConfigHasTheGoldenFixtureKeys) {
  // Same keys, at every level, as the golden fixture's release-layout config.
  using Json = nlohmann::json;
  const Json golden = Json::parse(ReadOrDie(testing::TestDataPath("golden/tiny-dense/config.json")));
  const Json made = Json::parse(ReadOrDie(JoinPath(DefaultModelDir(), "config.json")));
  std::function<void(const Json&, const Json&, const std::string&)> same_keys = [&](const Json& a, const Json& b,
                                                                                    const std::string& where) {
    ASSERT_TRUE(b.is_object()) << where;
    for (auto it = a.begin(); it != a.end(); ++it) {
      ASSERT_TRUE(b.contains(it.key())) << where << "." << it.key();
      if (it.value().is_object()) same_keys(it.value(), b[it.key()], where + "." + it.key());
    }
    EXPECT_EQ(a.size(), b.size()) << where;
  };
  same_keys(golden, made, "config");
}

// The text schema's tensors, then the vision tower's (docs/vision.md).
std::vector<TensorSpec> TextAndVisionTensors(const ModelConfig& config) {
  std::vector<TensorSpec> specs = ExpectedTensors(config);
  for (TensorSpec& spec : VisionTowerTensors(config.vision)) specs.push_back(std::move(spec));
  return specs;
}

TEST(MakeTiny, CheckpointHoldsExactlyTheSchemaTensors) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(DefaultModelDir()));
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(DefaultModelDir()));
  size_t expected_count = 0;
  ASSERT_FALSE(VisionTowerTensors(config.vision).empty());
  for (const TensorSpec& spec : TextAndVisionTensors(config)) {
    const TensorInfo* info = checkpoint.Find(spec.name);
    ASSERT_NE(info, nullptr) << spec.name;
    EXPECT_EQ(info->shape, spec.shape) << spec.name;
    ++expected_count;
    switch (spec.storage) {
      case TensorStorage::kFp8Block: {
        EXPECT_EQ(info->dtype, DType::kF8E4M3) << spec.name;
        const TensorInfo* scale = checkpoint.Find(spec.name + "_scale_inv");
        ASSERT_NE(scale, nullptr) << spec.name;
        EXPECT_EQ(scale->dtype, DType::kF32);
        EXPECT_EQ(scale->shape, ScaleShape(spec.shape, 128, 128)) << spec.name;
        ++expected_count;
        break;
      }
      case TensorStorage::kBf16:
        EXPECT_EQ(info->dtype, DType::kBF16) << spec.name;
        break;
      case TensorStorage::kF32:
        EXPECT_EQ(info->dtype, DType::kF32) << spec.name;
        break;
    }
  }
  EXPECT_EQ(checkpoint.tensors().size(), expected_count);  // nothing else
  EXPECT_EQ(checkpoint.metadata().at("generator"), "glint make-tiny");
}

// Every stored value is the intended (generated) value rounded to its format: BF16 and F32 exactly, FP8 within
// half an e4m3 step of value/scale (relative 2^-4 for normals, absolute 2^-10·scale for subnormals), and each
// block's scale is its amax/448 so its largest code is ±448.
TEST(MakeTiny, StoredValuesAreTheIntendedValuesRounded) {
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(DefaultModelDir()));
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(DefaultModelDir()));
  const float* fp8 = Fp8E4m3Table();
  int64_t fp8_checked = 0;
  for (const TensorSpec& spec : TextAndVisionTensors(config)) {
    ASSERT_OK_AND_ASSIGN(InitRule rule, InitRuleFor(spec, config));
    ASSERT_OK_AND_ASSIGN(TensorView view, checkpoint.View(spec.name));
    const int64_t n = view.info->NumElements();
    std::vector<float> intended(n);
    FillTensorValues(rule, TensorStream(0, spec.name), 0, n, intended.data());
    if (spec.storage == TensorStorage::kBf16) {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, view.bytes.data() + 2 * i, 2);
        ASSERT_EQ(Bf16ToFloat(bits), RoundToBf16(intended[i])) << spec.name << "[" << i << "]";
      }
    } else if (spec.storage == TensorStorage::kF32) {
      for (int64_t i = 0; i < n; ++i) {
        float value;
        std::memcpy(&value, view.bytes.data() + 4 * i, 4);
        ASSERT_EQ(value, intended[i]) << spec.name << "[" << i << "]";
      }
    } else {
      ASSERT_OK_AND_ASSIGN(TensorView scale_view, checkpoint.View(spec.name + "_scale_inv"));
      const int64_t rows = spec.shape[0], cols = spec.shape[1], col_blocks = (cols + 127) / 128;
      std::vector<float> block_amax_code(scale_view.info->NumElements(), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t block = (r / 128) * col_blocks + c / 128;
          float scale;
          std::memcpy(&scale, scale_view.bytes.data() + 4 * block, 4);
          const float code = fp8[view.bytes[r * cols + c]];
          const float decoded = code * scale;
          const float want = intended[r * cols + c];
          const float bound = std::max(std::fabs(want) * 0.0625f, scale * 0.0009765625f) * 1.0001f;
          ASSERT_LE(std::fabs(decoded - want), bound) << spec.name << "[" << r << ", " << c << "]";
          block_amax_code[block] = std::max(block_amax_code[block], std::fabs(code));
          ++fp8_checked;
        }
      }
      for (float amax : block_amax_code) EXPECT_EQ(amax, 448.0f) << spec.name;
    }
  }
  EXPECT_GT(fp8_checked, 10'000'000);
}

TEST(MakeTiny, TokenizerLoadsAndRoundTrips) {
  ASSERT_OK_AND_ASSIGN(Tokenizer tokenizer, Tokenizer::Load(DefaultModelDir()));
  EXPECT_EQ(tokenizer.vocab_size(), 2048 - 25 + 1);  // last special <|video|> at V - 25
  for (const auto& slot : GlmSpecialTokenSlots()) {
    EXPECT_EQ(tokenizer.TokenId(slot.content), 2048 - slot.offset_from_end) << slot.content;
    EXPECT_TRUE(tokenizer.IsSpecial(static_cast<int32_t>(2048 - slot.offset_from_end)));
  }
  for (int32_t id = 0; id < 1988; ++id) EXPECT_FALSE(tokenizer.IsSpecial(id));
  ASSERT_OK_AND_ASSIGN(Ids prompt, tokenizer.Encode("[gMASK]<sop><|user|>Hello, lighthouse!<|assistant|><think>"));
  ASSERT_GE(prompt.size(), 5u);
  EXPECT_EQ(prompt[0], 1990);                  // [gMASK] = V − 58
  EXPECT_EQ(prompt[1], 1992);                  // <sop> = V − 56
  EXPECT_EQ(prompt[2], 1995);                  // <|user|> = V − 53
  EXPECT_EQ(prompt[prompt.size() - 2], 1996);  // <|assistant|> = V − 52
  EXPECT_EQ(prompt.back(), 2009);              // <think> = V − 39
  for (const std::string& text :
       {std::string("The keeper lights the lamp at a quarter past six."),
        std::string("数字 1234567 and emoji 😀, tabs\tand\n\nnewlines"), std::string("\xff\xfe broken \xe4\xbd")}) {
    ASSERT_OK_AND_ASSIGN(Ids ids, tokenizer.Encode(text, /*parse_special=*/false));
    EXPECT_EQ(tokenizer.Decode(ids), text);
    for (int32_t id : ids) EXPECT_LT(id, 1988);
  }
  ASSERT_OK_AND_ASSIGN(Ids common, tokenizer.Encode(" the lighthouse"));
  EXPECT_LE(common.size(), 3u);  // trained merges cover the corpus's frequent words
}

// The weights' scales keep the fp32 reference forward healthy: finite logits with a spread like the golden
// fixtures' (std ≈ 3), next-token choices that vary, over a prompt long enough (100 > 67 tokens) for the DSA
// indexer to drop pools, and an MTP draft.
TEST(MakeTiny, ReferenceForwardGivesHealthyLogits) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReferenceModel> model, ReferenceModel::Load(DefaultModelDir()));
  ASSERT_OK_AND_ASSIGN(Tokenizer tokenizer, Tokenizer::Load(DefaultModelDir()));
  std::string text = "[gMASK]<sop><|user|>";
  while (text.size() < 400) text += "The keeper climbs the steps and lights the lamp at a quarter past six. ";
  ASSERT_OK_AND_ASSIGN(Ids tokens, tokenizer.Encode(text));
  tokens.resize(100);
  SequenceState state = model->NewSequence();
  BatchEntry entry{tokens, &state, LogitsWanted::kAll, /*want_hidden=*/true};
  std::vector<EntryOutput> outputs;
  ASSERT_OK(model->Forward({&entry, 1}, outputs));
  const int64_t vocab = model->config().vocab_size;
  ASSERT_EQ(outputs[0].logits.size(), static_cast<size_t>(100 * vocab));
  std::set<int64_t> argmaxes;
  double mean_std = 0;
  for (int64_t t = 0; t < 100; ++t) {
    const float* row = outputs[0].logits.data() + t * vocab;
    double sum = 0, sum_squares = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      ASSERT_TRUE(std::isfinite(row[v])) << "position " << t << ", token " << v;
      sum += row[v];
      sum_squares += double{row[v]} * row[v];
    }
    const double mean = sum / vocab;
    mean_std += std::sqrt(sum_squares / vocab - mean * mean) / 100;
    argmaxes.insert(std::max_element(row, row + vocab) - row);
  }
  std::printf("logits: mean std %.2f over 100 positions, %zu distinct argmax tokens\n", mean_std, argmaxes.size());
  EXPECT_GT(mean_std, 1.0);
  EXPECT_LT(mean_std, 10.0);
  EXPECT_GE(argmaxes.size(), 10u);

  std::vector<float> draft;
  const Ids next = {tokens[1]};
  ASSERT_OK(model->MtpForward(state, {outputs[0].hidden.data(), static_cast<size_t>(model->config().hidden_size)}, next,
                              draft));
  ASSERT_EQ(draft.size(), static_cast<size_t>(vocab));
  for (float logit : draft) ASSERT_TRUE(std::isfinite(logit));
}

TEST(MakeTiny, TokenizerConfigHasTheChatTemplateAndSpecials) {
  const auto config = nlohmann::json::parse(ReadOrDie(JoinPath(DefaultModelDir(), "tokenizer_config.json")));
  const std::string chat_template = config.at("chat_template");
  for (const char* piece :
       {"[gMASK]<sop>", "<|system|>Reasoning Effort: ", "<|user|>", "<|assistant|><think>", "</think>", "<tools>",
        "<tool_call>", "<arg_key>", "<arg_value>", "<|observation|>", "<tool_response>"}) {
    EXPECT_NE(chat_template.find(piece), std::string::npos) << piece;
  }
  EXPECT_EQ(config.at("added_tokens_decoder").size(), GlmSpecialTokenSlots().size());
  EXPECT_EQ(config.at("added_tokens_decoder").at("1995").at("content"), "<|user|>");
  EXPECT_EQ(config.at("eos_token"), "<|endoftext|>");
  EXPECT_TRUE(config.at("bos_token").is_null());
}

TEST(MakeTiny, SameSeedSameBytesOtherSeedOtherWeights) {
  const std::string root = testing::MakeTempDir("modelgen-seed");
  MakeTinyOptions options;
  options.out_dir = JoinPath(root, "again");
  ASSERT_OK(MakeTinyModel(options).status());
  options.out_dir = JoinPath(root, "seed1");
  options.seed = 1;
  ASSERT_OK(MakeTinyModel(options).status());
  for (const char* file : kFiles) {
    const std::string first = ReadOrDie(JoinPath(DefaultModelDir(), file));
    EXPECT_EQ(first, ReadOrDie(JoinPath(root, std::string("again/") + file))) << file;
    const std::string other = ReadOrDie(JoinPath(root, std::string("seed1/") + file));
    if (std::string(file) == "model.safetensors") {
      EXPECT_NE(first, other);
      EXPECT_EQ(first.size(), other.size());
    } else {
      EXPECT_EQ(first, other) << file;  // the seed changes only the weights
    }
  }
}

// The default model is cached as kDefaultModelDirName (tiny-default-v2): its bytes must not change unless the
// name changes too. v2 added the vision tower (text tensors unchanged).
TEST(MakeTiny, DefaultModelBytesArePinned) {
  const uint64_t weights = Fnv1a(ReadOrDie(JoinPath(DefaultModelDir(), "model.safetensors")));
  const uint64_t tokenizer = Fnv1a(ReadOrDie(JoinPath(DefaultModelDir(), "tokenizer.json")));
  std::printf("model.safetensors fnv1a %016llx, tokenizer.json fnv1a %016llx\n",
              static_cast<unsigned long long>(weights), static_cast<unsigned long long>(tokenizer));
  EXPECT_EQ(weights, 0x23db814926336463ull)
      << "the generator's output changed: if on purpose, bump kDefaultModelDirName and update this hash";
  EXPECT_EQ(tokenizer, 0x5646056d77b3f9f8ull)
      << "the tokenizer changed: if on purpose, bump kDefaultModelDirName and update this hash";
}

TEST(MakeTiny, RefusesToOverwriteUnlessForced) {
  const std::string root = testing::MakeTempDir("modelgen-force");
  const std::string out = JoinPath(root, "model");
  MakeTinyOptions options;
  options.out_dir = out;
  ASSERT_OK(MakeTinyModel(options).status());
  const std::string before = ReadOrDie(JoinPath(out, "model.safetensors"));
  options.seed = 5;
  EXPECT_ERROR_CONTAINS(MakeTinyModel(options), "exists and is not empty; pass --force");
  EXPECT_EQ(ReadOrDie(JoinPath(out, "model.safetensors")), before);
  options.force = true;
  ASSERT_OK(MakeTinyModel(options).status());
  EXPECT_NE(ReadOrDie(JoinPath(out, "model.safetensors")), before);
  // Nothing is left beside it: no temporary or old copies.
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "model");
  }
  EXPECT_EQ(entries, 1);

  // An empty directory is fine without --force.
  const std::string empty = JoinPath(root, "empty");
  fs::create_directory(empty);
  options.out_dir = empty + "/";
  options.force = false;
  ASSERT_OK(MakeTinyModel(options).status());
  EXPECT_TRUE(PathExists(JoinPath(empty, "model.safetensors")));

  // --force does not delete directories that do not look like a model.
  const std::string precious = JoinPath(root, "precious");
  fs::create_directories(JoinPath(precious, "sub"));
  ASSERT_OK(WriteFileAtomic(JoinPath(precious, "notes.txt"), "keep me"));
  options.out_dir = precious;
  options.force = true;
  EXPECT_ERROR_CONTAINS(MakeTinyModel(options), "does not look like a model directory");
  ASSERT_OK(WriteFileAtomic(JoinPath(precious, "config.json"), "{}"));
  EXPECT_ERROR_CONTAINS(MakeTinyModel(options), "has a subdirectory 'sub'");
  EXPECT_EQ(ReadOrDie(JoinPath(precious, "notes.txt")), "keep me");

  options.out_dir = JoinPath(precious, "notes.txt");
  EXPECT_ERROR_CONTAINS(MakeTinyModel(options), "exists and is not a directory");
  options.out_dir = JoinPath(root, "x");
  options.preset = "huge";
  EXPECT_ERROR_CONTAINS(MakeTinyModel(options), "unknown preset 'huge'; expected one of: default, bench");
  options.out_dir = "";
  EXPECT_ERROR_CONTAINS(MakeTinyModel(options), "pass --out");
}

TEST(MakeTiny, VisionBenchPresetHasTheReleaseTowerOnAOneLayerTrunk) {
  // Not generated here (≈ 1.2 GB): the tower at release widths, the trunk as small as the merger allows.
  ASSERT_OK_AND_ASSIGN(TinyPreset preset, FindTinyPreset("vision-bench"));
  ASSERT_OK_AND_ASSIGN(ModelConfig config, ParseModelConfig(TinyConfigJson(preset), "vision-bench config"));
  EXPECT_EQ(config.num_hidden_layers, 1);
  EXPECT_EQ(config.vocab_size, 2048);
  EXPECT_EQ(config.mlp_kinds[0], MlpKind::kDense);
  ASSERT_TRUE(config.vision.present);
  EXPECT_EQ(config.vision.depth, 24);
  EXPECT_EQ(config.vision.hidden_size, 1024);
  EXPECT_EQ(config.vision.num_heads, 16);
  EXPECT_EQ(config.vision.intermediate_size, 4096);
  EXPECT_EQ(config.vision.out_hidden_size, 4096);
  EXPECT_EQ(config.vision.projection_intermediate_size, 10240);
  int64_t parameters = 0;
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    int64_t n = 1;
    for (int64_t dim : spec.shape) n *= dim;
    parameters += n;
  }
  EXPECT_LT(parameters, 120'000'000);  // the trunk: the tower's 0.56 B are counted apart (VisionTowerTensors)
}

TEST(MakeTiny, BenchPresetHasTheReleaseWidths) {
  // Not generated here (several GB); its config must parse and describe the intended shapes.
  ASSERT_OK_AND_ASSIGN(TinyPreset preset, FindTinyPreset("bench"));
  ASSERT_OK_AND_ASSIGN(ModelConfig config, ParseModelConfig(TinyConfigJson(preset), "bench config"));
  EXPECT_EQ(config.hidden_size, 4096);
  EXPECT_EQ(config.vocab_size, 154880);
  EXPECT_EQ(config.num_hidden_layers, 4);
  EXPECT_EQ(config.attention_kinds[3], AttentionKind::kDsa);
  EXPECT_EQ(config.KdaWidth(), 64 * 128);
  EXPECT_EQ(config.num_attention_heads, 64);
  EXPECT_EQ(config.qk_head_dim, 256);
  EXPECT_EQ(config.q_lora_rank, 1536);
  EXPECT_EQ(config.kv_lora_rank, 512);
  EXPECT_EQ(config.index_n_heads, 32);
  EXPECT_EQ(config.index_topk, 2048);
  EXPECT_EQ(config.n_routed_experts, 64);
  EXPECT_EQ(config.num_experts_per_tok, 8);
  EXPECT_EQ(config.moe_intermediate_size, 2048);
  EXPECT_FALSE(config.HasMtp());
  EXPECT_EQ(config.pad_token_id, 154820);
  EXPECT_EQ(config.eos_token_ids, (std::vector<int64_t>{154820, 154827, 154829}));
  int64_t parameters = 0;
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    int64_t n = 1;
    for (int64_t dim : spec.shape) n *= dim;
    parameters += n;
  }
  EXPECT_GT(parameters, 6'000'000'000);
  EXPECT_LT(parameters, 8'000'000'000);
  // The release's tower (census_test's hand count of the release vision_config).
  int64_t vision = 0;
  for (const TensorSpec& spec : VisionTowerTensors(config.vision)) {
    int64_t n = 1;
    for (int64_t dim : spec.shape) n *= dim;
    vision += n;
  }
  EXPECT_EQ(vision, 563627008);
  EXPECT_EQ(config.vision.patch_size, 14);
  EXPECT_EQ(config.vision.temporal_patch_size, 2);
  EXPECT_EQ(config.vision.spatial_merge_size, 2);
}

TEST(MakeTiny, SpecialTokenIdsKeepTheReleaseOffsets) {
  EXPECT_EQ(*GlmSpecialTokenId("<|endoftext|>", 154880), 154820);
  EXPECT_EQ(*GlmSpecialTokenId("[gMASK]", 154880), 154822);
  EXPECT_EQ(*GlmSpecialTokenId("<sop>", 154880), 154824);
  EXPECT_EQ(*GlmSpecialTokenId("<|system|>", 154880), 154826);
  EXPECT_EQ(*GlmSpecialTokenId("<|observation|>", 154880), 154829);
  EXPECT_EQ(*GlmSpecialTokenId("<|begin_of_image|>", 154880), 154830);
  EXPECT_EQ(*GlmSpecialTokenId("<think>", 154880), 154841);
  EXPECT_EQ(*GlmSpecialTokenId("</tool_call>", 154880), 154844);
  EXPECT_EQ(*GlmSpecialTokenId("<arg_key>", 154880), 154847);
  EXPECT_EQ(*GlmSpecialTokenId("</arg_value>", 154880), 154850);
  EXPECT_EQ(*GlmSpecialTokenId("<|image|>", 154880), 154854);
  EXPECT_EQ(*GlmSpecialTokenId("<|video|>", 154880), 154855);
  EXPECT_ERROR_CONTAINS(GlmSpecialTokenId("<nope>", 154880), "not one of GLM's special tokens");
}

// The fast encoder must agree with the reference FloatToFp8E4m3 on every input: a sweep over float bit patterns
// (every 127th pattern below 2^31, covering every exponent and both signs) plus each midpoint between adjacent codes
// and its neighbours one ulp away, where rounding decides.
TEST(MakeTiny, FastFp8EncoderMatchesTheReference) {
  int64_t checked = 0;
  for (uint64_t pattern = 0; pattern < (uint64_t{1} << 31); pattern += 127) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float value = std::bit_cast<float>(static_cast<uint32_t>(pattern) | sign);
      if (std::isnan(value)) continue;
      ASSERT_EQ(EncodeFp8E4m3ForTinyModel(value), FloatToFp8E4m3(value)) << value;
      ++checked;
    }
  }
  const float* table = Fp8E4m3Table();
  for (int code = 0; code < 0x7e; ++code) {
    const float midpoint = (table[code] + table[code + 1]) / 2;  // exact: one more bit than e4m3 has
    for (float value : {midpoint, std::nextafter(midpoint, 0.0f), std::nextafter(midpoint, 1000.0f), table[code]}) {
      ASSERT_EQ(EncodeFp8E4m3ForTinyModel(value), FloatToFp8E4m3(value)) << value;
      ASSERT_EQ(EncodeFp8E4m3ForTinyModel(-value), FloatToFp8E4m3(-value)) << -value;
    }
  }
  EXPECT_EQ(EncodeFp8E4m3ForTinyModel(448.0f), 0x7e);
  EXPECT_EQ(EncodeFp8E4m3ForTinyModel(1e9f), 0x7e);
  EXPECT_EQ(EncodeFp8E4m3ForTinyModel(-1e9f), 0xfe);
  EXPECT_GT(checked, 30'000'000);
}

TEST(RandomWeights, BellHasUnitVarianceAndIsBounded) {
  double sum = 0, sum_squares = 0;
  float largest = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float x = UnitBellFromBits(SplitMix64At(42, i));
    sum += x;
    sum_squares += double{x} * x;
    largest = std::max(largest, std::fabs(x));
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_squares / n, 1.0, 0.01);
  EXPECT_LE(largest, 3.4642f);
  EXPECT_GT(largest, 3.0f);
  EXPECT_EQ(UnitBellFromBits(0), (2.0f - 131072.0f) / 65536.0f * 1.7320508075688772f);
  EXPECT_NE(TensorStream(0, "a"), TensorStream(1, "a"));
  EXPECT_NE(TensorStream(0, "a"), TensorStream(0, "b"));
}

TEST(SafetensorsStreamWriter, MatchesTheInMemoryWriter) {
  const std::string dir = testing::MakeTempDir("stream-writer");
  const std::vector<float> a = {1.0f, -2.0f, 3.5f};
  const std::vector<int32_t> b = {7, 8, 9, 10, 11};
  SafetensorsWriter reference;
  ASSERT_OK(reference.AddF32("a", {3}, a));
  ASSERT_OK(reference.AddI32("b", {5}, b));
  ASSERT_OK(reference.Add("empty", DType::kF32, {0, 4}, {}));
  reference.SetMetadata("format", "pt");
  const std::string path = JoinPath(dir, "stream.safetensors");
  ASSERT_OK_AND_ASSIGN(SafetensorsStreamWriter writer,
                       SafetensorsStreamWriter::Create(
                           path, {{"a", DType::kF32, {3}}, {"b", DType::kI32, {5}}, {"empty", DType::kF32, {0, 4}}},
                           {{"format", "pt"}}));
  const auto* a_bytes = reinterpret_cast<const uint8_t*>(a.data());
  ASSERT_OK(writer.Write({a_bytes, 4}));  // chunks need not match tensors
  ASSERT_OK(writer.Write({a_bytes + 4, 8}));
  ASSERT_OK(writer.Write({reinterpret_cast<const uint8_t*>(b.data()), 20}));
  EXPECT_EQ(writer.current(), nullptr);
  const uint8_t extra = 0;
  EXPECT_ERROR_CONTAINS(writer.Write({&extra, 1}), "after the last tensor");
  ASSERT_OK(writer.Close());
  EXPECT_EQ(ReadOrDie(path), reference.Serialize());

  ASSERT_OK_AND_ASSIGN(SafetensorsStreamWriter short_writer,
                       SafetensorsStreamWriter::Create(JoinPath(dir, "short.safetensors"), {{"a", DType::kF32, {3}}}));
  ASSERT_OK(short_writer.Write({a_bytes, 4}));
  EXPECT_ERROR_CONTAINS(short_writer.Close(), "tensor a was not written completely");
}

// EnsureDefaultModel generates once into the cache and is safe when processes (here: threads) race.
TEST(DefaultModel, IsGeneratedOnceIntoTheCache) {
  const std::string cache = testing::MakeTempDir("glint-cache");
  ASSERT_EQ(::setenv("GLINT_CACHE_DIR", cache.c_str(), 1), 0);
  std::vector<Result<std::string>> results(3, Result<std::string>(InternalError("not run")));
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.emplace_back([&results, i] { results[i] = EnsureDefaultModel(); });
  for (auto& thread : threads) thread.join();
  const std::string expected = JoinPath(cache, kDefaultModelDirName);
  for (const auto& result : results) {
    ASSERT_OK(result.status());
    EXPECT_EQ(*result, expected);
  }
  for (const char* file : kFiles) {
    EXPECT_EQ(ReadOrDie(JoinPath(expected, file)), ReadOrDie(JoinPath(DefaultModelDir(), file))) << file;
  }
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(cache)) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), kDefaultModelDirName);  // the losers' copies are gone
  }
  EXPECT_EQ(entries, 1);

  const auto written = fs::last_write_time(JoinPath(expected, "model.safetensors"));
  ASSERT_OK_AND_ASSIGN(std::string again, EnsureDefaultModel());
  EXPECT_EQ(again, expected);
  EXPECT_EQ(fs::last_write_time(JoinPath(expected, "model.safetensors")), written);  // not regenerated

  fs::remove(JoinPath(expected, "tokenizer.json"));
  EXPECT_ERROR_CONTAINS(EnsureDefaultModel(), "lacks tokenizer.json; delete that directory");
  ::unsetenv("GLINT_CACHE_DIR");
}

TEST(DefaultModel, CacheDirFollowsTheEnvironment) {
  ::unsetenv("GLINT_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(*GlintCacheDir(), "/xdg/glint");
  ::setenv("GLINT_CACHE_DIR", "/mine", 1);
  EXPECT_EQ(*GlintCacheDir(), "/mine");
  ::unsetenv("GLINT_CACHE_DIR");
  ::unsetenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_home = home ? home : "";
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(*GlintCacheDir(), "/home/someone/.cache/glint");
  ::unsetenv("HOME");
  EXPECT_ERROR_CONTAINS(GlintCacheDir(), "set GLINT_CACHE_DIR");
  if (!saved_home.empty()) ::setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
}  // namespace glint
