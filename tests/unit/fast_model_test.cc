// The fast path (FastModel) against the fp32 reference on the golden fixtures (docs/fast-path.md, "Quality"):
//   gate (a) each fast sublayer on the golden input of that sublayer against the golden output;
//   gate (b) end to end with the discrete choices (router top-k, indexer top-k) forced from the fp32 path, so that
//            only continuous error accumulates: top-1 agreement and mean KL divergence.
// Bounds come from the format's error budget: a W8A8 product (int8 weights and activations, scale per row/token
// and 128-group) has ≈ 0.6% relative RMS weight-rounding and ≈ 0.5% activation-rounding error; a sublayer chains
// 2–3 products (≤ 2.4% measured, bound 4%); 2L sublayers accumulate to 6–10% at the logits, a KL of
// ½·(σ_logit·ε)² ≈ 0.02–0.04 nats (bound 0.06, top-1 ≥ 85%). The issue's targets (≥ 99%, ≤ 1e-3 nats) are printed
// beside the measurement; docs/performance.md explains why int8 cannot reach them on these random fixtures.
// Also: the converted container loads to bit-identical results, batching equals running alone, chunked prefill
// equals whole prefill, and bad input is refused.
#include "fast/fast_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/file.h"
#include "base/worker_pool.h"
#include "fast/fast_compact_attention.h"
#include "fast/fast_layers.h"
#include "io/token_file.h"
#include "kernels/mla_ops.h"
#include "model/forward_common.h"
#include "model_checks.h"
#include "test_util.h"

namespace glint {
namespace {

using testing::Accumulate;
using testing::Agreement;
using testing::ForcedChoicesOf;
using testing::RecordingTrace;

class FastGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = testing::TestDataPath("golden/" + GetParam());
    auto reference = ReferenceModel::Load(dir);
    ASSERT_TRUE(reference.ok()) << reference.status().ToString();
    reference_ = std::move(reference).value();
    auto fast = FastModel::Load(dir, pool_);
    ASSERT_TRUE(fast.ok()) << fast.status().ToString();
    fast_ = std::move(fast).value();
    golden_ = std::make_unique<testing::GoldenOutputs>(GetParam());
  }

  std::vector<float> Logits(const Model& model, const std::vector<int32_t>& tokens, Trace* trace = nullptr,
                            const ForcedChoices* forced = nullptr) {
    SequenceState state = model.NewSequence();
    std::vector<EntryOutput> outputs;
    BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
    const Status status = model.Forward({&entry, 1}, outputs, {}, trace, forced);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return outputs.empty() ? std::vector<float>{} : outputs[0].logits;
  }

  WorkerPool pool_{2};
  std::unique_ptr<ReferenceModel> reference_;
  std::unique_ptr<FastModel> fast_;
  std::unique_ptr<testing::GoldenOutputs> golden_;
};

TEST_P(FastGolden, ForcedChoicesStayWithinTheInt8ErrorBudget) {
  const ModelConfig& c = reference_->config();
  Agreement forced_agreement, free_agreement;
  for (const auto& tokens : golden_->Tokens()) {
    RecordingTrace reference_trace;
    const std::vector<float> reference = Logits(*reference_, tokens, &reference_trace);
    const ForcedChoices forced = ForcedChoicesOf(reference_trace, c, static_cast<int64_t>(tokens.size()));
    RecordingTrace fast_trace;
    Accumulate(reference, Logits(*fast_, tokens, &fast_trace, &forced), c.vocab_size, forced_agreement);
    // Forcing took: the fast path attended exactly the reference's positions and used its experts.
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string prefix = "layer." + std::to_string(l) + ".";
      if (c.mlp_kinds[l] == MlpKind::kMoe) {
        EXPECT_EQ(fast_trace.ints[prefix + "moe_experts"], reference_trace.ints[prefix + "moe_experts"]);
      }
      if (c.attention_kinds[l] == AttentionKind::kDsa) {
        EXPECT_EQ(fast_trace.ints[prefix + "indexer_selected"], reference_trace.ints[prefix + "indexer_selected"]);
      }
    }
    Accumulate(reference, Logits(*fast_, tokens), c.vocab_size, free_agreement);
  }
  std::printf("%s forced choices: top-1 agreement %.2f%% over %lld rows, mean KL %.3g nats\n", GetParam().c_str(),
              100 * forced_agreement.top1(), static_cast<long long>(forced_agreement.rows), forced_agreement.mean_kl());
  std::printf("%s free choices:   top-1 agreement %.2f%%, mean KL %.3g nats (chaotic random model: reported only)\n",
              GetParam().c_str(), 100 * free_agreement.top1(), free_agreement.mean_kl());
  std::printf("%s issue targets (forced): top-1 >= 99%% %s, mean KL <= 1e-3 %s (%.0fx over)\n", GetParam().c_str(),
              forced_agreement.top1() >= 0.99 ? "met" : "MISSED", forced_agreement.mean_kl() <= 1e-3 ? "met" : "MISSED",
              forced_agreement.mean_kl() / 1e-3);
  EXPECT_GE(forced_agreement.top1(), 0.85);
  EXPECT_LE(forced_agreement.mean_kl(), 0.06);
}

// A container written by `glint convert` loads (mapped, no conversion) to the same weights: bit-identical logits.
TEST_P(FastGolden, ContainerLoadsToIdenticalResults) {
  const std::string dir = testing::TestDataPath("golden/" + GetParam());
  const std::string out = testing::MakeTempDir("fast_container");
  const ModelConfig& c = fast_->config();
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(dir));
  ASSERT_OK_AND_ASSIGN(auto plan, PlanFastWeights(checkpoint, c, {}));
  ASSERT_OK(WriteFastContainer(plan, pool_, JoinPath(out, kContainerFileName), {{"source", dir}}));
  ASSERT_OK_AND_ASSIGN(std::string config_text, ReadFile(JoinPath(dir, "config.json")));
  ASSERT_OK(WriteFileAtomic(JoinPath(out, "config.json"), config_text));
  ASSERT_OK_AND_ASSIGN(auto mapped, FastModel::Load(out, pool_));
  EXPECT_TRUE(mapped->load_report().from_container);
  EXPECT_FALSE(fast_->load_report().from_container);
  EXPECT_EQ(mapped->load_report().weight_bytes, fast_->load_report().weight_bytes);
  const auto tokens = golden_->Tokens()[0];
  EXPECT_EQ(Logits(*mapped, tokens), Logits(*fast_, tokens));
}

