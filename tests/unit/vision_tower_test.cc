// The vision tower (src/vision, docs/vision.md): config validation, input checks, the patch positions and the
// rotary, weight binding errors, the fp32 reference against the float64 oracle's golden fixture
// (tests/data/golden/tiny-vision, written by tools/vision_oracle.py) layer by layer, and the fast tower (bf16 and
// int8 weights) against the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/file.h"
#include "base/worker_pool.h"
#include "fast/fast_model.h"
#include "io/census.h"
#include "io/safetensors.h"
#include "io/weight_container.h"
#include "model/model.h"
#include "modelgen/random_weights.h"
#include "quant/formats.h"
#include "test_util.h"
#include "vision/image_encoder.h"
#include "vision/tower.h"
#include "vision/tower_fast.h"
#include "vision/tower_reference.h"
#include "vision/tower_weights.h"

namespace glint {
namespace {

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Relative RMS difference ‖a − b‖ / ‖b‖ (test_util.h).
double RelativeRms(const std::vector<float>& a, const std::vector<float>& b) { return testing::RelativeRmsError(a, b); }

const char* kTinyVisionJson = R"({"depth": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
  "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 48,
  "projection_intermediate_size": 80, "rms_norm_eps": 1e-5, "swiglu_limit": 10.0, "attention_bias": true,
  "hidden_act": "silu", "in_channels": 3})";

VisionConfig TinyVision() {
  Result<VisionConfig> config = ParseVisionConfig(kTinyVisionJson, "test");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return *config;
}

// A checkpoint of the tower's tensors with make-tiny's deterministic initialisation, stored as BF16.
std::string WriteTower(const VisionConfig& vision, const std::string& tag, std::vector<TensorSpec> specs = {}) {
  if (specs.empty()) specs = VisionTowerTensors(vision);
  ModelConfig model;
  model.vision = vision;
  SafetensorsWriter writer;
  for (const TensorSpec& spec : specs) {
    const int64_t count = Elements(spec.shape);
    std::vector<float> values(count);
    Result<InitRule> rule = InitRuleFor(spec, model);
    EXPECT_TRUE(rule.ok()) << rule.status().ToString();
    FillTensorValues(*rule, TensorStream(7, spec.name), 0, count, values.data());
    std::vector<uint8_t> bytes(2 * count);
    for (int64_t i = 0; i < count; ++i) {
      const bf16_bits bits = FloatToBf16(values[i]);
      std::memcpy(&bytes[2 * i], &bits, 2);
    }
    EXPECT_OK(writer.Add(spec.name, DType::kBF16, spec.shape, bytes));
  }
  const std::string path = JoinPath(testing::MakeTempDir(tag), "model.safetensors");
  EXPECT_OK(writer.WriteTo(path));
  return path;
}

// Deterministic patches in the CLIP-normalised range.
VisionInput SyntheticInput(const VisionConfig& config, int t, int h, int w) {
  VisionInput input{t, h, w, {}};
  input.patches.resize(input.NumPatches() * config.PatchValues());
  for (size_t i = 0; i < input.patches.size(); ++i) {
    input.patches[i] = 1.8f * UnitBellFromBits(SplitMix64At(11, i)) / 1.7320508f;
  }
  return input;
}

