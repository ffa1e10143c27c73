// glint plan against figures worked out by hand for the released GLM-5.3-Flash config
// (tests/data/glm-5.3-flash-config.json; model-glm53.md §2, §15, §16), the same config with changed values,
// and bad inputs. Every expected value below is written as the arithmetic that produces it.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "base/file.h"
#include "io/census.h"
#include "io/config.h"
#include "plan/collectives.h"
#include "plan/embedded.h"
#include "plan/planner.h"
#include "plan/roofline.h"
#include "plan/state.h"
#include "plan/weights.h"
#include "test_util.h"

namespace glint::plan {
namespace {

// ---- Hand arithmetic for the release (D = 4096) ----------------------------------------------------------------
constexpr double kExpertParams = 3.0 * 2048 * 4096;            // gate, up [2048, 4096]; down [4096, 2048]
constexpr double kExpertScales = 16 * 32 + 16 * 32 + 32 * 16;  // ceil(out/128) × ceil(in/128) per tensor
constexpr double kMoeLayers = 42, kExperts = 288, kTopK = 8;
constexpr double kRoutedTensorsLayers = kMoeLayers + 1;  // + the MTP layer's experts

// Release bytes by dtype (census by hand, see CensusHandCount below).
constexpr double kF8Params = 11 * (1536.0 * 4096 + 16384.0 * 1536 + 512.0 * 4096 + 4096.0 * 16384)  // MLA fp8
                             + 3 * 3 * 12288.0 * 4096                                               // dense MLP
                             + 42 * kExpertParams                                                   // shared
                             + 42 * 288 * kExpertParams                                             // routed
                             + (1536.0 * 4096 + 16384.0 * 1536 + 512.0 * 4096 + 4096.0 * 16384)     // MTP MLA
                             + kExpertParams + 288 * kExpertParams;                                 // MTP experts
constexpr double kScales = 12 * (12 * 32 + 128 * 12 + 4 * 32 + 32 * 128)  // MLA q_a, q_b, kv_a, o (+ MTP)
                           + 3 * (96 * 32 * 2 + 32 * 96)                  // dense gate, up, down
                           + 43 * 289 * kExpertScales;                    // routed + shared, trunk + MTP
constexpr double kBf16Params = 2 * 154880.0 * 4096                        // embed, lm_head
                               + 34 * (4 * 8192.0 * 4096 + 2 * 128 * 4096 + 2 * 8192 * 128 + 64 * 4096 + 128)  // KDA
                               + 11 * (1536 + 512 + 32768.0 * 512)  // MLA norms, kv_b
                               + 12 * (4096.0 * 1536 + 128 * 4096 + 256 + 32 * 4096 + 128 * 4096 + 4 * 128)  // indexer
                               + 45 * 2 * 4096 + 4096                                     // layer norms, final
                               + 43 * 288.0 * 4096                                        // routers (+ MTP)
                               + 4096.0 * 8192 + 5 * 4096 + (1536 + 512 + 32768.0 * 512)  // MTP eh, norms, MLA
                               + 563627008;                                               // vision (census_test)
constexpr double kF32Params = 34 * (3 * 8192 * 4 + 64 + 8192)                             // KDA convs, A_log, dt_bias
                              + 45 * 2 * (24 * 16384 + 24 + 3)  // hc_{attn,ffn}_{fn,base,scale}
                              + 43 * 288;                       // e_score_correction_bias (+ MTP)
constexpr double kReleaseBytes = kF8Params + 4 * kScales + 2 * kBf16Params + 4 * kF32Params;

ModelConfig ReleaseConfig() {
  auto config = LoadModelConfig(testing::TestDataPath("glm-5.3-flash-config.json"));
  GLINT_CHECK(config.ok()) << config.status().ToString();
  return *config;
}

// The release config with text_config.<key> replaced.
ModelConfig ReleaseConfigWith(const std::string& key, const nlohmann::json& value) {
  auto text = ReadFile(testing::TestDataPath("glm-5.3-flash-config.json"));
  GLINT_CHECK(text.ok());
  nlohmann::json root = nlohmann::json::parse(*text);
  root["text_config"][key] = value;
  auto config = ParseModelConfig(root.dump(), "changed config");
  GLINT_CHECK(config.ok()) << config.status().ToString();
  return *config;
}

const Table& FindTable(const Report& report, const std::string& id) {
  for (const Table& table : report.tables) {
    if (table.id == id) return table;
  }
  GLINT_CHECK(false) << "no table " << id;
  return report.tables.front();
}

// The number in column `column` of the first row whose first cells equal `keys`.
double Value(const Table& table, std::vector<std::string> keys, const std::string& column) {
  size_t c = 0;
  while (c < table.columns.size() && table.columns[c].id != column) ++c;
  GLINT_CHECK(c < table.columns.size()) << "no column " << column << " in " << table.id;
  for (const auto& row : table.rows) {
    bool match = true;
    for (size_t k = 0; k < keys.size(); ++k) match = match && row[k].text == keys[k];
    if (match) {
      GLINT_CHECK(row[c].number.has_value()) << table.id << " " << keys[0] << " " << column << " is not a number";
      return *row[c].number;
    }
  }
  GLINT_CHECK(false) << "no row " << keys[0] << " in " << table.id;
  return 0;
}

PlanInputs Resolve(const ModelConfig& config, PlanRequest request = {}) {
  auto inputs = ResolvePlanForConfig(config, "test", request);
  GLINT_CHECK(inputs.ok()) << inputs.status().ToString();
  return std::move(*inputs);
}

TEST(Plan, EmbeddedReleaseConfigIsTheTestDataConfig) {
  ASSERT_OK_AND_ASSIGN(std::string file, ReadFile(testing::TestDataPath("glm-5.3-flash-config.json")));
  EXPECT_EQ(ReleaseConfigJson(), file) << "data/glm-5.3-flash-config.json and tests/data/ differ";
  ASSERT_OK_AND_ASSIGN(PlanInputs inputs, ResolvePlan(PlanRequest{}));
  EXPECT_EQ(inputs.config.num_hidden_layers, 45);
  EXPECT_NE(inputs.model_source.find("embedded release config"), std::string::npos);
}

TEST(Plan, CensusHandCount) {
  const ModelConfig config = ReleaseConfig();
  const Census census = CensusFromConfig(config);
  auto params = [&](TensorGroup g) { return static_cast<double>(census.group(g).params); };
  EXPECT_EQ(params(TensorGroup::kEmbedding), 2 * 154880.0 * 4096);
  // KDA per layer: q,k,v,o 4·8192·4096; f_a,g_a 2·128·4096; f_b,g_b 2·8192·128; b 64·4096; convs 3·8192·4;
  // A_log 64; dt_bias 8192; o_norm 128 = 137,732,288 (§15: ≈ 137.7 M); × 34.
  EXPECT_EQ(params(TensorGroup::kKda), 34 * 137732288.0);
  // MLA: q_a 1536·4096 + norm 1536 + q_b 16384·1536 + kv_a 512·4096 + norm 512 + kv_b 32768·512 + o 4096·16384.
  EXPECT_EQ(params(TensorGroup::kMla), 11 * 117442560.0);
  EXPECT_EQ(params(TensorGroup::kIndexer), 11 * 7471872.0);  // §15: 7.47 M per layer
  EXPECT_EQ(params(TensorGroup::kDenseMlp), 3 * 3 * 12288.0 * 4096);
  EXPECT_EQ(params(TensorGroup::kRoutedExperts), kMoeLayers * kExperts * kExpertParams);  // 304.4 B
  EXPECT_EQ(params(TensorGroup::kSharedExperts), kMoeLayers * kExpertParams);
  EXPECT_EQ(params(TensorGroup::kRouterMhcNorms),
            45 * (2 * 4096 + 2 * (24 * 16384 + 24 + 3)) + 42 * (288 * 4096 + 288) + 4096.0);
  // MTP: eh_proj 4096·8192, 5 norms, DSA 117442560 + 7471872, router 288·4096 + 288, shared + 288 experts.
  EXPECT_EQ(params(TensorGroup::kMtp),
            4096.0 * 8192 + 5 * 4096 + 117442560 + 7471872 + 288 * 4096 + 288 + 289 * kExpertParams);
  EXPECT_EQ(params(TensorGroup::kVision), 563627008);
  const double trunk =
      static_cast<double>(census.TotalParams()) - params(TensorGroup::kMtp) - params(TensorGroup::kVision);
  EXPECT_EQ(trunk, 313326811966);  // §15: ≈ 313.3 B (WARP 313.33 B)
  EXPECT_EQ(static_cast<double>(census.TotalParams()), kF8Params + kBf16Params + kF32Params);
  EXPECT_EQ(static_cast<double>(census.dtypes.at(DType::kF8E4M3).elements), kF8Params);
  EXPECT_EQ(static_cast<double>(census.dtypes.at(DType::kF32).elements), kF32Params + kScales);
  EXPECT_EQ(static_cast<double>(census.TotalBytes()), kReleaseBytes);  // 328.4 GB
  // Active: routed experts at 8/288, no embedding lookup: §15 "≈ 16.7 B trunk (WARP)".
  const double active = trunk - params(TensorGroup::kRoutedExperts) * (1 - kTopK / kExperts) - 154880.0 * 4096;
  EXPECT_EQ(ActiveParams(census, config, {.include_embedding_lookup = false}), active);
  EXPECT_NEAR(active / 1e9, 16.74, 0.005);
}

TEST(Plan, SchemeBytesHandCount) {
  const ModelConfig config = ReleaseConfig();
  const WeightSet weights = WeightsFromConfig(config);
  const Assumptions a = Assumptions::Defaults();  // int8 group 128, int4 group 32, 2-byte scales, no zero point
  const SchemeFootprint r = Footprint(Scheme::kRelease, weights, config, a);
  EXPECT_DOUBLE_EQ(r.all.Total(), kReleaseBytes);
  EXPECT_DOUBLE_EQ(r.all.metadata, 4 * kScales);
  EXPECT_DOUBLE_EQ(r.routed_bytes, kRoutedTensorsLayers * kExperts * (kExpertParams + 4 * kExpertScales));

  // A: every non-F32 tensor in bf16.
  const SchemeFootprint all_bf16 = Footprint(Scheme::kA, weights, config, a);
  EXPECT_DOUBLE_EQ(all_bf16.all.Total(), 2 * (kF8Params + kBf16Params) + 4 * kF32Params);

  // B: experts (routed + shared) int8 with a 2-byte scale per row and 128 inputs.
  const double int8_expert = 2 * (2048.0 * 4096 + 2048 * 32 * 2) + (4096.0 * 2048 + 4096 * 16 * 2);
  const SchemeFootprint b = Footprint(Scheme::kB, weights, config, a);
  EXPECT_DOUBLE_EQ(b.routed_bytes, kRoutedTensorsLayers * kExperts * int8_expert);

  // D: experts int4, 0.5 byte + a 2-byte scale per 32 inputs.
  const double int4_expert = 2 * (2048.0 * 4096 / 2 + 2048 * 128 * 2) + (4096.0 * 2048 / 2 + 4096 * 64 * 2);
  const SchemeFootprint d = Footprint(Scheme::kD, weights, config, a);
  EXPECT_DOUBLE_EQ(d.routed_bytes, kRoutedTensorsLayers * kExperts * int4_expert);

  // E (glint --experts int4): routed experts as in D, shared experts as in B, everything else as in C.
  const SchemeFootprint e = Footprint(Scheme::kE, weights, config, a);
  EXPECT_DOUBLE_EQ(e.routed_bytes, d.routed_bytes);
  EXPECT_LT(e.all.Total(), Footprint(Scheme::kC, weights, config, a).all.Total());
  EXPECT_GT(e.all.Total(), d.all.Total());  // the shared experts stay int8
  // glint's own int4 metadata (fp32 scale per 64 inputs): 0.5 + 4/64 bytes per routed expert weight.
  Assumptions glint_int4 = a;
  ASSERT_OK(glint_int4.Override("int4_group_size=64"));
  ASSERT_OK(glint_int4.Override("quant_scale_bytes=4"));
  EXPECT_DOUBLE_EQ(Footprint(Scheme::kE, weights, config, glint_int4).routed_bytes,
                   kRoutedTensorsLayers * kExperts * kExpertParams * (0.5 + 4.0 / 64));

  // C: KDA matrices int8; convs, A_log, dt_bias stay F32; o_norm (1-D) stays bf16. Per layer:
  const double kda_c = 4 * (8192.0 * 4096 + 8192 * 32 * 2)  // q, k, v [8192, 4096]; o [4096, 8192] (same size)
                       + 2 * (128.0 * 4096 + 128 * 32 * 2)  // f_a, g_a
                       + 2 * (8192.0 * 128 + 8192 * 1 * 2)  // f_b, g_b (K = 128: one group)
                       + (64.0 * 4096 + 64 * 32 * 2)        // b_proj
                       + 4 * (3 * 8192 * 4 + 64 + 8192)     // F32
                       + 2 * 128;                           // o_norm bf16
  const SchemeFootprint c = Footprint(Scheme::kC, weights, config, a);
  EXPECT_DOUBLE_EQ(c.group_bytes[static_cast<int>(TensorGroup::kKda)], 34 * kda_c);
  // Embeddings, vision, router/mHC/norms are kept: the same bytes as in A.
  for (TensorGroup g : {TensorGroup::kEmbedding, TensorGroup::kVision, TensorGroup::kRouterMhcNorms}) {
    EXPECT_DOUBLE_EQ(c.group_bytes[static_cast<int>(g)], all_bf16.group_bytes[static_cast<int>(g)]);
  }
  // Overrides reach the figures: 4-byte scales double every int8 scale byte.
  Assumptions wide = a;
  ASSERT_OK(wide.Override("quant_scale_bytes=4"));
  EXPECT_DOUBLE_EQ(Footprint(Scheme::kB, weights, config, wide).all.metadata, 2 * b.all.metadata);
}

TEST(Plan, StateHandCount) {
  const ModelConfig config = ReleaseConfig();
  const StateModel state = BuildStateModel(config, Assumptions::Defaults());
  EXPECT_EQ(state.cache_layers, 12);  // 11 DSA layers + MTP
  // Per token: latent 512 × 2 B + pooled key 128 × 2 B / 4 tokens, per cache layer.
  EXPECT_DOUBLE_EQ(state.PerToken(), 12 * (512 * 2 + 128 * 2 / 4));  // 13,056 B
  EXPECT_DOUBLE_EQ(state.kda_state, 34.0 * 64 * 128 * 128 * 4);      // 136 MiB (§5.3)
  EXPECT_DOUBLE_EQ(state.conv_state, 34.0 * 3 * 8192 * 3 * 2);
  EXPECT_DOUBLE_EQ(state.index_tail, 12.0 * 3 * 2 * 128 * 2);
  EXPECT_DOUBLE_EQ(state.PerSequence(32768),
                   32768.0 * 13056 + 34.0 * 64 * 128 * 128 * 4 + 34.0 * 3 * 8192 * 3 * 2 + 12.0 * 3 * 2 * 128 * 2);
  // 8 chips: KDA state and conv split by head; latent and keys whole on every chip.
  EXPECT_DOUBLE_EQ(state.PerSequencePerChip(32768, 8), 32768.0 * 13056 + 12.0 * 3 * 2 * 128 * 2 +
                                                           (34.0 * 64 * 128 * 128 * 4 + 34.0 * 3 * 8192 * 3 * 2) / 8);
  // fp8 latent: 512 values + one 4-byte scale per 128.
  Assumptions fp8 = Assumptions::Defaults();
  ASSERT_OK(fp8.Override("cache_latent_bytes=1"));
  EXPECT_DOUBLE_EQ(BuildStateModel(config, fp8).PerToken(), 12 * (512 + 4 * 4 + 64));
}

TEST(Plan, MemoryRowsHandCount) {
  const ModelConfig config = ReleaseConfig();
  PlanRequest request;
  request.hardware = {"h100x8", "v6e-64"};
  request.scheme = Scheme::kRelease;
  const PlanInputs inputs = Resolve(config, request);
  const Report report = BuildPlanReport(inputs);
  const Table& memory = FindTable(report, "memory");
  // 288 experts over 8 chips divide evenly: every chip holds an eighth of everything.
  EXPECT_DOUBLE_EQ(Value(memory, {"h100x8", "R"}, "weights"), kReleaseBytes / 8);
  EXPECT_DOUBLE_EQ(Value(memory, {"h100x8", "R"}, "usage"), kReleaseBytes / 8 / 80e9);
  const double room = 0.8 * 80e9 - kReleaseBytes / 8;
  EXPECT_DOUBLE_EQ(Value(memory, {"h100x8", "R"}, "cache_room"), room);
  const double per_sequence =
      32768.0 * 13056 + 12.0 * 3 * 2 * 128 * 2 + (34.0 * 64 * 128 * 128 * 4 + 34.0 * 3 * 8192 * 3 * 2) / 8;
  EXPECT_EQ(Value(memory, {"h100x8", "R"}, "sequences"), std::floor(room / per_sequence));  // 51
  // 64 chips: ceil(288 / 64) = 5 expert slots per chip where an even split would be 4.5.
  const double routed = kRoutedTensorsLayers * kExperts * (kExpertParams + 4 * kExpertScales);
  EXPECT_DOUBLE_EQ(Value(memory, {"v6e-64", "R"}, "weights"), (kReleaseBytes - routed) / 64 + 5 * routed / 288);
  EXPECT_DOUBLE_EQ(Value(memory, {"v6e-64", "R"}, "capacity"), 32.0 * 1073741824);
}

TEST(Plan, DecodeRooflineHandCount) {
  const ModelConfig config = ReleaseConfig();
  const Assumptions a = Assumptions::Defaults();
  const WeightSet weights = WeightsFromConfig(config);
  const SchemeFootprint r = Footprint(Scheme::kRelease, weights, config, a);
  const StateModel state = BuildStateModel(config, a);
  ASSERT_OK_AND_ASSIGN(Catalogue catalogue, EmbeddedCatalogue());
  const Chip* h100 = catalogue.FindChip("h100-sxm");
  ASSERT_NE(h100, nullptr);
  const RooflineInputs in{&config, &r, &state, &a, h100, 8};
  const DecodeEstimate one = EstimateDecode(in, 1, 32768);

  // Weights one decode step reads: everything but the routed experts, the MTP layer, the vision tower and the
  // embedding table, split over 8 chips, + one expert of each of the 42 MoE layers on the busiest chip (8
  // experts over 8 chips, at best one each).
  const double routed = kRoutedTensorsLayers * kExperts * (kExpertParams + 4 * kExpertScales);
  const double mtp_dense = 2 * 4096.0 * 8192 + 2 * 5 * 4096                                    // eh_proj, norms
                           + (1536.0 * 4096 + 16384.0 * 1536 + 512.0 * 4096 + 4096.0 * 16384)  // MLA fp8
                           + 4 * (12 * 32 + 128 * 12 + 4 * 32 + 32 * 128)                      // its scales
                           + 2 * (1536 + 512 + 32768.0 * 512)                                  // MLA bf16
                           + 2 * 7471872.0                                                     // indexer
                           + 2 * 288.0 * 4096 + 4 * 288                                        // router
                           + kExpertParams + 4 * kExpertScales;                                // shared expert
  const double dense = kReleaseBytes - routed - mtp_dense - 2 * 563627008.0 - 2 * 154880.0 * 4096;
  const double expert_slot = kMoeLayers * (kExpertParams + 4 * kExpertScales);
  EXPECT_DOUBLE_EQ(one.weight_bytes_per_chip, dense / 8 + expert_slot);
  // Caches at 32K: 11 layers × (2051 selected latents × 1024 B + 8192 pooled keys × 256 B), + the KDA state and
  // conv windows read and written, split over 8 chips.
  const double cache =
      11 * (2051.0 * 1024 + 8192.0 * 256) + 2 * (34.0 * 64 * 128 * 128 * 4 + 34.0 * 3 * 8192 * 3 * 2) / 8;
  EXPECT_DOUBLE_EQ(one.cache_bytes_per_chip, cache);
  EXPECT_NEAR(one.t_memory, (dense / 8 + expert_slot + cache) / 3.35e12, 1e-15);
  // 134 collectives × 10 µs + bytes / (900 GB/s × 0.5): 49 all-reduces of 2·(7/8)·4096·2 B, 84 all-to-alls of
  // (7/8)·8·4096·2 B, the logits all-gather of (7/8)·154880·2 B.
  EXPECT_EQ(one.collectives, 45 + 3 + 84 + 2);
  const double collective_bytes = 49 * 2 * 7.0 / 8 * 4096 * 2 + 84 * 7.0 / 8 * 8 * 4096 * 2 + 7.0 / 8 * 154880 * 2;
  EXPECT_NEAR(one.t_collective, 134 * 10e-6 + collective_bytes / 450e9, 1e-15);
  EXPECT_NEAR(one.step, one.t_memory + one.t_collective, 1e-15);  // compute is far below memory at batch 1
  EXPECT_GT(one.t_memory, one.t_compute);
  EXPECT_EQ(one.bound, "collectives");  // 1.35 ms of collectives > 0.86 ms of reads
  EXPECT_NEAR(one.tokens_per_s, 451.1, 0.1);

  // Expected distinct experts of a batch: 288 (1 − (1 − 8/288)^b); all hot (99%) from b = 164.
  EXPECT_NEAR(ExpectedDistinctExperts(config, 32), 288 * (1 - std::pow(280.0 / 288, 32)), 1e-9);
  EXPECT_EQ(BatchForExpertsHot(config), static_cast<int>(std::ceil(std::log(0.01) / std::log(280.0 / 288))));
  // At that batch every chip reads its whole trunk share: dense / 8 + all 36 expert slots.
  EXPECT_DOUBLE_EQ(EstimateDecode(in, 164, 32768).weight_bytes_per_chip, dense / 8 + 36 * expert_slot);
}

TEST(Plan, PrefillHandCount) {
  const ModelConfig config = ReleaseConfig();
  const Assumptions a = Assumptions::Defaults();
  const WeightSet weights = WeightsFromConfig(config);
  const SchemeFootprint all_bf16 = Footprint(Scheme::kA, weights, config, a);
  const StateModel state = BuildStateModel(config, a);
  ASSERT_OK_AND_ASSIGN(Catalogue catalogue, EmbeddedCatalogue());
  const RooflineInputs in{&config, &all_bf16, &state, &a, catalogue.FindChip("h100-sxm"), 8};
  const PrefillEstimate prefill = EstimatePrefill(in, 32768);
  // Matmul FLOPs: 2 × the active trunk parameters that multiply (16,742,333,246 without the lookup, less the
  // 1-D ones: KDA A_log/dt_bias/o_norm, MLA norms, indexer k_norm, layer norms, final norm, hc base/scale, router
  // bias).
  const double one_d =
      34 * (64 + 8192 + 128) + 11 * (1536 + 512) + 11 * 256 + 45 * 8192 + 4096 + 45 * 2 * (24 + 3) + 42 * 288;
  const double matmul = 2 * (16742333246.0 - one_d);
  // Attention (naive MLA, 2·64·(256 + 256) per selected token) averaged over 32768 positions: the first 2051
  // see p + 1 tokens, the rest 2051. Indexer: mean pools Σ floor(m/4) / 32768 = (4·8192·8191/2 + 8192) / 32768.
  const double mean_selected = (2051.0 * 2052 / 2 + (32768.0 - 2051) * 2051) / 32768;
  const double mean_pools = (4 * 8192.0 * 8191 / 2 + 8192) / 32768;
  const double core =
      11 * (2 * 64 * 512 * mean_selected + (2 * 32 * 128 + 2 * 32) * mean_pools) + 34 * 7.0 * 64 * 128 * 128;
  EXPECT_NEAR(prefill.flops_per_token, matmul + core, 1);
  EXPECT_NEAR(prefill.tokens_per_s, 8 * 989.5e12 * 0.4 / (matmul + core), 1e-6);
  EXPECT_EQ(prefill.dtypes, "bf16");
}

TEST(Plan, PrefillUsesTheDtypeTheChipRuns) {
  const ModelConfig config = ReleaseConfig();
  const Assumptions a = Assumptions::Defaults();
  const WeightSet weights = WeightsFromConfig(config);
  const StateModel state = BuildStateModel(config, a);
  ASSERT_OK_AND_ASSIGN(Catalogue catalogue, EmbeddedCatalogue());
  const SchemeFootprint c = Footprint(Scheme::kC, weights, config, a);
  const SchemeFootprint r = Footprint(Scheme::kRelease, weights, config, a);
  auto prefill = [&](const SchemeFootprint& f, const char* chip) {
    return EstimatePrefill({&config, &f, &state, &a, catalogue.FindChip(chip), 8}, 8192);
  };
  // v6e: int8 runs at 2× bf16; fp8 no faster than bf16. TPU7x: fp8 native, no int8. B300: int8 slower than bf16.
  EXPECT_EQ(prefill(c, "tpu-v6e").dtypes, "int8 + bf16");
  EXPECT_EQ(prefill(r, "tpu-v6e").dtypes, "fp8→bf16 + bf16");
  EXPECT_EQ(prefill(r, "tpu-v7x").dtypes, "fp8 + bf16");
  EXPECT_EQ(prefill(c, "tpu-v7x").dtypes, "int8→bf16 + bf16");
  EXPECT_EQ(prefill(c, "b300").dtypes, "int8→bf16 + bf16");
  // Less than 2×: lm_head, the router and mHC stay bf16 under C, and attention, indexer and KDA run in bf16.
  const double speedup = prefill(c, "tpu-v6e").tokens_per_s / prefill(r, "tpu-v6e").tokens_per_s;
  EXPECT_GT(speedup, 1.7);
  EXPECT_LT(speedup, 2.0);
  // mfu is a straight multiplier.
  Assumptions faster = a;
  ASSERT_OK(faster.Override("mfu=0.8"));
  EXPECT_NEAR(EstimatePrefill({&config, &c, &state, &faster, catalogue.FindChip("h100-sxm"), 8}, 8192).tokens_per_s,
              2 * prefill(c, "h100-sxm").tokens_per_s, 1e-6);
}

TEST(Plan, IndexerTableHandCount) {
  const ModelConfig config = ReleaseConfig();
  PlanRequest request;
  request.hardware = {"b200x8"};
  request.scheme = Scheme::kRelease;
  const Report report = BuildPlanReport(Resolve(config, request));
  const Table& indexer = FindTable(report, "indexer");
  // At 1M tokens: attention over 2051 selected latents, 4·64·512 FLOPs each, × 11 layers; the indexer scores
  // 262144 pools at 2·32·128 + 2·32 FLOPs each, plus its projections 2·(4096·1536 + 128·4096 + 32·4096 +
  // 128·4096) per layer.
  const std::vector<std::string> key = {"1M (1,048,576)"};
  EXPECT_DOUBLE_EQ(Value(indexer, key, "attention_flops"), 11 * 4.0 * 64 * 512 * 2051);
  const double projections = 2 * (4096.0 * 1536 + 128 * 4096 + 32 * 4096 + 128 * 4096);
  EXPECT_DOUBLE_EQ(Value(indexer, key, "indexer_flops"), 11 * ((2 * 32 * 128 + 2 * 32) * 262144.0 + projections));
  EXPECT_DOUBLE_EQ(Value(indexer, key, "key_bytes"), 11 * 262144.0 * 128 * 2);
  // The indexer passes attention between 128K and 1M; at 8K it is a small fraction.
  EXPECT_LT(Value(indexer, {"8K (8,192)"}, "ratio"), 0.2);
  EXPECT_GT(Value(indexer, {"128K (131,072)"}, "ratio"), 1.0);
  EXPECT_GT(Value(indexer, key, "share"), Value(indexer, {"128K (131,072)"}, "share"));
}

// The same config with more experts: the expert and router rows change, attention, KDA and state do not.
TEST(Plan, MoreExpertsChangeTheRightRows) {
  const ModelConfig base = ReleaseConfig();
  const ModelConfig more = ReleaseConfigWith("n_routed_experts", 576);
  PlanRequest request;
  request.hardware = {"b300x8"};
  request.scheme = Scheme::kRelease;
  const Report a = BuildPlanReport(Resolve(base, request));
  const Report b = BuildPlanReport(Resolve(more, request));
  const Table& pa = FindTable(a, "parameters");
  const Table& pb = FindTable(b, "parameters");
  EXPECT_EQ(Value(pb, {"routed experts"}, "params"), 2 * Value(pa, {"routed experts"}, "params"));
  EXPECT_EQ(Value(pb, {"router + mHC + norms"}, "params") - Value(pa, {"router + mHC + norms"}, "params"),
            42 * 288 * (4096 + 1.0));  // 288 more router rows and biases per MoE layer
  EXPECT_EQ(Value(pb, {"MTP layer"}, "params") - Value(pa, {"MTP layer"}, "params"),
            288 * kExpertParams + 288 * (4096 + 1.0));
  for (const char* unchanged : {"embed + lm_head", "KDA", "MLA", "DSA indexer", "dense MLP", "shared experts"}) {
    EXPECT_EQ(Value(pb, {unchanged}, "params"), Value(pa, {unchanged}, "params")) << unchanged;
  }
  // Active parameters: k/E halves, so the active routed share stays 42 · 8 experts.
  EXPECT_NEAR(Value(FindTable(b, "active"), {"active: trunk"}, "params") -
                  Value(FindTable(a, "active"), {"active: trunk"}, "params"),
              42 * 288 * (4096 + 1.0), 1);
  EXPECT_GT(Value(FindTable(b, "memory"), {"b300x8", "R"}, "weights"),
            1.9 * Value(FindTable(a, "memory"), {"b300x8", "R"}, "weights"));
  const Table& sa = FindTable(a, "state");
  const Table& sb = FindTable(b, "state");
  ASSERT_EQ(sa.rows.size(), sb.rows.size());
  for (size_t i = 0; i < sa.rows.size(); ++i) EXPECT_EQ(sa.rows[i][3].text, sb.rows[i][3].text) << sa.rows[i][0].text;
}

// A coarser indexer pool: fewer pooled keys per token and fewer pools to score; the weights barely move (ape).
TEST(Plan, CoarserIndexerPoolsChangeStateAndIndexerRows) {
  const ModelConfig base = ReleaseConfig();
  const ModelConfig coarse = ReleaseConfigWith("index_kpool", 8);
  PlanRequest request;
  request.hardware = {"b200x8"};
  request.scheme = Scheme::kRelease;
  const Report a = BuildPlanReport(Resolve(base, request));
  const Report b = BuildPlanReport(Resolve(coarse, request));
  const std::vector<std::string> keys = {"indexer pooled keys (128 per 8 tokens)", "bf16"};
  EXPECT_DOUBLE_EQ(Value(FindTable(b, "state"), keys, "per_token"), 12 * 128 * 2 / 8.0);
  EXPECT_DOUBLE_EQ(Value(FindTable(b, "indexer"), {"1M (1,048,576)"}, "key_bytes"),
                   Value(FindTable(a, "indexer"), {"1M (1,048,576)"}, "key_bytes") / 2);
  // index_kpool_compress_ape is [index_kpool, 128]: 4 more rows per DSA layer (11 trunk + MTP).
  EXPECT_EQ(Value(FindTable(b, "parameters"), {"DSA indexer"}, "params") -
                Value(FindTable(a, "parameters"), {"DSA indexer"}, "params"),
            11 * 4 * 128.0);
  EXPECT_EQ(Value(FindTable(b, "parameters"), {"routed experts"}, "params"),
            Value(FindTable(a, "parameters"), {"routed experts"}, "params"));
}

TEST(Plan, HeadersAndConfigAgreeOnGoldenCheckpoints) {
  for (const char* fixture : {"golden/tiny-dense", "golden/tiny-sparse"}) {
    SCOPED_TRACE(fixture);
    PlanRequest request;
    request.model = testing::TestDataPath(fixture);
    request.hardware = {"h100x8"};
    ASSERT_OK_AND_ASSIGN(PlanInputs inputs, ResolvePlan(request));
    EXPECT_EQ(inputs.census.source, CensusSource::kCheckpoint);
    EXPECT_TRUE(inputs.weights.from_checkpoint);
    EXPECT_NE(inputs.model_source.find("safetensors headers"), std::string::npos);
    ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(request.model));
    EXPECT_EQ(inputs.census.TotalBytes(), CensusFromCheckpoint(checkpoint, inputs.config).TotalBytes());
    // The release scheme from headers is the checkpoint's bytes exactly; from the config (no vision tensors in the
    // fixture, so vision excluded) the same.
    const SchemeFootprint from_headers = Footprint(Scheme::kRelease, inputs.weights, inputs.config, inputs.assumptions);
    EXPECT_DOUBLE_EQ(from_headers.all.Total(), static_cast<double>(inputs.census.TotalBytes()));
    const SchemeFootprint from_config =
        Footprint(Scheme::kRelease, WeightsFromConfig(inputs.config), inputs.config, inputs.assumptions);
    EXPECT_DOUBLE_EQ(from_config.all.Total() - from_config.group_bytes[static_cast<int>(TensorGroup::kVision)],
                     from_headers.all.Total());
    for (Scheme scheme : AllSchemes()) {
      const SchemeFootprint h = Footprint(scheme, inputs.weights, inputs.config, inputs.assumptions);
      const SchemeFootprint c = Footprint(scheme, WeightsFromConfig(inputs.config), inputs.config, inputs.assumptions);
      EXPECT_DOUBLE_EQ(h.routed_bytes, c.routed_bytes) << SchemeLetter(scheme);
      EXPECT_DOUBLE_EQ(h.decode_dense_bytes, c.decode_dense_bytes) << SchemeLetter(scheme);
    }
  }
}

TEST(Plan, UnknownHardwareListsTheKnownNames) {
  PlanRequest request;
  request.hardware = {"h100x8", "v9z-8"};
  EXPECT_ERROR_CONTAINS(ResolvePlanForConfig(ReleaseConfig(), "test", request),
                        "unknown hardware 'v9z-8'; known: v6e-4, v6e-8, v6e-16, v6e-32, v6e-64, v7x-8, v7x-16, v7x-32, "
                        "h100x8, h200x8, b200x8, b300x8, mi355xx8");
  request.hardware = {"cpu"};
  EXPECT_ERROR_CONTAINS(ResolvePlanForConfig(ReleaseConfig(), "test", request), "needs --memory GB and --bandwidth");
  request.cpu = CpuServer{768e9, 400e9, std::nullopt, std::nullopt};
  ASSERT_OK_AND_ASSIGN(PlanInputs inputs, ResolvePlanForConfig(ReleaseConfig(), "test", request));
  ASSERT_EQ(inputs.topologies.size(), 1u);
  EXPECT_EQ(inputs.topologies[0].name, "cpu");
}

// A CPU server: one chip, no collectives; §1 of design.md: ~16.7 B active parameters at 400 GB/s give ~24 tok/s in
// bf16-free int8 terms (≈ 17 GB per token read).
TEST(Plan, CpuServerDecode) {
  PlanRequest request;
  request.hardware = {"cpu"};
  request.scheme = Scheme::kC;
  request.cpu = CpuServer{768e9, 400e9, std::nullopt, std::nullopt};
  request.context = 4096;
  const Report report = BuildPlanReport(Resolve(ReleaseConfig(), request));
  const Table& roofline = FindTable(report, "roofline");
  EXPECT_EQ(Value(roofline, {"cpu", "C"}, "b1_collectives"), 0);
  const double tokens = Value(roofline, {"cpu", "C"}, "b1_tokens_per_s");
  EXPECT_GT(tokens, 17);
  EXPECT_LT(tokens, 24);
  // No peak given: prefill says so instead of inventing a figure.
  size_t column = 0;
  while (roofline.columns[column].id != "prefill_tokens_per_s") ++column;
  for (const auto& row : roofline.rows) EXPECT_EQ(row[column].text, "n/a (no peak)");
}

// A made-up host: 2 threads, 12 GB/s per thread and 20 GB/s together, a 1,000 GOPS int8 loop, products at 16 GB/s
// (decode), 400 GOPS (int8 prefill) and 100 GOPS (bf16 prefill).
HostServer MadeUpHost(int cores, int sockets) {
  HostServer server;
  server.measured = {2, "avx512", 12e9, 20e9, 1000e9, 16e9, 400e9, 100e9, 64e9};
  server.cores_per_socket = cores;
  server.sockets = sockets;
  server.socket_bandwidth = 300e9;
  server.memory_bytes = 1536e9;
  server.socket_link = sockets > 1 ? 100e9 : 0;
  return server;
}

TEST(Plan, HostFiguresScaleThisMachinesCores) {
  ASSERT_OK_AND_ASSIGN(HostFigures f, DeriveHostFigures(MadeUpHost(16, 1)));
  EXPECT_DOUBLE_EQ(f.bandwidth_per_socket, 16 * 12e9);  // 16 cores cannot drain 300 GB/s at 12 GB/s each
  EXPECT_DOUBLE_EQ(f.bandwidth_efficiency, 16.0 / 20);
  EXPECT_DOUBLE_EQ(f.mfu, 0.4);
  EXPECT_DOUBLE_EQ(f.int8_peak_per_socket, 16 * 500e9);
  EXPECT_DOUBLE_EQ(f.bf16_peak_per_socket, 16 * 50e9 / 0.4);  // × mfu = the measured per-core bf16 rate
  ASSERT_OK_AND_ASSIGN(f, DeriveHostFigures(MadeUpHost(64, 1)));
  EXPECT_DOUBLE_EQ(f.bandwidth_per_socket, 300e9);  // the socket's channels are the limit
  HostServer avx2 = MadeUpHost(8, 1);
  avx2.measured.int8_loop_peak = 0;  // nothing to probe: the product rate is the peak
  ASSERT_OK_AND_ASSIGN(f, DeriveHostFigures(avx2));
  EXPECT_DOUBLE_EQ(f.mfu, 1.0);
  EXPECT_DOUBLE_EQ(f.int8_peak_per_socket, 8 * 200e9);

  HostServer bad = MadeUpHost(16, 2);
  bad.socket_link = 0;
  EXPECT_ERROR_CONTAINS(DeriveHostFigures(bad), "--host-sockets 2 needs --socket-link");
  bad = MadeUpHost(0, 1);
  EXPECT_ERROR_CONTAINS(DeriveHostFigures(bad), "--host-cores 0 must be in [1, 4096]");
  bad = MadeUpHost(16, 1);
  bad.measured.int8_decode_rate = 0;
  EXPECT_ERROR_CONTAINS(DeriveHostFigures(bad), "host measurements are incomplete");
}

// Prefill/decode disaggregation: a request's state (the state table's fixed part + its per-token part × the prompt)
// over each link at the line rate, beside the host's projected prefill of the same prompt (scheme C).
TEST(Plan, DisaggregationTableIsTheStateOnTheLink) {
  PlanRequest request;
  request.hardware = {"host"};
  request.host = MadeUpHost(32, 1);
  request.context = 32768;
  const PlanInputs inputs = Resolve(ReleaseConfig(), request);
  const Report report = BuildPlanReport(inputs);
  const Table& table = FindTable(report, "disaggregation");
  ASSERT_EQ(table.rows.size(), 3u);  // 1,024, 8,192 and the context
  const StateModel state = BuildStateModel(inputs.config, inputs.assumptions);
  // The release widths: 34 KDA layers × 64 heads × 128 × 128 fp32 ≈ 143 MB whatever the prompt.
  EXPECT_DOUBLE_EQ(state.kda_state, 34.0 * 64 * 128 * 128 * 4);
  const SchemeFootprint f = Footprint(Scheme::kC, inputs.weights, inputs.config, inputs.assumptions);
  const RooflineInputs host{
      &inputs.config, &f, &state, &inputs.assumptions, inputs.catalogue.FindChip("host-socket"), 1};
  for (int64_t prompt : {1024, 8192, 32768}) {
    const std::string key = FormatInteger(prompt);
    const double bytes = state.Fixed() + state.PerToken() * static_cast<double>(prompt);
    EXPECT_DOUBLE_EQ(Value(table, {key}, "state"), bytes);
    EXPECT_NEAR(Value(table, {key}, "link_1"), bytes * 8 / 1e9, 1e-9 * bytes);
    EXPECT_NEAR(Value(table, {key}, "link_25"), bytes * 8 / 25e9, 1e-9 * bytes);
    const double prefill = static_cast<double>(prompt) / EstimatePrefill(host, prompt).tokens_per_s;
    EXPECT_NEAR(Value(table, {key}, "prefill"), prefill, 1e-6 * prefill);
    EXPECT_NEAR(Value(table, {key}, "ratio_10"), bytes * 8 / 10e9 / prefill, 1e-6);
  }
  // The local-prefill threshold: the fixed state's link time × the host's 512-token prefill rate.
  const int64_t crossing = static_cast<int64_t>(state.Fixed() * 8 / 10e9 * EstimatePrefill(host, 512).tokens_per_s);
  bool found = false;
  for (const std::string& note : table.notes) {
    found = found || note.find(StrCat("below ≈ ", FormatInteger(crossing), " tokens at 10 Gb/s")) != std::string::npos;
  }
  EXPECT_TRUE(found) << "no local-prefill note for " << crossing << " tokens";

  // Without a host, the link times alone.
  const Report plain = BuildPlanReport(Resolve(ReleaseConfig()));
  const Table& links = FindTable(plain, "disaggregation");
  EXPECT_EQ(links.columns.size(), 6u);  // prompt, state, 4 links
}

TEST(Plan, HostProjectionIsTheRooflineOnTheHostsFigures) {
  PlanRequest request;
  request.hardware = {"host"};
  request.host = MadeUpHost(32, 2);
  request.context = 8192;
  ASSERT_OK(request.assumptions.Set("bandwidth_efficiency", 0.8));
  ASSERT_OK(request.assumptions.Set("mfu", 0.4));
  const PlanInputs inputs = Resolve(ReleaseConfig(), request);
  const Report report = BuildPlanReport(inputs);
  const Table& projection = FindTable(report, "host_projection");
  ASSERT_EQ(projection.rows.size(), 2u);  // C and E
  const Chip* chip = inputs.catalogue.FindChip("host-socket");
  ASSERT_NE(chip, nullptr);
  EXPECT_DOUBLE_EQ(chip->memory_bytes.value, 768e9);
  EXPECT_DOUBLE_EQ(chip->interconnect_bandwidth.value, 100e9);
  const StateModel state = BuildStateModel(inputs.config, inputs.assumptions);
  for (Scheme scheme : {Scheme::kC, Scheme::kE}) {
    const SchemeFootprint f = Footprint(scheme, inputs.weights, inputs.config, inputs.assumptions);
    const RooflineInputs roofline{&inputs.config, &f, &state, &inputs.assumptions, chip, 2};
    const std::string letter(SchemeLetter(scheme));
    for (int batch : {1, 8, 64}) {
      EXPECT_NEAR(Value(projection, {letter}, StrCat("b", batch)), EstimateDecode(roofline, batch, 8192).tokens_per_s,
                  0.05);
    }
    EXPECT_NEAR(Value(projection, {letter}, "prefill_512"), EstimatePrefill(roofline, 512).tokens_per_s, 0.5);
  }
  // int4 experts read fewer bytes: faster at batch 1.
  EXPECT_GT(Value(projection, {"E"}, "b1"), Value(projection, {"C"}, "b1"));
  EXPECT_DOUBLE_EQ(Value(FindTable(report, "host_measurements"), {"mfu"}, "value"), 0.4);

  PlanRequest mixed = request;
  mixed.hardware = {"host", "v6e-8"};
  EXPECT_ERROR_CONTAINS(ResolvePlanForConfig(ReleaseConfig(), "test", mixed), "cannot be combined");
  PlanRequest unmeasured;
  unmeasured.hardware = {"host"};
  EXPECT_ERROR_CONTAINS(ResolvePlanForConfig(ReleaseConfig(), "test", unmeasured), "needs this machine's measurements");
}

TEST(Plan, AssumptionOverridesAreCheckedAndApplied) {
  Assumptions a = Assumptions::Defaults();
  EXPECT_ERROR_CONTAINS(a.Override("mfu"), "expected NAME=VALUE");
  EXPECT_ERROR_CONTAINS(a.Override("mfu=fast"), "'fast' is not a number");
  EXPECT_ERROR_CONTAINS(a.Override("mfu=1.5"), "out of range");
  EXPECT_ERROR_CONTAINS(a.Override("int8_group_size=12.5"), "whole number");
  EXPECT_ERROR_CONTAINS(a.Override("speed=2"), "unknown assumption 'speed'; known: memory_threshold");
  ASSERT_OK(a.Override("collective_latency_us=0"));
  EXPECT_EQ(a.Get("collective_latency_us"), 0);
  PlanRequest request;
  request.assumptions = a;
  request.hardware = {"h100x8"};
  request.scheme = Scheme::kRelease;
  const Report report = BuildPlanReport(Resolve(ReleaseConfig(), request));
  // Without the fixed collective cost only bytes remain: batch-1 decode is bandwidth-bound.
  const Table& roofline = FindTable(report, "roofline");
  EXPECT_LT(Value(roofline, {"h100x8", "R"}, "b1_collectives"), 20e-6);
  const Table& assumptions = FindTable(report, "assumptions");
  EXPECT_EQ(Value(assumptions, {"collective_latency_us"}, "default"), 10);
}

TEST(Plan, BadRequestsAreClearErrors) {
  PlanRequest request;
  request.context = 0;
  EXPECT_ERROR_CONTAINS(ResolvePlanForConfig(ReleaseConfig(), "test", request), "--context 0 is out of range");
  request = {};
  request.concurrency = 0;
  EXPECT_ERROR_CONTAINS(ResolvePlanForConfig(ReleaseConfig(), "test", request), "--concurrency 0 is out of range");
  request = {};
  request.model = "/nonexistent/model";
  EXPECT_ERROR_CONTAINS(ResolvePlan(request), "does not exist");
  EXPECT_ERROR_CONTAINS(ParseScheme("F"), "unknown scheme 'F'");
  request = {};
  request.catalogue_path = "/nonexistent/hardware.json";
  EXPECT_ERROR_CONTAINS(ResolvePlanForConfig(ReleaseConfig(), "test", request), "/nonexistent/hardware.json");
}

TEST(Catalogue, EmbeddedCatalogueCitesEveryFigure) {
  ASSERT_OK_AND_ASSIGN(Catalogue catalogue, EmbeddedCatalogue());
  for (const char* name : {"v6e-4", "v6e-8", "v6e-16", "v6e-32", "v6e-64", "v7x-8", "v7x-16", "v7x-32", "h100x8",
                           "h200x8", "b200x8", "b300x8", "mi355xx8"}) {
    EXPECT_NE(catalogue.FindTopology(name), nullptr) << name;
  }
  for (const Chip& chip : catalogue.chips) {
    SCOPED_TRACE(chip.name);
    EXPECT_TRUE(chip.memory_bytes.source.starts_with("https://"));
    EXPECT_TRUE(chip.memory_bandwidth.source.starts_with("https://"));
    EXPECT_TRUE(chip.interconnect_bandwidth.source.starts_with("https://"));
    for (const auto& [dtype, figure] : chip.peak) EXPECT_TRUE(figure.source.starts_with("https://"));
  }
  // Unit conversion: v6e 32 GiB, 1638 GB/s, 918 TFLOPS bf16; TPU7x has no int8 peak.
  const Chip* v6e = catalogue.FindChip("tpu-v6e");
  EXPECT_DOUBLE_EQ(v6e->memory_bytes.value, 32.0 * 1073741824);
  EXPECT_DOUBLE_EQ(v6e->memory_bandwidth.value, 1638e9);
  EXPECT_DOUBLE_EQ(v6e->peak.at(ComputeDType::kBf16).value, 918e12);
  EXPECT_FALSE(catalogue.FindChip("tpu-v7x")->peak.contains(ComputeDType::kInt8));
}

TEST(Catalogue, RejectsBadCatalogues) {
  const std::string chip =
      R"({"name": "x", "memory": {"value": 1, "unit": "GB", "source": "s"},
          "memory_bandwidth": {"value": 1, "unit": "GB/s", "source": "s"},
          "peak": {"bf16": {"value": 1, "unit": "TFLOPS", "source": "s"}},
          "interconnect": {"value": 1, "unit": "GB/s", "source": "s"}})";
  auto catalogue = [&](const std::string& chips, const std::string& topologies) {
    return ParseCatalogue(R"({"chips": [)" + chips + R"(], "topologies": [)" + topologies + "]}", "test.json");
  };
  EXPECT_OK(catalogue(chip, R"({"name": "x-1", "chip": "x", "chips": 1})").status());
  EXPECT_ERROR_CONTAINS(ParseCatalogue("[1, 2", "test.json"), "test.json: not a JSON object");
  EXPECT_ERROR_CONTAINS(catalogue(chip, R"({"name": "x-1", "chip": "y", "chips": 1})"), "chip 'y' is not in 'chips'");
  EXPECT_ERROR_CONTAINS(catalogue(chip, R"({"name": "x-1", "chip": "x", "chips": 0})"), "'chips' must be an integer");
  std::string no_source = chip;
  no_source.replace(no_source.find(R"("source": "s"})"), 14, R"("source": ""})");
  EXPECT_ERROR_CONTAINS(catalogue(no_source, R"({"name": "x-1", "chip": "x", "chips": 1})"), "missing 'source'");
  std::string bad_unit = chip;
  bad_unit.replace(bad_unit.find(R"("unit": "GB",)"), 13, R"("unit": "MB",)");
  EXPECT_ERROR_CONTAINS(catalogue(bad_unit, R"({"name": "x-1", "chip": "x", "chips": 1})"), "unit 'MB'");
  EXPECT_ERROR_CONTAINS(catalogue(chip + "," + chip, R"({"name": "x-1", "chip": "x", "chips": 1})"), "defined twice");
  EXPECT_ERROR_CONTAINS(catalogue(chip, R"({"name": "cpu", "chip": "x", "chips": 1})"), "reserved");
}