// Rows of one sequence do not depend on the other rows of the batch: per-token activation quantization and
// per-row kernels make batched decode bit-identical to running alone.
TEST_P(FastGolden, BatchEqualsAlone) {
  const auto sequences = golden_->Tokens();
  std::vector<SequenceState> states;
  for (size_t j = 0; j < sequences.size(); ++j) states.push_back(fast_->NewSequence());
  std::vector<BatchEntry> batch;
  for (size_t j = 0; j < sequences.size(); ++j) batch.push_back({sequences[j], &states[j], LogitsWanted::kAll, false});
  std::vector<EntryOutput> outputs;
  ASSERT_OK(fast_->Forward(batch, outputs));
  for (size_t j = 0; j < sequences.size(); ++j) EXPECT_EQ(outputs[j].logits, Logits(*fast_, sequences[j])) << j;
}

// The same for a decode step: 8 sequences (prefixes of the fixture's) prefilled alone up to their last token, then
// that token for all of them in one batch of one-row segments — the delta rule's heads grouped per task (16–24
// one-row heads on 2 workers: 2–3 a task), the short conv a task per stream — against each alone (one head a task:
// fewer than 4 per worker), bit for bit.
TEST_P(FastGolden, BatchedDecodeEqualsAlone) {
  std::vector<std::vector<int32_t>> sequences;
  const auto fixture = golden_->Tokens();
  for (size_t i = 0; i < 8; ++i) {
    const auto& tokens = fixture[i % fixture.size()];
    sequences.emplace_back(tokens.begin(), tokens.end() - static_cast<std::ptrdiff_t>(std::min(i, tokens.size() - 2)));
  }
  std::vector<SequenceState> batched, alone;
  for (const auto& tokens : sequences) {
    for (auto* states : {&batched, &alone}) {
      states->push_back(fast_->NewSequence());
      std::vector<EntryOutput> outputs;
      BatchEntry prefill{std::span<const int32_t>(tokens.data(), tokens.size() - 1), &states->back(),
                         LogitsWanted::kNone, false};
      ASSERT_OK(fast_->Forward({&prefill, 1}, outputs));
    }
  }
  std::vector<BatchEntry> step;
  for (size_t j = 0; j < sequences.size(); ++j) {
    step.push_back({std::span<const int32_t>(&sequences[j].back(), 1), &batched[j], LogitsWanted::kAll, false});
  }
  std::vector<EntryOutput> outputs;
  ASSERT_OK(fast_->Forward(step, outputs));
  ASSERT_EQ(outputs.size(), sequences.size());
  for (size_t j = 0; j < sequences.size(); ++j) {
    BatchEntry entry{std::span<const int32_t>(&sequences[j].back(), 1), &alone[j], LogitsWanted::kAll, false};
    std::vector<EntryOutput> alone_outputs;
    ASSERT_OK(fast_->Forward({&entry, 1}, alone_outputs));
    EXPECT_EQ(outputs[j].logits, alone_outputs[0].logits) << j;
  }
}

// Whole prefill = split prefill = token-by-token decode. The KDA chunk grid moves with the split and the decode
// step replaces the chunked form, which changes activations at fp32 rounding level (~1e-6); the discrete choices
// are forced from the whole run so that no router or indexer choice flips. What remains discrete is int8
// rounding: a 1e-6 change can move an activation across a rounding boundary (one code step, 1/127 of the group's
// magnitude), and the random fixtures amplify that 1.3–2× per sublayer. Measured: 1e-7 for most splits, 1.7% for
// token-by-token on tiny-sparse (the int8 error against the fp32 path is ≈ 10%); a state-handling bug gives O(1).
// Bound: relative RMS difference ≤ 5% of the logits and ≥ 95% equal top-1.
TEST_P(FastGolden, PrefillEqualsChunksEqualsDecode) {
  std::vector<int32_t> tokens;
  for (const auto& sequence : golden_->Tokens()) {
    if (sequence.size() <= 120 && sequence.size() > tokens.size()) tokens = sequence;
  }
  const int64_t length = static_cast<int64_t>(tokens.size());
  RecordingTrace trace;
  Logits(*fast_, tokens, &trace);
  const ForcedChoices forced = ForcedChoicesOf(trace, fast_->config(), length);
  const std::vector<float> whole = Logits(*fast_, tokens, nullptr, &forced);
  // Token by token over the first 24 tokens (the decode step), then the rest at once.
  std::vector<std::vector<int64_t>> splits = {{1, length - 1}, {length / 3, length - length / 3}, {}};
  for (int64_t i = 0; i < 24; ++i) splits.back().push_back(1);
  splits.back().push_back(length - 24);
  for (const auto& split : splits) {
    SequenceState state = fast_->NewSequence();
    std::vector<float> logits;
    int64_t offset = 0;
    for (int64_t part : split) {
      // The forced choices of this part's tokens.
      ForcedChoices part_forced;
      for (const auto& layer : forced.router) {
        part_forced.router.emplace_back(layer.empty() ? layer.begin() : layer.begin() + offset,
                                        layer.empty() ? layer.begin() : layer.begin() + offset + part);
      }
      for (const auto& layer : forced.attended) {
        part_forced.attended.emplace_back(layer.empty() ? layer.begin() : layer.begin() + offset,
                                          layer.empty() ? layer.begin() : layer.begin() + offset + part);
      }
      std::vector<EntryOutput> outputs;
      BatchEntry entry{std::span<const int32_t>(tokens.data() + offset, part), &state, LogitsWanted::kAll, false};
      ASSERT_OK(fast_->Forward({&entry, 1}, outputs, {}, nullptr, &part_forced));
      logits.insert(logits.end(), outputs[0].logits.begin(), outputs[0].logits.end());
      offset += part;
    }
    const double relative = testing::RelativeRmsError(logits, whole);
    Agreement agreement;
    Accumulate(whole, logits, fast_->config().vocab_size, agreement);
    std::printf("%s split into %zu parts: relative RMS difference %.2g, top-1 agreement %.1f%%\n", GetParam().c_str(),
                split.size(), relative, 100 * agreement.top1());
    EXPECT_LT(relative, 0.05) << "split into " << split.size() << " parts";
    EXPECT_GE(agreement.top1(), 0.95) << "split into " << split.size() << " parts";
    EXPECT_EQ(state.tokens, length);
  }
}