TEST(VisionConfig, ReleaseValuesAndRefusals) {
  ASSERT_OK_AND_ASSIGN(ModelConfig release, LoadModelConfig(testing::TestDataPath("glm-5.3-flash-config.json")));
  EXPECT_EQ(release.vision.HeadDim(), 64);
  EXPECT_EQ(release.vision.PatchValues(), 1176);
  EXPECT_FLOAT_EQ(release.vision.swiglu_limit, 10.0f);
  EXPECT_ERROR_CONTAINS(ParseVisionConfig(R"({"depth": 1, "hidden_size": 32, "num_heads": 16, "intermediate_size": 8,
      "patch_size": 14, "out_hidden_size": 8, "swiglu_limit": 10})",
                                          "t"),
                        "multiple of 4");
  EXPECT_ERROR_CONTAINS(ParseVisionConfig(R"({"depth": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 8,
      "patch_size": 14, "out_hidden_size": 8, "swiglu_limit": 10, "hidden_act": "gelu"})",
                                          "t"),
                        "'silu'");
  EXPECT_ERROR_CONTAINS(ParseVisionConfig(R"({"depth": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 8,
      "patch_size": 14, "out_hidden_size": 8})",
                                          "t"),
                        "swiglu_limit");
  EXPECT_ERROR_CONTAINS(ParseVisionConfig(kTinyVisionJson, "t", 64), "the text hidden_size 64");
  EXPECT_ERROR_CONTAINS(ParseVisionConfig(R"({"depth": 1000, "hidden_size": 65536, "num_heads": 16,
      "intermediate_size": 1000000, "patch_size": 14, "out_hidden_size": 8, "swiglu_limit": 10})",
                                          "t"),
                        "parameters");
}

TEST(VisionInput, ChecksNameWhatIsWrong) {
  const VisionConfig c = TinyVision();
  VisionInput input = SyntheticInput(c, 1, 4, 6);
  EXPECT_OK(CheckVisionInput(c, input));
  EXPECT_EQ(VisionTokenCount(c, input), 6);
  VisionInput odd = input;
  odd.grid_w = 5;
  EXPECT_ERROR_CONTAINS(CheckVisionInput(c, odd), "not a multiple of the 2×2 spatial merge");
  VisionInput shortened = input;
  shortened.patches.pop_back();
  EXPECT_ERROR_CONTAINS(CheckVisionInput(c, shortened), "needs 24 patches × 1176");
  VisionInput nan = input;
  nan.patches[1176 * 3 + 5] = NAN;
  EXPECT_ERROR_CONTAINS(CheckVisionInput(c, nan), "(patch 3) is not finite");
  VisionInput huge{1, 1 << 12, 1 << 12, {}};
  EXPECT_ERROR_CONTAINS(CheckVisionInput(c, huge), "at most");
}

// Merge-block order: the 2×2 blocks of a 4×6 grid in raster order, each block's patches in raster order.
TEST(VisionInput, PatchPositionsFollowMergeBlocks) {
  const VisionConfig c = TinyVision();
  const std::vector<PatchPosition> p = PatchPositions(c, SyntheticInput(c, 2, 4, 6));
  ASSERT_EQ(p.size(), 48u);
  const int expected[][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {0, 4}};
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(p[i].row, expected[i][0]) << i;
    EXPECT_EQ(p[i].col, expected[i][1]) << i;
  }
  EXPECT_EQ(p[12].row, 2);  // the second row of blocks
  EXPECT_EQ(p[12].col, 0);
  EXPECT_EQ(p[24 + 5].col, p[5].col);  // the second frame repeats the positions
}

// The rotary: h frequencies in the first quarter of each half, w in the second; cos/sin of the same angle in
// both halves (cat(emb, emb)).
TEST(VisionInput, RotaryTablesSplitRowsAndColumns) {
  const VisionConfig c = TinyVision();  // head_dim 16: quarter 4
  const VisionInput input = SyntheticInput(c, 1, 4, 6);
  std::vector<float> cos_table, sin_table;
  VisionRotaryTables(c, input, cos_table, sin_table);
  const int64_t p = 13;  // row 2, col 1
  const PatchPosition pos = PatchPositions(c, input)[p];
  ASSERT_EQ(pos.row, 2);
  ASSERT_EQ(pos.col, 1);
  for (int64_t i = 0; i < 4; ++i) {
    const double inv_freq = std::pow(10000.0, -2.0 * i / 8.0);
    EXPECT_NEAR(sin_table[p * 16 + i], std::sin(2 * inv_freq), 1e-7);
    EXPECT_NEAR(sin_table[p * 16 + 4 + i], std::sin(1 * inv_freq), 1e-7);
    EXPECT_EQ(sin_table[p * 16 + 8 + i], sin_table[p * 16 + i]);
    EXPECT_EQ(cos_table[p * 16 + 12 + i], cos_table[p * 16 + 4 + i]);
  }
}