// glint's own collectives (plan/collectives.h) on the released config, the layer counts taken from it.
TEST(PlanCollectives, CountsAndBytesByLayout) {
  const ModelConfig c = ReleaseConfig();
  const int64_t moe = c.NumLayersOf(MlpKind::kMoe), dense = c.NumLayersOf(MlpKind::kDense);
  const uint64_t row = static_cast<uint64_t>(c.hidden_size) * 4;
  EXPECT_TRUE(CollectivesPerStep(c, {1, 1}, {}).empty());  // one process: none
  // --tp 1, decode of 16 sequences: the plan broadcast and one MoE all-reduce per MoE layer.
  const StepShape decode{16, 16, 16, 512, 0, 0, 0};
  auto lines = CollectivesPerStep(c, {4, 1}, decode);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].op, CollectiveOp::kBroadcast);
  EXPECT_EQ(lines[0].payload, 21u + 16 * (29 + 8 + 31) + 4 * 16);
  EXPECT_EQ(lines[1].calls, moe);
  EXPECT_EQ(lines[1].payload, moe * 16 * row);
  EXPECT_EQ(lines[1].BytesReceived(true), 3 * moe * 16 * row);
  // A prefill of 1100 rows runs in 3 passes of ≤ 512.
  lines = CollectivesPerStep(c, {2, 1}, {1, 1100, 1, 512, 0, 0, 0});
  EXPECT_EQ(lines[1].calls, 3 * moe);
  EXPECT_EQ(lines[1].payload, moe * 1100 * row);
  // --tp 2 on 4 ranks: attention over the group every trunk layer, dense MLPs over the group, the MoE over all,
  // one gather of the logit rows to rank 0 (its group: the other rank's columns); the MTP layer's three per call,
  // one call over all 16 sequences' 32 pairs (FastModel::MtpForwardBatch) and two chained drafts
  // (--speculative-tokens 3).
  StepShape speculative{16, 16, 16, 512, 0, 16, 32};
  speculative.mtp_logit_rows = 16;
  speculative.mtp_chain = 2;
  lines = CollectivesPerStep(c, {4, 2}, speculative);
  int64_t group = 0, all = 0, gathers = 0;
  for (const CollectiveLine& line : lines) {
    EXPECT_NE(line.op, CollectiveOp::kAllGather);
    if (line.op == CollectiveOp::kGather) {
      gathers += line.calls;
      EXPECT_EQ(line.group, 2);
    }
    if (line.op == CollectiveOp::kAllReduce) (line.group == 2 ? group : all) += line.calls;
  }
  EXPECT_EQ(group, c.num_hidden_layers + dense + 3);
  EXPECT_EQ(all, moe + 3);
  EXPECT_EQ(gathers, 1 + 3);
  const CollectiveLine& mtp_moe = lines[lines.size() - 2];
  ASSERT_EQ(mtp_moe.what, "MTP MoE all-reduce (all ranks)");
  EXPECT_EQ(mtp_moe.payload, (32 + 2 * 16) * row);  // the first call's pairs, then one pair per sequence per draft
  ASSERT_EQ(lines.back().what, "MTP lm_head gather to rank 0 (its TP group)");
  EXPECT_EQ(lines.back().payload, (16 + 2 * 16) * static_cast<uint64_t>(c.vocab_size / 2) * 4);
  ASSERT_EQ(lines[4].what, "lm_head gather to rank 0 (its TP group)");
  // 154,880 rows = 9,680 blocks of 16: 4,840 blocks (77,440 rows) each; rank 0 receives the other half.
  EXPECT_EQ(lines[4].payload, 16 * static_cast<uint64_t>(c.vocab_size / 2) * 4);
  EXPECT_EQ(lines[4].BytesReceived(true), lines[4].payload);
  EXPECT_EQ(lines[4].BytesSent(true), 0u);
  // Time: ⌈log2 4⌉ = 2 latencies per call, received bytes over the bandwidth.
  const Network net{10e-6, 1e9};
  const CollectiveLine& reduce = CollectivesPerStep(c, {4, 1}, decode)[1];
  const CollectiveTime t = CollectiveSeconds(reduce, net);
  EXPECT_DOUBLE_EQ(t.latency, moe * 2 * 10e-6);
  EXPECT_DOUBLE_EQ(t.bandwidth, 3.0 * moe * 16 * row / 1e9);
  EXPECT_ERROR_CONTAINS(ValidateLayout({4, 3}), "divide");
  EXPECT_ERROR_CONTAINS(ValidateLayout({0, 1}), "--ranks");
}