// The MTP layer runs on the fast path too: same shape as the reference and close to it (forced choices are not
// available for MTP, so only a loose agreement on the distributions is expected on these chaotic fixtures).
TEST_P(FastGolden, MtpRuns) {
  const ModelConfig& c = fast_->config();
  const auto tokens = golden_->Tokens()[0];
  SequenceState state = fast_->NewSequence();
  std::vector<EntryOutput> outputs;
  BatchEntry entry{tokens, &state, LogitsWanted::kNone, true};
  ASSERT_OK(fast_->Forward({&entry, 1}, outputs));
  const int64_t pairs = static_cast<int64_t>(tokens.size()) - 1;
  std::vector<float> logits;
  ASSERT_OK(fast_->MtpForward(state, std::span<const float>(outputs[0].hidden.data(), pairs * c.hidden_size),
                              std::span<const int32_t>(tokens.data() + 1, pairs), logits));
  EXPECT_EQ(static_cast<int64_t>(logits.size()), pairs * c.vocab_size);
  EXPECT_EQ(state.mtp_tokens, pairs);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST_P(FastGolden, BadInputIsRefused) {
  const ModelConfig& c = fast_->config();
  SequenceState state = fast_->NewSequence();
  std::vector<EntryOutput> outputs;
  const std::vector<int32_t> out_of_range = {1, static_cast<int32_t>(c.vocab_size)};
  BatchEntry entry{out_of_range, &state, LogitsWanted::kLast, false};
  EXPECT_ERROR_CONTAINS(fast_->Forward({&entry, 1}, outputs), "is out of range");
  EXPECT_EQ(state.tokens, 0);
  SequenceState foreign = reference_->NewSequence();
  const std::vector<int32_t> one = {1};
  BatchEntry foreign_entry{one, &foreign, LogitsWanted::kLast, false};
  EXPECT_ERROR_CONTAINS(fast_->Forward({&foreign_entry, 1}, outputs), "not created by this model");
}

// Options the fast path does not implement are refused by name, before any state changes, on the trunk and on the
// MTP layer; the same state then runs with the default options.
TEST_P(FastGolden, OptionsItDoesNotImplementAreRefused) {
  SequenceState state = fast_->NewSequence();
  const std::vector<int32_t> one = {1};
  BatchEntry entry{one, &state, LogitsWanted::kLast, /*want_hidden=*/true};
  std::vector<EntryOutput> outputs;
  ForwardOptions recurrent, naive, dense, forced;
  recurrent.kda_algorithm = KdaAlgorithm::kRecurrent;
  naive.dsa.form = MlaForm::kNaive;
  dense.dsa.selection = KeySelection::kDense;
  forced.dsa.selection = KeySelection::kForced;
  const std::pair<const ForwardOptions*, const char*> refused[] = {
      {&recurrent, "ForwardOptions::kda_algorithm recurrent"},
      {&naive, "ForwardOptions::dsa.form naive"},
      {&dense, "ForwardOptions::dsa.selection dense"},
      {&forced, "ForwardOptions::dsa.selection forced"}};
  for (const auto& [options, message] : refused) {
    EXPECT_ERROR_CONTAINS(fast_->Forward({&entry, 1}, outputs, *options), message);
    EXPECT_EQ(state.tokens, 0);
    EXPECT_FALSE(state.broken);
  }
  ASSERT_OK(fast_->Forward({&entry, 1}, outputs));
  EXPECT_EQ(state.tokens, 1);
  if (!fast_->has_mtp()) return;
  std::vector<float> logits;
  for (const auto& [options, message] : refused) {
    EXPECT_ERROR_CONTAINS(fast_->MtpForward(state, outputs[0].hidden, one, logits, *options), message);
    EXPECT_EQ(state.mtp_tokens, 0);
  }
  ASSERT_OK(fast_->MtpForward(state, outputs[0].hidden, one, logits));
  EXPECT_EQ(state.mtp_tokens, 1);
}

// Engine memory: a state bound to caller-managed blocks (several per sequence, out of order) gives the same logits as
// one that owns its memory; with bf16 KDA state storage the fast path widens S for the call and rounds it back
// (2^-9 relative per value), which stays well inside the int8 budget.
TEST_P(FastGolden, BoundMemoryAndBf16State) {
  const std::vector<int32_t> tokens = golden_->Tokens()[0];
  const int64_t length = static_cast<int64_t>(tokens.size());
  const std::vector<float> own = Logits(*fast_, tokens);
  for (KdaStateStorage storage : {KdaStateStorage::kFloat32, KdaStateStorage::kBfloat16}) {
    CacheOptions options;
    options.block_tokens = 8;
    options.kda_state = storage;
    auto layout = std::make_shared<const CacheLayout>(fast_->CacheLayoutFor(options).value());
    const int64_t blocks_needed = (length + 7) / 8;
    ItemArena blocks = ItemArena::Fixed(blocks_needed + 2, layout->block_bytes).value();
    ItemArena slot = ItemArena::Fixed(1, layout->slot_bytes).value();
    std::vector<int32_t> table;
    for (int64_t b = blocks_needed - 1; b >= 0; --b) table.push_back(static_cast<int32_t>(b + 2));
    SequenceState state = fast_->BindSequence(layout, {&blocks, &table, slot.Item(0)}, 0);
    std::vector<EntryOutput> outputs;
    BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
    ASSERT_OK(fast_->Forward({&entry, 1}, outputs));
    if (storage == KdaStateStorage::kFloat32) {
      EXPECT_EQ(outputs[0].logits, own);
    } else {
      EXPECT_LT(testing::RelativeRmsError(outputs[0].logits, own), 0.05);
    }
  }
}

// Prefix-cache checkpoints inside one call: the pass splits at each, as separate calls would (bit-exact).
TEST_P(FastGolden, CheckpointsInsideACallEqualTheStateAtThatPosition) {
  testing::ExpectCheckpointsInsideACallEqualTheStateAtThatPosition(*fast_);
}

// Int4 routed experts (--experts int4): a container records the format, so it loads as int4 with no option, to
// the same logits as an in-memory int4 conversion; asking for the other format is an error that says how to get it.
TEST_P(FastGolden, Int4ExpertContainerLoadsWithoutAFlag) {
  const std::string dir = testing::TestDataPath("golden/" + GetParam());
  const ModelConfig& c = fast_->config();
  const int64_t moe_layers = std::count(c.mlp_kinds.begin(), c.mlp_kinds.end(), MlpKind::kMoe);
  ASSERT_GT(moe_layers, 0);
  FastModelOptions int4;
  int4.experts = ExpertWeights::kInt4;
  ASSERT_OK_AND_ASSIGN(auto converted, FastModel::Load(dir, pool_, int4));
  EXPECT_EQ(converted->weights().experts, ExpertWeights::kInt4);
  EXPECT_EQ(fast_->weights().experts, ExpertWeights::kInt8);
  for (size_t l = 0; l < converted->weights().layers.size(); ++l) {
    const FastLayerWeights& layer = converted->weights().layers[l];
    if (layer.mlp_kind != MlpKind::kMoe) continue;
    EXPECT_EQ(layer.moe.experts[0].gate_up.format, PackedLinear::Format::kInt4);
    EXPECT_EQ(layer.moe.experts[0].down.format, PackedLinear::Format::kInt4);
    EXPECT_EQ(layer.moe.experts[0].gate_up.int4.layout.group, kDefaultInt4Group);
    for (const FastMlpWeights& shared : layer.moe.shared) EXPECT_EQ(shared.gate_up.format, PackedLinear::Format::kInt8);
  }
  EXPECT_LT(converted->load_report().weight_bytes, fast_->load_report().weight_bytes);

  const std::string out = testing::MakeTempDir("fast_int4_container");
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(dir));
  FastConvertOptions options;
  options.experts = ExpertWeights::kInt4;
  ASSERT_OK_AND_ASSIGN(auto plan, PlanFastWeights(checkpoint, c, options));
  ASSERT_OK(WriteFastContainer(plan, pool_, JoinPath(out, kContainerFileName), {{"experts", "int4"}}));
  ASSERT_OK_AND_ASSIGN(std::string config_text, ReadFile(JoinPath(dir, "config.json")));
  ASSERT_OK(WriteFileAtomic(JoinPath(out, "config.json"), config_text));
  ASSERT_OK_AND_ASSIGN(auto mapped, FastModel::Load(out, pool_));
  EXPECT_TRUE(mapped->load_report().from_container);
  EXPECT_EQ(mapped->weights().experts, ExpertWeights::kInt4);
  const auto tokens = golden_->Tokens()[0];
  const std::vector<float> int4_logits = Logits(*mapped, tokens);
  EXPECT_EQ(int4_logits, Logits(*converted, tokens));
  EXPECT_NE(int4_logits, Logits(*fast_, tokens));                       // the experts really are different weights
  ASSERT_OK_AND_ASSIGN(auto again, FastModel::Load(out, pool_, int4));  // asking for what it holds is fine
  FastModelOptions int8;
  int8.experts = ExpertWeights::kInt8;
  EXPECT_ERROR_CONTAINS(FastModel::Load(out, pool_, int8), "holds int4 routed experts, not the requested int8");
  options.int4_group = 24;
  EXPECT_ERROR_CONTAINS(PlanFastWeights(checkpoint, c, options), "--int4-group");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FastGolden, ::testing::Values("tiny-dense", "tiny-sparse"));