TEST(VisionWeights, BindingErrorsNameTheTensor) {
  const VisionConfig c = TinyVision();
  std::vector<TensorSpec> specs = VisionTowerTensors(c);
  ASSERT_OK_AND_ASSIGN(Checkpoint good, Checkpoint::Open(WriteTower(c, "vision-good", specs)));
  EXPECT_OK(LoadVisionWeights(good, c).status());

  std::vector<TensorSpec> missing = specs;
  missing.erase(missing.begin() + 5);
  ASSERT_OK_AND_ASSIGN(Checkpoint a, Checkpoint::Open(WriteTower(c, "vision-missing", missing)));
  EXPECT_ERROR_CONTAINS(LoadVisionWeights(a, c), "'" + specs[5].name + "'");

  std::vector<TensorSpec> reshaped = specs;
  reshaped[2].shape[0] += 1;
  ASSERT_OK_AND_ASSIGN(Checkpoint b, Checkpoint::Open(WriteTower(c, "vision-shape", reshaped)));
  EXPECT_ERROR_CONTAINS(LoadVisionWeights(b, c), "the vision_config implies");

  std::vector<TensorSpec> extra = specs;
  extra.push_back(
      {"model.visual.embeddings.position_embedding.weight", {1024, 32}, TensorStorage::kBf16, TensorGroup::kVision});
  ASSERT_OK_AND_ASSIGN(Checkpoint d, Checkpoint::Open(WriteTower(c, "vision-extra", extra)));
  EXPECT_ERROR_CONTAINS(LoadVisionWeights(d, c), "is not part of the GLM-5.3 tower");

  ASSERT_OK_AND_ASSIGN(Checkpoint text, Checkpoint::Open(testing::TestDataPath("golden/tiny-dense")));
  EXPECT_ERROR_CONTAINS(LoadVisionWeights(text, c), "it is text-only");
}

constexpr double kBf16Bound = 4e-3;  // derivations beside the golden tests below
constexpr double kInt8Bound = 8e-2;

// The fixture's weights, config and expected intermediates (float64 oracle, stored as float32).
struct Golden {
  VisionConfig config;
  VisionWeights weights;
  VisionInput input;
  std::map<std::string, std::vector<float>> expected;
};

Golden LoadGolden() {
  Golden g;
  const std::string dir = testing::TestDataPath("golden/tiny-vision");
  Result<std::string> json = ReadFile(JoinPath(dir, "vision_config.json"), 1 << 20);
  EXPECT_TRUE(json.ok());
  g.config = *ParseVisionConfig(*json, "vision_config.json");
  Result<Checkpoint> model = Checkpoint::Open(JoinPath(dir, "model.safetensors"));
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  Result<VisionWeights> weights = LoadVisionWeights(*model, g.config);
  EXPECT_TRUE(weights.ok()) << weights.status().ToString();
  g.weights = std::move(*weights);
  Result<Checkpoint> expected = Checkpoint::Open(JoinPath(dir, "expected.safetensors"));
  EXPECT_TRUE(expected.ok()) << expected.status().ToString();
  for (const TensorInfo& info : expected->tensors()) {
    const TensorView view = expected->ViewOf(info);
    if (info.dtype == DType::kI32) {
      std::vector<int32_t> grid(3);
      std::memcpy(grid.data(), view.bytes.data(), 12);
      g.input.grid_t = grid[0];
      g.input.grid_h = grid[1];
      g.input.grid_w = grid[2];
      continue;
    }
    std::vector<float> values(info.NumElements());
    std::memcpy(values.data(), view.bytes.data(), 4 * values.size());
    if (info.name == "input.patches") {
      g.input.patches = std::move(values);
    } else {
      g.expected[info.name] = std::move(values);
    }
  }
  return g;
}