// --dp-attention on the released config (288 routed experts top-8, one shared): per pass two
// all-to-alls per MoE layer and one for the head; rank 0's rows go to the shared expert's holder always and to each
// other rank with the chance one of their 8 experts is there.
TEST(PlanCollectives, DpAttentionExchangesRowsAllToAll) {
  const ModelConfig c = ReleaseConfig();
  const int64_t moe = c.NumLayersOf(MlpKind::kMoe), k = c.num_experts_per_tok, d = c.hidden_size;
  const double record = 8.0 * k + 4.0 * d;
  ParallelLayout dp{2, 1, 0, true};
  // One sequence: rank 0 holds it and sends every row to rank 1 (the shared expert's holder); nothing comes to it
  // but the partial sums; no row travels to the head.
  auto lines = CollectivesPerStep(c, dp, {1, 1, 1, 512, 0, 0, 0});
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1].op, CollectiveOp::kAllToAll);
  EXPECT_EQ(lines[1].calls, moe);
  EXPECT_EQ(lines[1].payload, static_cast<uint64_t>(std::llround(moe * record)));
  EXPECT_EQ(lines[1].received, 0u);
  EXPECT_EQ(lines[2].payload, 0u);
  EXPECT_EQ(lines[2].received, static_cast<uint64_t>(moe * 4 * d));
  EXPECT_EQ(lines[3].calls, 1);
  EXPECT_EQ(lines[3].received, 0u);
  // 16 sequences: 8 on rank 0. Rank 1's 8 rows come to rank 0 when one of their 8 experts is among rank 0's half
  // of E: 1 − C(E/2, 8) / C(E, 8); its 8 rows wanting logits reach rank 0's head.
  const double e = static_cast<double>(c.n_routed_experts);
  ASSERT_EQ(c.n_routed_experts % 2, 0);
  double none = 1;
  for (int i = 0; i < k; ++i) none *= (e / 2 - i) / (e - i);
  lines = CollectivesPerStep(c, dp, {16, 16, 16, 512, 0, 0, 0});
  EXPECT_EQ(lines[1].payload, static_cast<uint64_t>(std::llround(moe * 8 * record)));
  EXPECT_EQ(lines[1].received, static_cast<uint64_t>(std::llround(moe * 8 * (1 - none) * record)));
  EXPECT_EQ(lines[3].received, static_cast<uint64_t>(8 * (8 + 4 * d)));
  // Time: 2 (N − 1) latencies per all-to-all, the larger direction over the bandwidth.
  const CollectiveTime t = CollectiveSeconds(lines[1], Network{10e-6, 1e9});
  EXPECT_DOUBLE_EQ(t.latency, moe * 2 * 10e-6);
  EXPECT_DOUBLE_EQ(t.bandwidth, static_cast<double>(lines[1].payload) / 1e9);
  EXPECT_ERROR_CONTAINS(ValidateLayout({4, 2, 0, true}), "--dp-attention needs --tp 1");
}