// A pass buffer grows to the largest size asked for, keeps what it held when it grows (a step may ask again for a
// buffer it filled), and sits on 2 MiB boundaries once it reaches 2 MiB (AlignedBuffer: huge-page advice).
TEST(PassBuffer, GrowsByDoublingKeepingItsValues) {
  PassBuffer buffer;
  float* small = buffer.Floats(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % AlignedBuffer::kCacheLine, 0u);
  for (int i = 0; i < 100; ++i) small[i] = static_cast<float>(i) + 0.5f;
  EXPECT_EQ(buffer.Floats(50), small);  // smaller: the same storage
  const int64_t large = 1 << 20;        // 4 MiB of floats
  float* grown = buffer.Floats(large);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(grown) % AlignedBuffer::kHugePage, 0u);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(grown[i], static_cast<float>(i) + 0.5f) << i;
  for (int64_t i = 100; i < large; i += 4099) ASSERT_EQ(grown[i], 0.0f) << i;  // new storage comes zeroed
  EXPECT_EQ(buffer.Floats(100), grown);
  EXPECT_EQ(buffer.data(), grown);
  // Growth at least doubles, so a buffer asked for slowly rising sizes (an MoE wave's rows) re-allocates rarely.
  float* doubled = buffer.Floats(large + 1);
  EXPECT_NE(doubled, grown);
  EXPECT_EQ(buffer.Floats(2 * large), doubled);
}

// Issue 37 item 3: the middle third of a container overwritten with random bytes, its size kept (what `dd
// conv=notrunc` does; the mtime can be put back too, so nothing but the bytes tells). Loading it served 200s with
// empty text before the checksums; now the load pass refuses it naming the tensor, and the untouched file loads.
TEST(FastContainer, AContainerRewrittenInPlaceFailsItsChecksumsAtLoad) {
  WorkerPool pool(2);
  const std::string dense = testing::TestDataPath("golden/tiny-dense");
  const std::string out = testing::MakeTempDir("fast_container_rewritten");
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(dense));
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(dense));
  ASSERT_OK_AND_ASSIGN(auto plan, PlanFastWeights(checkpoint, config, {}));
  const std::string path = JoinPath(out, kContainerFileName);
  ASSERT_OK(WriteFastContainer(plan, pool, path, {}));
  ASSERT_OK_AND_ASSIGN(std::string config_text, ReadFile(JoinPath(dense, "config.json")));
  ASSERT_OK(WriteFileAtomic(JoinPath(out, "config.json"), config_text));
  ASSERT_OK_AND_ASSIGN(auto intact, FastModel::Load(out, pool));
  EXPECT_GT(intact->load_report().verified_bytes, 0u);
  intact.reset();
  ASSERT_OK_AND_ASSIGN(std::string bytes, ReadFile(path));
  std::mt19937_64 random(37);
  for (size_t i = bytes.size() / 3; i < 2 * bytes.size() / 3; ++i) bytes[i] = static_cast<char>(random());
  ASSERT_OK(WriteFileAtomic(path, bytes));
  ASSERT_OK_AND_ASSIGN(ContainerFile container, ContainerFile::Open(path));  // the header is intact
  EXPECT_ERROR_CONTAINS(FastModel::Load(out, pool), "does not match its checksum");
  EXPECT_ERROR_CONTAINS(FastModel::Load(out, pool), "re-run `glint convert`");
  FastModelOptions unchecked;
  unchecked.verify_checksums = false;  // the check, not something else, is what refuses it
  EXPECT_OK(FastModel::Load(out, pool, unchecked).status());
}