void ExpectTraceNear(const VisionTrace& trace, const Golden& g, double tolerance, const char* what) {
  EXPECT_LE(RelativeRms(trace.patch_embed, g.expected.at("patch_embed")), tolerance) << what << " patch_embed";
  ASSERT_EQ(trace.blocks.size(), 2u);
  for (size_t b = 0; b < trace.blocks.size(); ++b) {
    const std::string name = "blocks." + std::to_string(b);
    EXPECT_LE(RelativeRms(trace.blocks[b], g.expected.at(name)), tolerance) << what << " " << name;
  }
  EXPECT_LE(RelativeRms(trace.post_layernorm, g.expected.at("post_layernorm")), tolerance) << what;
  EXPECT_LE(RelativeRms(trace.downsample, g.expected.at("downsample")), tolerance) << what << " downsample";
  EXPECT_LE(RelativeRms(trace.merger, g.expected.at("merger")), tolerance) << what << " merger";
  std::printf("%s: merger relative RMS difference %.2e (bound %.1e)\n", what,
              RelativeRms(trace.merger, g.expected.at("merger")), tolerance);
}

// The reference against float64: every product is accumulated in double, so the difference is the fp32 storage
// of activations between steps — about 2^-24 relative per value and step, ~10 steps per block here, amplified at
// most a few times by the norms: 1e-6 leaves a margin of 10× over the ~1e-7 seen.
TEST(VisionGolden, ReferenceMatchesTheOracleLayerByLayer) {
  const Golden g = LoadGolden();
  VisionTrace trace;
  ASSERT_OK_AND_ASSIGN(std::vector<float> out, RunVisionTowerReference(g.weights, g.config, g.input, &trace));
  EXPECT_EQ(out, trace.merger);
  ExpectTraceNear(trace, g, 1e-6, "reference");
}

// The fast tower with bf16 weights (exact) against the oracle: fp32 accumulation (≈ √K · 2^-24 per product) and
// the bf16 rounding of attention's K and V (2^-9 relative per element; the attention output is a convex
// combination of V rows and the scores move by ≤ 2^-9 · |q|·|k|/√d), diluted by the residual: bound kBf16Bound = 4e-3
// (measured 1.7e-3).
TEST(VisionGolden, FastBf16MatchesTheOracle) {
  const Golden g = LoadGolden();
  WorkerPool pool(2);
  ASSERT_OK_AND_ASSIGN(FastVisionTower tower, FastVisionTower::Create(g.weights, g.config));
  VisionTrace trace;
  ASSERT_OK(tower.Run(pool, g.input, &trace).status());
  ExpectTraceNear(trace, g, kBf16Bound, "fast bf16");
}

// int8 weights and activations (W8A8, group 128): each product carries ≈ 1/(127·√12)·(amax/rms) ≈ 0.8 % relative
// rounding of its weights and as much of its activations, ≈ 1.1 % per product. The merger output lies behind 14
// such products in series (patch embed, 5 per block, downsample, 4 in the merger); independent errors add to
// √14 · 1.1 % ≈ 4.1 %, and the norms rescale them with the signal: bound kInt8Bound = 8e-2 (measured 4.9–5.7 %).
TEST(VisionGolden, FastInt8MatchesTheOracle) {
  const Golden g = LoadGolden();
  WorkerPool pool(2);
  FastVisionOptions options;
  options.format = VisionWeightFormat::kInt8;
  ASSERT_OK_AND_ASSIGN(FastVisionTower tower, FastVisionTower::Create(g.weights, g.config, options));
  VisionTrace trace;
  ASSERT_OK(tower.Run(pool, g.input, &trace).status());
  ExpectTraceNear(trace, g, kInt8Bound, "fast int8");
}