// --lm-head-split-rows at --tp 1: a gather over all ranks for each pass of at most that many logit rows, of the
// other ranks' columns (154,880 rows = 9,680 blocks over 4 ranks: 2,420 blocks = 38,720 rows each).
TEST(PlanCollectives, LmHeadSplitOverEveryRankGathersSmallPasses) {
  const ModelConfig c = ReleaseConfig();
  const uint64_t others = (c.vocab_size - 38720) * 4;
  auto gathers = [&](const ParallelLayout& layout, const StepShape& step) {
    std::vector<CollectiveLine> found;
    for (const CollectiveLine& line : CollectivesPerStep(c, layout, step)) {
      if (line.op == CollectiveOp::kGather) found.push_back(line);
    }
    return found;
  };
  const ParallelLayout split{4, 1, 4};
  auto lines = gathers(split, {4, 4, 4, 512, 0, 0, 0});  // decode of 4 sequences: split
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].group, 4);
  EXPECT_EQ(lines[0].calls, 1);
  EXPECT_EQ(lines[0].payload, 4 * others);
  EXPECT_TRUE(gathers(split, {5, 5, 5, 512, 0, 0, 0}).empty());      // 5 rows: rank 0 computes it whole
  EXPECT_TRUE(gathers({4, 1, 0}, {4, 4, 4, 512, 0, 0, 0}).empty());  // off
  lines = gathers(split, {1, 1100, 1, 512, 0, 0, 0});                // a prefill's last row, in its last of 3 passes
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].calls, 1);
  EXPECT_EQ(lines[0].payload, others);
  lines = gathers(split, {1, 1026, 1026, 512, 0, 0, 0});  // every row wants logits: passes of 512, 512, 2
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].calls, 1);
  EXPECT_EQ(lines[0].payload, 2 * others);
  StepShape mtp{3, 3, 3, 512, 0, 3, 6};  // the MTP call's 6 draft rows: whole; its 2 chained calls of 3: split
  mtp.mtp_logit_rows = 6;
  mtp.mtp_chain = 2;
  lines = gathers(split, mtp);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].what, "MTP lm_head gather to rank 0 (all ranks, --lm-head-split-rows)");
  EXPECT_EQ(lines[1].calls, 2);
  EXPECT_EQ(lines[1].payload, 2 * 3 * others);
}

}  // namespace
}  // namespace glint::plan