// Broken containers are refused with a message, never read out of bounds.
TEST(FastContainer, TruncatedOrForeignContainersAreRefused) {
  WorkerPool pool(1);
  const std::string dense = testing::TestDataPath("golden/tiny-dense");
  const std::string out = testing::MakeTempDir("fast_container_bad");
  ASSERT_OK_AND_ASSIGN(ModelConfig config, LoadModelConfig(dense));
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(dense));
  ASSERT_OK_AND_ASSIGN(auto plan, PlanFastWeights(checkpoint, config, {}));
  const std::string path = JoinPath(out, kContainerFileName);
  ASSERT_OK(WriteFastContainer(plan, pool, path, {}));
  ASSERT_OK_AND_ASSIGN(std::string bytes, ReadFile(path));
  // Truncated: the last blobs lie past the end.
  ASSERT_OK(WriteFileAtomic(path, std::string_view(bytes).substr(0, bytes.size() / 2)));
  EXPECT_ERROR_CONTAINS(ContainerFile::Open(path), "outside the data section");
  // Version 1 (before per-expert extents) and 2 (before checksums) containers: refused with the way out.
  for (const char older : {'1', '2'}) {
    std::string old = bytes;
    const size_t version = old.find("\"container_version\":3");
    ASSERT_NE(version, std::string::npos);
    old[version + std::string("\"container_version\":").size()] = older;
    ASSERT_OK(WriteFileAtomic(path, old));
    EXPECT_ERROR_CONTAINS(ContainerFile::Open(path), "re-run `glint convert`");
  }
  // A version of another JSON type (an array, as a fuzzer wrote): refused with a message, not thrown.
  const std::string header = R"({"container_version":[2],"tensors":[]})";
  std::string wrong_type = "GLINTWC1";
  for (int i = 0; i < 8; ++i) wrong_type.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  ASSERT_OK(WriteFileAtomic(path, wrong_type + header));
  EXPECT_ERROR_CONTAINS(ContainerFile::Open(path), "container_version is not an integer");
  // Not a container at all.
  ASSERT_OK(WriteFileAtomic(path, "hello"));
  EXPECT_ERROR_CONTAINS(ContainerFile::Open(path), "GLINTWC1 magic");
  // A container of another model: the tiny-sparse config against tiny-dense weights.
  ASSERT_OK(WriteFileAtomic(path, bytes));
  ASSERT_OK_AND_ASSIGN(std::string sparse_config, ReadFile(testing::TestDataPath("golden/tiny-sparse/config.json")));
  ASSERT_OK(WriteFileAtomic(JoinPath(out, "config.json"), sparse_config));
  EXPECT_ERROR_CONTAINS(FastModel::Load(out, pool), "converted tensor 'embed'");
}

}  // namespace
}  // namespace glint
namespace glint {
namespace {

// Quality gate (a): each fast sublayer on the golden input of that sublayer (so no upstream error) against the
// golden output. Bound: the W8A8 error of a chain of 2–3 quantized products (docs/fast-path.md).
TEST(FastSublayers, GoldenInputToGoldenOutput) {
  for (std::string fixture : {"tiny-dense", "tiny-sparse"}) {
    WorkerPool pool(2);
    const std::string dir = testing::TestDataPath("golden/" + fixture);
    auto fast = FastModel::Load(dir, pool).value();
    const ModelConfig& c = fast->config();
    testing::GoldenOutputs golden(fixture);
    const int64_t tokens = static_cast<int64_t>(golden.Tokens()[0].size()), d = c.hidden_size;
    FastContext ctx(pool, BestIsa(), c);
    SequenceState state = fast->NewSequence();
    state.owned->Reserve(tokens);  // blocks for the DSA layers' latents and pooled keys
    const Segment segment{0, 0, tokens, 0, 0};
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string prefix = "layer." + std::to_string(l) + ".";
      const FastLayerWeights& w = fast->weights().layers[l];
      std::vector<float> in = golden.Floats(prefix + "attn_in"), out(tokens * d);
      if (w.attention_kind == AttentionKind::kKda) {
        const KdaSegmentState segment_state{KdaLayerState(state, l)};
        ASSERT_OK(FastKda(ctx, w.kda, in.data(), {&segment, 1}, {&segment_state, 1}, out.data()));
      } else {
        std::vector<std::vector<int64_t>> attended(tokens);
        const auto selected = golden.Ints(prefix + "indexer_selected");
        const int64_t width = c.DenseRegimeTokens();
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t i = 0; i < width && selected[t * width + i] >= 0; ++i)
            attended[t].push_back(selected[t * width + i]);
        }
        DsaCache cache = DsaLayerCache(state, l);
        std::vector<const std::vector<int64_t>*> forced(tokens);  // [rows]
        for (int64_t t = 0; t < tokens; ++t) forced[t] = &attended[t];
        ASSERT_OK(FastDsa(ctx, w.dsa, in.data(), {&segment, 1}, {&cache, 1}, forced, out.data(), nullptr));
      }
      const double attention_error = testing::RelativeRmsError(out, golden.Floats(prefix + "attn_out"));
      in = golden.Floats(prefix + "ffn_in");
      if (w.mlp_kind == MlpKind::kDense) {
        FastMlp(ctx, w.mlp, in.data(), tokens, out.data());
      } else {
        const auto experts = golden.Ints(prefix + "moe_experts");
        std::vector<RouterChoice> choices(tokens);
        for (int64_t t = 0; t < tokens; ++t) {
          choices[t].experts.assign(experts.begin() + t * c.num_experts_per_tok,
                                    experts.begin() + (t + 1) * c.num_experts_per_tok);
        }
        std::vector<const RouterChoice*> forced(tokens);  // [rows]
        for (int64_t t = 0; t < tokens; ++t) forced[t] = &choices[t];
        ASSERT_OK(FastMoe(ctx, w.moe, in.data(), tokens, forced, out.data(), nullptr, nullptr));
      }
      const double ffn_error = testing::RelativeRmsError(out, golden.Floats(prefix + "ffn_out"));
      std::printf("%s layer %lld: %s relative RMS error %.4f, %s %.4f\n", fixture.c_str(), static_cast<long long>(l),
                  w.attention_kind == AttentionKind::kKda ? "KDA" : "DSA", attention_error,
                  w.mlp_kind == MlpKind::kDense ? "MLP" : "MoE", ffn_error);
      EXPECT_LT(attention_error, 0.04) << prefix;
      EXPECT_LT(ffn_error, 0.04) << prefix;
    }
  }
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