// Fast against reference on make-tiny-style weights, two frames (attention must not cross them), a grid larger
// than one attention query block, several passes of the MLP, and every kernel level this CPU has.
TEST(VisionFast, MatchesReferenceOnTwoFramesAtEveryLevel) {
  const VisionConfig c = TinyVision();
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(WriteTower(c, "vision-fast")));
  ASSERT_OK_AND_ASSIGN(VisionWeights weights, LoadVisionWeights(checkpoint, c));
  const VisionInput input = SyntheticInput(c, 2, 6, 8);
  ASSERT_OK_AND_ASSIGN(std::vector<float> reference, RunVisionTowerReference(weights, c, input));
  VisionInput first_frame = SyntheticInput(c, 1, 6, 8);  // the first 48 patches of `input`
  ASSERT_OK_AND_ASSIGN(std::vector<float> alone, RunVisionTowerReference(weights, c, first_frame));
  EXPECT_EQ(std::vector<float>(reference.begin(), reference.begin() + alone.size()), alone);
  WorkerPool pool(2);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (!IsaSupported(isa)) continue;
    for (VisionWeightFormat format : {VisionWeightFormat::kBf16, VisionWeightFormat::kInt8}) {
      FastVisionOptions options;
      options.isa = isa;
      options.format = format;
      options.max_tokens_per_pass = 40;  // 96 patches: three MLP passes, the last one partial
      ASSERT_OK_AND_ASSIGN(FastVisionTower tower, FastVisionTower::Create(weights, c, options));
      VisionRunProfile profile;
      ASSERT_OK_AND_ASSIGN(std::vector<float> fast, tower.Run(pool, input, nullptr, &profile));
      const double bound = format == VisionWeightFormat::kBf16 ? kBf16Bound : kInt8Bound;
      EXPECT_LE(RelativeRms(fast, reference), bound) << IsaName(isa) << " " << VisionWeightFormatName(format);
      EXPECT_GT(profile.linear_macs, 0);
      EXPECT_GT(profile.attention_macs, 0);
    }
  }
}

// A frame of more than 512 patches (tower_fast.cc's kKeyChunk): Vᵀ p is summed over key chunks of 512 and a partial
// last one (24 × 24 = 576 patches: 512 + 64), in both formats, against the reference.
TEST(VisionFast, AttentionOverSeveralKeyChunksMatchesReference) {
  const VisionConfig c = TinyVision();
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(WriteTower(c, "vision-chunks")));
  ASSERT_OK_AND_ASSIGN(VisionWeights weights, LoadVisionWeights(checkpoint, c));
  const VisionInput input = SyntheticInput(c, 1, 24, 24);
  ASSERT_OK_AND_ASSIGN(std::vector<float> reference, RunVisionTowerReference(weights, c, input));
  WorkerPool pool(2);
  for (VisionWeightFormat format : {VisionWeightFormat::kBf16, VisionWeightFormat::kInt8}) {
    FastVisionOptions options;
    options.format = format;
    ASSERT_OK_AND_ASSIGN(FastVisionTower tower, FastVisionTower::Create(weights, c, options));
    ASSERT_OK_AND_ASSIGN(std::vector<float> fast, tower.Run(pool, input, nullptr, nullptr));
    const double bound = format == VisionWeightFormat::kBf16 ? kBf16Bound : kInt8Bound;
    EXPECT_LE(RelativeRms(fast, reference), bound) << VisionWeightFormatName(format);
  }
}

// The tower in a `glint convert` container (tower_store.cc): written by ContainerWriter from StoredTensors and
// viewed by FromStored, it gives bit-identical rows to the tower packed from the checkpoint (the stored bytes are
// the packed bytes), in both formats; a bad entry names itself; LoadImageEncoder refuses a container written
// before containers held the tower, naming the fix.
std::unique_ptr<ContainerFile> WriteTowerContainer(const FastVisionTower& tower, const std::string& path,
                                                   std::map<std::string, std::string> metadata) {
  const std::vector<ContainerEntry> entries = tower.StoredTensors();
  std::vector<ContainerEntrySpec> specs;
  for (const ContainerEntry& e : entries) {
    specs.push_back({e.name, e.kind, e.dims, {}});
    for (const auto& blob : e.blobs) specs.back().blob_bytes.push_back(blob.size());
  }
  Result<std::unique_ptr<ContainerWriter>> writer = ContainerWriter::Create(path, specs, std::move(metadata));
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  for (const ContainerEntry& e : entries) {
    for (const auto& blob : e.blobs) EXPECT_OK((*writer)->WriteNextBlob(blob));
  }
  EXPECT_OK((*writer)->Finish());
  Result<ContainerFile> file = ContainerFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  return std::make_unique<ContainerFile>(std::move(*file));
}