// Quality gate (c): without forcing, on the trained default model (docs/quality.md), against the fp32 path on its
// held-out cross-check sequences. Targets: top-1 agreement ≥ 98%, mean KL ≤ 5e-3 nats. Measured here: 99.0% and
// 7.8e-5 (208 positions); on 14,842 held-out positions of the training corpus 98.9% and 1.0e-4 (docs/fast-path.md).
TEST(FastTrainedModel, AgreesWithTheFp32PathWithoutForcing) {
  const std::string dir = testing::TestDataPath("../../models/glint-tiny");
  WorkerPool pool(2);
  auto reference = ReferenceModel::Load(dir);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  auto fast = FastModel::Load(dir, pool);
  ASSERT_TRUE(fast.ok()) << fast.status().ToString();
  ASSERT_OK_AND_ASSIGN(const std::vector<std::vector<int32_t>> sequences,
                       ReadTokenSequences(testing::TestDataPath("glint-tiny/crosscheck_tokens.json"),
                                          (*reference)->config().vocab_size));
  ASSERT_FALSE(sequences.empty());
  Agreement agreement;
  for (const auto& tokens : sequences) {
    std::vector<std::vector<float>> logits;
    for (const Model* model : {static_cast<const Model*>(reference->get()), static_cast<const Model*>(fast->get())}) {
      SequenceState state = model->NewSequence();
      std::vector<EntryOutput> outputs;
      BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
      ASSERT_OK(model->Forward({&entry, 1}, outputs));
      logits.push_back(outputs[0].logits);
    }
    Accumulate(logits[0], logits[1], (*reference)->config().vocab_size, agreement);
  }
  std::printf("glint-tiny, no forcing: top-1 agreement %.2f%% over %lld positions, mean KL %.3g nats\n",
              100 * agreement.top1(), static_cast<long long>(agreement.rows), agreement.mean_kl());
  EXPECT_GE(agreement.top1(), 0.98);
  EXPECT_LE(agreement.mean_kl(), 5e-3);
}

// FastKda's split of its work: every head of every segment exactly once, in order; one head a task for segments of
// several rows; for one-row segments up to 8 consecutive heads a task while that leaves 4 tasks per worker. The
// conv: 256-channel blocks for a prefill, whole streams for one row.
TEST(FastKdaTasks, CoverEveryHeadOnceAndGroupDecodeHeads) {
  const auto covered = [](const std::vector<KdaHeadRange>& tasks, size_t segments, int64_t heads) {
    std::vector<std::vector<int>> seen(segments, std::vector<int>(heads, 0));
    size_t last_segment = 0;
    for (const KdaHeadRange& t : tasks) {
      EXPECT_GE(t.segment, last_segment);
      last_segment = t.segment;
      EXPECT_LT(t.begin, t.end);
      for (int64_t h = t.begin; h < t.end; ++h) seen[t.segment][h]++;
    }
    for (const auto& segment : seen) {
      for (int count : segment) {
        if (count != 1) return false;
      }
    }
    return true;
  };
  const auto group_of = [](const std::vector<KdaHeadRange>& tasks, size_t segment) {
    for (const KdaHeadRange& t : tasks) {
      if (t.segment == segment) return t.end - t.begin;
    }
    return int64_t{0};
  };
  std::vector<Segment> decode(16), one(1), mixed(3);
  for (Segment& s : decode) s.count = 1;
  one[0].count = 1;
  mixed[0].count = 512, mixed[1].count = 1, mixed[2].count = 1;
  const auto sixteen = KdaDeltaRuleTasks(decode, 64, 2);
  EXPECT_TRUE(covered(sixteen, 16, 64));
  EXPECT_EQ(sixteen.size(), 16u * 8);                         // 8 heads a task
  EXPECT_EQ(group_of(KdaDeltaRuleTasks(one, 64, 2), 0), 8);   // 8 tasks: 4 a worker
  EXPECT_EQ(group_of(KdaDeltaRuleTasks(one, 64, 16), 0), 1);  // 64 heads over 16 workers: one a task
  EXPECT_EQ(group_of(KdaDeltaRuleTasks(one, 64, 4), 0), 4);
  const auto with_prefill = KdaDeltaRuleTasks(mixed, 6, 1);
  EXPECT_TRUE(covered(with_prefill, 3, 6));
  EXPECT_EQ(group_of(with_prefill, 0), 1);  // the prefill segment: a head a task
  EXPECT_EQ(group_of(with_prefill, 1), 3);  // 12 one-row heads over 1 worker: 3 a task
  EXPECT_TRUE(covered(KdaDeltaRuleTasks(decode, 5, 3), 16, 5));
  EXPECT_EQ(KdaConvBlockChannels(8192, 512), 256);
  EXPECT_EQ(KdaConvBlockChannels(8192, 1), 8192);
  EXPECT_EQ(KdaConvBlockChannels(8192, 4), 2048);
  EXPECT_EQ(KdaConvBlockChannels(64, 512), 16);  // a test model's stream still splits in four
  EXPECT_EQ(KdaConvBlockChannels(64, 1), 64);
}

// A load reads a container's pages again when under kHugePageShareGoal (90 %) of its resident bytes are on 2 MB
// pages; with none on them FastModel::Load first probes whether the kernel gives this file 2 MB pages at all.
TEST(FastLoad, ReadsAgainForHugePagesOnlyWhenTooFewAreOnThem) {
  const auto worth = [](uint64_t resident, uint64_t huge) {
    return WorthReadingAgainForHugePages(MappedFile::Residency{resident, huge});
  };
  EXPECT_FALSE(worth(0, 0));      // nothing resident (an expert cache, nothing touched)
  EXPECT_TRUE(worth(1000, 0));    // none: cached small, or no 2 MB pages for this file (the load probes 2 MB first)
  EXPECT_TRUE(worth(1000, 710));  // the bench container at 71 %
  EXPECT_TRUE(worth(1000, 899));
  EXPECT_FALSE(worth(1000, 900));  // at the goal
  EXPECT_FALSE(worth(1000, 950));  // the bench model read again: not again at the next start
  EXPECT_FALSE(worth(1000, 1000));
}