TEST(VisionContainer, StoredTowerGivesBitIdenticalRows) {
  const VisionConfig c = TinyVision();
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(WriteTower(c, "vision-store")));
  ASSERT_OK_AND_ASSIGN(VisionWeights weights, LoadVisionWeights(checkpoint, c));
  const VisionInput input = SyntheticInput(c, 2, 6, 8);
  WorkerPool pool(2);
  const std::string dir = testing::MakeTempDir("vision-container");
  for (VisionWeightFormat format : {VisionWeightFormat::kBf16, VisionWeightFormat::kInt8}) {
    FastVisionOptions options;
    options.format = format;
    ASSERT_OK_AND_ASSIGN(FastVisionTower packed, FastVisionTower::Create(weights, c, options));
    ASSERT_OK_AND_ASSIGN(std::vector<float> expected, packed.Run(pool, input));
    std::shared_ptr<const ContainerFile> file(
        WriteTowerContainer(packed, JoinPath(dir, std::string(VisionWeightFormatName(format)) + ".glint"), {}));
    auto find = [&file](const std::string& name) { return file->Find(name); };
    ASSERT_OK_AND_ASSIGN(FastVisionTower stored, FastVisionTower::FromStored(c, {}, find, file));
    EXPECT_EQ(stored.format(), format);
    EXPECT_EQ(stored.WeightBytes(), packed.WeightBytes());
    ASSERT_OK_AND_ASSIGN(std::vector<float> rows, stored.Run(pool, input));
    EXPECT_EQ(rows, expected) << VisionWeightFormatName(format);
  }
}

TEST(VisionContainer, BadEntriesAndOldContainersAreRefused) {
  const VisionConfig c = TinyVision();
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(WriteTower(c, "vision-store-bad")));
  ASSERT_OK_AND_ASSIGN(VisionWeights weights, LoadVisionWeights(checkpoint, c));
  ASSERT_OK_AND_ASSIGN(FastVisionTower packed, FastVisionTower::Create(weights, c));
  std::vector<ContainerEntry> entries = packed.StoredTensors();
  auto find_in = [&entries](const std::string& name) -> const ContainerEntry* {
    for (const ContainerEntry& e : entries) {
      if (e.name == name) return &e;
    }
    return nullptr;
  };
  std::erase_if(entries, [](const ContainerEntry& e) { return e.name == "vision.blocks.1.up.bias"; });
  Result<FastVisionTower> missing = FastVisionTower::FromStored(c, {}, find_in, nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'vision.blocks.1.up.bias' of the vision tower is missing"),
            std::string::npos)
      << missing.status().ToString();
  VisionConfig wider = c;
  wider.intermediate_size = 96;  // another model's config: the MLP entries have the wrong dims
  entries = packed.StoredTensors();
  Result<FastVisionTower> mismatch = FastVisionTower::FromStored(wider, {}, find_in, nullptr);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("'vision.blocks.0.gate' is 'bf16' [64, 32]"), std::string::npos)
      << mismatch.status().ToString();
  entries.clear();
  Result<FastVisionTower> none = FastVisionTower::FromStored(c, {}, find_in, nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("holds no vision tower"), std::string::npos) << none.status().ToString();

  // A model directory whose container has no "vision" key (written before containers held the tower).
  const std::string dir = testing::MakeTempDir("vision-old-container");
  WriteTowerContainer(packed, JoinPath(dir, kContainerFileName), {{"writer", "older"}});
  ModelConfig model;
  model.vision = c;
  WorkerPool pool(1);
  Result<std::unique_ptr<ImageEncoder>> old = LoadImageEncoder(dir, model, false, &pool);
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("did not store the vision tower; re-run `glint convert"), std::string::npos)
      << old.status().ToString();
  WriteTowerContainer(packed, JoinPath(dir, kContainerFileName), {{std::string(kContainerVisionKey), "bf16"}});
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ImageEncoder> loaded, LoadImageEncoder(dir, model, false, &pool));
  EXPECT_EQ(loaded->description(), "bf16 fast tower");
}