// Decode's attention tasks (docs/fast-path.md "MLA attention", "MLA attention in bf16"): never fewer than 16 heads
// (one AVX-512 vector of heads in the lanes, in both kernels); in fp32, and with bf16 attention that rounds the rows
// itself in every call, a worker's share; with bf16 over a bf16 cache read in place 16.
TEST(FastDecodeHeadsPerTask, SharesTheHeadsInFp32AndWhereEachCallRoundsItsRows) {
  ModelConfig config;
  config.num_attention_heads = 64;
  WorkerPool two(2), sixteen(16);
  FastContext on_two(two, Isa::kScalar, config), on_sixteen(sixteen, Isa::kScalar, config);
  EXPECT_EQ(DecodeHeadsPerTask(on_two, true), 32);  // fp32 attention
  EXPECT_EQ(DecodeHeadsPerTask(on_two, false), 32);
  EXPECT_EQ(DecodeHeadsPerTask(on_sixteen, true), 16);  // 4 heads a worker would leave lanes idle
  on_two.attention = on_sixteen.attention = mla::AttentionPrecision::kBf16;
  EXPECT_EQ(DecodeHeadsPerTask(on_two, true), 32);
  EXPECT_EQ(DecodeHeadsPerTask(on_two, false), 16);     // a bf16 cache read in place
  EXPECT_EQ(DecodeHeadsPerTask(on_sixteen, true), 16);  // 4 heads a worker would leave lanes idle
}

// The cost of bf16 MLA attention (--mla-attention bf16, mla::AttendBf16) on the trained model: gate (c) as above
// with the bf16 kernel — the fast path against the fp32 reference without forcing, the same targets (top-1 ≥ 98%,
// mean KL ≤ 5e-3) — and the fast path with bf16 against fp32 attention, which isolates the kernel's rounding
// (q̃, latents and probabilities to bf16, relative 2^-8 each): it must cost well under W8A8 (bounds 98% and 3e-4, as
// for bf16 KDA state). Measured: docs/quality.md "bf16 MLA attention".
TEST(FastTrainedModel, Bf16MlaAttentionCostsLessThanW8A8) {
  if (!mla::AttendBf16Supported()) GTEST_SKIP() << "this CPU has no AVX512-BF16 (vdpbf16ps)";
  const std::string dir = testing::TestDataPath("../../models/glint-tiny");
  WorkerPool pool(2);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReferenceModel> reference, ReferenceModel::Load(dir));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> fp32, FastModel::Load(dir, pool));
  FastModelOptions bf16_options;
  bf16_options.mla_attention = mla::AttentionPrecision::kBf16;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> bf16, FastModel::Load(dir, pool, bf16_options));
  // bf16 on AMX tiles where the kernels are AMX and the tile unit does bf16: then this gate checks that kernel.
  ASSERT_EQ(bf16->mla_attention(), mla::AttentionOnTiles(mla::AttentionPrecision::kBf16, bf16->isa()));
  ASSERT_OK_AND_ASSIGN(
      const std::vector<std::vector<int32_t>> sequences,
      ReadTokenSequences(testing::TestDataPath("glint-tiny/crosscheck_tokens.json"), reference->config().vocab_size));
  Agreement against_reference, against_fp32;
  for (const auto& tokens : sequences) {
    std::vector<std::vector<float>> logits;  // reference, fast fp32, fast bf16
    for (const Model* model : {static_cast<const Model*>(reference.get()), static_cast<const Model*>(fp32.get()),
                               static_cast<const Model*>(bf16.get())}) {
      SequenceState state = model->NewSequence();
      std::vector<EntryOutput> outputs;
      BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
      ASSERT_OK(model->Forward({&entry, 1}, outputs));
      logits.push_back(outputs[0].logits);
    }
    Accumulate(logits[0], logits[2], reference->config().vocab_size, against_reference);
    Accumulate(logits[1], logits[2], reference->config().vocab_size, against_fp32);
  }
  std::printf(
      "glint-tiny, bf16 MLA attention vs the fp32 reference: top-1 agreement %.2f%% over %lld positions, "
      "mean KL %.3g nats; vs fp32 attention: %.2f%%, %.3g nats\n",
      100 * against_reference.top1(), static_cast<long long>(against_reference.rows), against_reference.mean_kl(),
      100 * against_fp32.top1(), against_fp32.mean_kl());
  EXPECT_GE(against_reference.top1(), 0.98);
  EXPECT_LE(against_reference.mean_kl(), 5e-3);
  EXPECT_GE(against_fp32.top1(), 0.98);
  EXPECT_LE(against_fp32.mean_kl(), 3e-4);
}

// The cost of bf16 KDA state storage (--kda-state bf16) on the trained model: the cross-check sequences decoded one
// token at a time (S is rounded to bf16 after every token: the worst case) with fp32 and with bf16 state, both on the
// fast path, next-token distributions compared at every position. Measured: top-1 99.5 % (207/208), mean KL 3.0e-5
// nats (docs/quality.md). Bounds: the W8A8 thresholds of docs/quality.md, since bf16 storage (8 mantissa bits,
// relative rounding 2^-9 per step) should cost less than int8 activations.
TEST(FastTrainedModel, Bf16KdaStateCostsLessThanW8A8) {
  const std::string dir = testing::TestDataPath("../../models/glint-tiny");
  WorkerPool pool(2);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> fast, FastModel::Load(dir, pool));
  ASSERT_OK_AND_ASSIGN(
      const std::vector<std::vector<int32_t>> sequences,
      ReadTokenSequences(testing::TestDataPath("glint-tiny/crosscheck_tokens.json"), fast->config().vocab_size));
  Agreement agreement;
  for (const auto& tokens : sequences) {
    std::vector<std::vector<float>> logits(2);  // [storage][T × V]
    for (KdaStateStorage storage : {KdaStateStorage::kFloat32, KdaStateStorage::kBfloat16}) {
      CacheOptions options;
      options.block_tokens = 16;
      options.kda_state = storage;
      auto layout = std::make_shared<const CacheLayout>(fast->CacheLayoutFor(options).value());
      const int64_t blocks_needed = (static_cast<int64_t>(tokens.size()) + 15) / 16;
      ItemArena blocks = ItemArena::Fixed(blocks_needed, layout->block_bytes).value();
      ItemArena slot = ItemArena::Fixed(1, layout->slot_bytes).value();
      std::vector<int32_t> table(blocks_needed);
      for (int64_t b = 0; b < blocks_needed; ++b) table[b] = static_cast<int32_t>(b);
      SequenceState state = fast->BindSequence(layout, {&blocks, &table, slot.Item(0)}, 0);
      std::vector<EntryOutput> outputs;
      for (const int32_t& token : tokens) {
        BatchEntry entry{std::span<const int32_t>(&token, 1), &state, LogitsWanted::kLast, false};
        ASSERT_OK(fast->Forward({&entry, 1}, outputs));
        auto& into = logits[storage == KdaStateStorage::kBfloat16];
        into.insert(into.end(), outputs[0].logits.begin(), outputs[0].logits.end());
      }
    }
    Accumulate(logits[0], logits[1], fast->config().vocab_size, agreement);
  }
  std::printf(
      "glint-tiny, bf16 vs fp32 KDA state (decode): top-1 agreement %.2f%% over %lld positions, mean KL %.3g "
      "nats\n",
      100 * agreement.top1(), static_cast<long long>(agreement.rows), agreement.mean_kl());
  EXPECT_GE(agreement.top1(), 0.98);
  EXPECT_LE(agreement.mean_kl(), 3e-4);
}

// Quality of int4 routed experts (W4A8, --experts int4) on the trained model, without forcing, against the fp32
// path on the cross-check sequences (docs/quality.md). An int4 step is 127/7 ≈ 18× an int8 step, so an expert's
// product carries ≈ 11% relative weight error instead of 0.6% (gemm_i4_test). Measured: top-1 98.56%, mean KL
// 1.6e-4 nats (W8A8: 99.04%, 7.7e-5); on 14,842 held-out positions 98.57% and 1.6e-4. The routed experts'
// share of the residual stream is small enough in this model that the KL only doubles. Bounds, with the same
// margin as the W8A8 gate (≈ 2.5× the measured KL, ≈ 2× the measured disagreement): top-1 ≥ 97%, KL ≤ 4e-4.
constexpr double kInt4Top1Bound = 0.97, kInt4KlBound = 4e-4;

TEST(FastTrainedModel, Int4ExpertsStayWithinTheirBudget) {
  const std::string dir = testing::TestDataPath("../../models/glint-tiny");
  WorkerPool pool(2);
  auto reference = ReferenceModel::Load(dir);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  FastModelOptions options;
  options.experts = ExpertWeights::kInt4;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FastModel> fast, FastModel::Load(dir, pool, options));
  ASSERT_EQ(fast->weights().experts, ExpertWeights::kInt4);
  ASSERT_OK_AND_ASSIGN(const std::vector<std::vector<int32_t>> sequences,
                       ReadTokenSequences(testing::TestDataPath("glint-tiny/crosscheck_tokens.json"),
                                          (*reference)->config().vocab_size));
  Agreement agreement;
  for (const auto& tokens : sequences) {
    std::vector<std::vector<float>> logits;
    for (const Model* model : {static_cast<const Model*>(reference->get()), static_cast<const Model*>(fast.get())}) {
      SequenceState state = model->NewSequence();
      std::vector<EntryOutput> outputs;
      BatchEntry entry{tokens, &state, LogitsWanted::kAll, false};
      ASSERT_OK(model->Forward({&entry, 1}, outputs));
      logits.push_back(outputs[0].logits);
    }
    Accumulate(logits[0], logits[1], (*reference)->config().vocab_size, agreement);
  }
  std::printf("glint-tiny, int4 experts, no forcing: top-1 agreement %.2f%% over %lld positions, mean KL %.3g nats\n",
              100 * agreement.top1(), static_cast<long long>(agreement.rows), agreement.mean_kl());
  EXPECT_GE(agreement.top1(), kInt4Top1Bound);
  EXPECT_LE(agreement.mean_kl(), kInt4KlBound);
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

// lm_head split by vocabulary (docs/distributed.md "lm_head"): a rank's rows [v0, v1) are a byte range of the
// packed int8 matrix (whole 16-row blocks), and the int8 product over that view gives exactly those columns of the
// whole product — each output row's integer dot and its scales are the same, so bit for bit.
TEST(FastLmHeadRows, ARowSliceGivesExactlyThoseLogitColumns) {
  const std::string dir = testing::TestDataPath("golden/tiny-dense");
  WorkerPool pool(1);
  ASSERT_OK_AND_ASSIGN(ModelConfig c, LoadModelConfig(dir));
  ASSERT_OK_AND_ASSIGN(Checkpoint checkpoint, Checkpoint::Open(dir));
  ASSERT_OK_AND_ASSIGN(auto plan, PlanFastWeights(checkpoint, c, {}));
  FastWeightSource whole;
  ASSERT_OK(MaterializeFastWeights(plan, pool, whole, {}));
  ASSERT_OK_AND_ASSIGN(FastWeights all, BindFastWeights(whole, c, false));
  const int64_t d = c.hidden_size, rows = 3;
  std::vector<float> x(rows * d);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * static_cast<double>(i));
  FastContext ctx(pool, BestIsa(), c);
  std::vector<float> expected(rows * c.vocab_size);
  ctx.Linear(all.lm_head, x.data(), d, rows, expected.data(), c.vocab_size);
  for (const IndexRange range : {IndexRange{16, 48}, IndexRange{c.vocab_size - 40, c.vocab_size}}) {
    FastWeightSource part;
    for (const auto& [name, tensor] : whole.tensors()) part.Add(name, tensor);  // views of `whole`'s buffers
    const IndexRange aligned{range.begin / kLmHeadRowBlock * kLmHeadRowBlock, range.end};
    ASSERT_OK(KeepLmHeadRows(part, aligned));
    ASSERT_OK_AND_ASSIGN(FastWeights sliced, BindFastWeights(part, c, false, {}, -1, aligned.count()));
    EXPECT_LT(part.TotalBytes(), whole.TotalBytes());
    std::vector<float> got(rows * aligned.count());
    ctx.Linear(sliced.lm_head, x.data(), d, rows, got.data(), aligned.count());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t v = aligned.begin; v < aligned.end; ++v) {
        ASSERT_EQ(got[r * aligned.count() + v - aligned.begin], expected[r * c.vocab_size + v]) << r << " " << v;
      }
    }
  }
  FastWeightSource none;
  for (const auto& [name, tensor] : whole.tensors()) none.Add(name, tensor);
  ASSERT_OK(KeepLmHeadRows(none, {0, 0}));
  EXPECT_EQ(none.Find("lm_head"), nullptr);
  ASSERT_OK_AND_ASSIGN(FastWeights headless, BindFastWeights(none, c, false, {}, -1, 0));
  EXPECT_EQ(headless.lm_head.format, PackedLinear::Format::kNone);
}

}  // namespace
}  // namespace glint