// The text model's image-row hook (BatchEntry::embedding_positions/rows): a replaced row equal to the token's own
// embedding changes nothing (bit for bit); another row changes the logits from its position on and not before
// (causal); rows equal to other tokens' embeddings give those tokens' logits exactly, in the reference and the
// fast path; bad rows are refused with what was wrong.
std::vector<float> EntryLogits(const Model& model, const std::vector<int32_t>& tokens,
                               std::span<const int32_t> positions = {}, std::span<const float> rows = {}) {
  SequenceState state = model.NewSequence();
  std::vector<EntryOutput> outputs;
  BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
  entry.embedding_positions = positions;
  entry.embedding_rows = rows;
  const Status status = model.Forward({&entry, 1}, outputs);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return outputs.empty() ? std::vector<float>{} : outputs[0].logits;
}

TEST(VisionHook, ImageRowsReplaceEmbeddingsInBothPaths) {
  const std::string dir = testing::TestDataPath("golden/tiny-dense");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReferenceModel> reference, ReferenceModel::Load(dir));
  WorkerPool pool(2);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> fast, FastModel::Load(dir, pool));
  const ModelConfig& c = reference->config();
  const int64_t d = c.hidden_size, v = c.vocab_size;
  const std::vector<int32_t> tokens = {5, 17, 9, 30, 2, 11};
  const std::vector<int32_t> positions = {2, 3};
  std::vector<float> own(2 * d), image(2 * d);
  for (int64_t i = 0; i < 2; ++i) {
    const float* row = reference->weights().embed_tokens.Row(tokens[positions[i]]);
    std::copy(row, row + d, own.begin() + i * d);
    for (int64_t j = 0; j < d; ++j) image[i * d + j] = 0.5f * UnitBellFromBits(SplitMix64At(3, i * d + j));
  }
  for (const Model* model : {static_cast<const Model*>(reference.get()), static_cast<const Model*>(fast.get())}) {
    const std::vector<float> plain = EntryLogits(*model, tokens);
    EXPECT_EQ(EntryLogits(*model, tokens, positions, own), plain);
    const std::vector<float> replaced = EntryLogits(*model, tokens, positions, image);
    ASSERT_EQ(replaced.size(), plain.size());
    EXPECT_TRUE(std::equal(plain.begin(), plain.begin() + 2 * v, replaced.begin()));  // positions 0, 1 unchanged
    EXPECT_FALSE(std::equal(plain.begin() + 2 * v, plain.end(), replaced.begin() + 2 * v));
  }
  // Rows that are other tokens' embeddings give exactly the logits of those tokens, in both paths: the rows enter
  // the forward where embeddings do (the fast path's embedding table holds the checkpoint's BF16 values exactly).
  std::vector<int32_t> substituted = tokens;
  std::vector<float> others(2 * d);
  for (int64_t i = 0; i < 2; ++i) {
    substituted[positions[i]] = static_cast<int32_t>(40 + i);
    const float* row = reference->weights().embed_tokens.Row(40 + i);
    std::copy(row, row + d, others.begin() + i * d);
  }
  EXPECT_EQ(EntryLogits(*reference, tokens, positions, others), EntryLogits(*reference, substituted));
  EXPECT_EQ(EntryLogits(*fast, tokens, positions, others), EntryLogits(*fast, substituted));

  const std::vector<int32_t> unordered = {3, 2}, outside = {6};
  SequenceState state = reference->NewSequence();
  std::vector<EntryOutput> outputs;
  BatchEntry entry{tokens, &state, LogitsWanted::kLast, false};
  entry.embedding_positions = unordered;
  entry.embedding_rows = image;
  EXPECT_ERROR_CONTAINS(reference->Forward({&entry, 1}, outputs), "out of order");
  entry.embedding_positions = outside;
  entry.embedding_rows = std::span<const float>(image.data(), d);
  EXPECT_ERROR_CONTAINS(reference->Forward({&entry, 1}, outputs), "outside the entry's 6 tokens");
  entry.embedding_positions = positions;
  EXPECT_ERROR_CONTAINS(reference->Forward({&entry, 1}, outputs), "expected positions × hidden_size");
}

}  // namespace
}  // namespace glint
