// The whole text model against the golden fixtures (logits of every position, MTP logits, every named
// intermediate, indexer sets and expert choices), then the equivalences the engine relies on.
// Tolerances (golden README, "An fp32 implementation"): intermediates ≤ 1e-4 relative RMS, logits rows
// max |Δ| ≤ 1e-3 × std(logits), top-1 / expert sets / indexer sets identical — about 10× the measured fp32 deviation.
#include "model/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "model_checks.h"
#include "test_util.h"

namespace glint {
namespace {

constexpr double kIntermediateTolerance = 1e-4;
constexpr double kLogitTolerance = 1e-3;  // × std(logits)

class RecordingTrace : public Trace {
 public:
  explicit RecordingTrace(int wanted = 0) : wanted_(wanted) {}
  bool Wants(int sequence) const override { return sequence == wanted_; }
  void Floats(int, const std::string& name, std::span<const float> values, std::vector<int64_t>) override {
    auto& stored = floats[name];
    stored.insert(stored.end(), values.begin(), values.end());
  }
  void Ints(int, const std::string& name, std::span<const int32_t> values, std::vector<int64_t>) override {
    auto& stored = ints[name];
    stored.insert(stored.end(), values.begin(), values.end());
  }
  std::map<std::string, std::vector<float>> floats;
  std::map<std::string, std::vector<int32_t>> ints;

 private:
  int wanted_;
};

class GoldenModel : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto loaded = ReferenceModel::Load(testing::TestDataPath("golden/" + GetParam()));
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    model_ = std::move(loaded).value();
    golden_ = std::make_unique<testing::GoldenOutputs>(GetParam());
  }

  // Logits [T, V] of a whole sequence from an empty state, and the final normed hidden [T, D].
  EntryOutput Run(const std::vector<int32_t>& tokens, Trace* trace = nullptr, const ForwardOptions& options = {}) {
    SequenceState state = model_->NewSequence();
    std::vector<EntryOutput> outputs;
    BatchEntry entry{tokens, &state, LogitsWanted::kAll, true};
    Status status = model_->Forward({&entry, 1}, outputs, options, trace);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return outputs.empty() ? EntryOutput{} : outputs[0];
  }

  std::unique_ptr<ReferenceModel> model_;
  std::unique_ptr<testing::GoldenOutputs> golden_;
};

void ExpectLogitsMatch(const std::vector<float>& ours, const std::vector<float>& golden, int64_t vocab,
                       const std::string& what) {
  ASSERT_EQ(ours.size(), golden.size()) << what;
  const double bound = kLogitTolerance * testing::StdDev(golden);
  EXPECT_LT(testing::MaxAbsError(ours, golden), bound) << what;
  const int64_t rows = static_cast<int64_t>(golden.size()) / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    auto argmax = [&](const std::vector<float>& v) {
      return std::max_element(v.begin() + r * vocab, v.begin() + (r + 1) * vocab) - (v.begin() + r * vocab);
    };
    EXPECT_EQ(argmax(ours), argmax(golden)) << what << " row " << r;
  }
}

TEST_P(GoldenModel, LogitsIntermediatesAndSelectionsMatch) {
  const ModelConfig& c = model_->config();
  const auto sequences = golden_->Tokens();
  for (size_t j = 0; j < sequences.size(); ++j) {
    SCOPED_TRACE("sequence " + std::to_string(j));
    RecordingTrace trace(0);
    const EntryOutput out = Run(sequences[j], &trace);
    ExpectLogitsMatch(out.logits, golden_->Floats("logits." + std::to_string(j)), c.vocab_size, "logits");
    const std::string suffix = j == 0 ? "" : "." + std::to_string(j);
    // Dense intermediates exist for sequence 0 only; walk them in layer order so the first drift is reported first.
    if (j == 0) {
      std::vector<std::string> names = {"hidden.emb"};
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        for (const char* part : {"attn_in", "attn_out", "ffn_in", "ffn_out", "streams"}) {
          names.push_back("layer." + std::to_string(l) + "." + part);
        }
      }
      names.push_back("final.normed");
      for (const std::string& name : names) {
        ASSERT_TRUE(trace.floats.count(name)) << name << " was not traced";
        const double error = testing::RelativeRmsError(trace.floats[name], golden_->Floats(name));
        ASSERT_LT(error, kIntermediateTolerance) << "first drifting intermediate: " << name;
      }
    }
    // Selections of every sequence: recorded for batch entry 0, which is this sequence.
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string prefix = "layer." + std::to_string(l) + ".";
      if (c.attention_kinds[l] == AttentionKind::kDsa) {
        EXPECT_EQ(trace.ints[prefix + "indexer_selected"], golden_->Ints(prefix + "indexer_selected" + suffix))
            << prefix << "indexer_selected" << suffix;
      }
      if (c.mlp_kinds[l] == MlpKind::kMoe) {
        EXPECT_EQ(trace.ints[prefix + "moe_experts"], golden_->Ints(prefix + "moe_experts" + suffix))
            << prefix << "moe_experts" << suffix;
      }
    }
  }
}

TEST_P(GoldenModel, MtpLogitsMatch) {
  const ModelConfig& c = model_->config();
  const auto sequences = golden_->Tokens();
  for (size_t j = 0; j < sequences.size(); ++j) {
    SCOPED_TRACE("sequence " + std::to_string(j));
    const auto& tokens = sequences[j];
    const int64_t pairs = static_cast<int64_t>(tokens.size()) - 1;
    SequenceState state = model_->NewSequence();
    std::vector<EntryOutput> outputs;
    BatchEntry entry{tokens, &state, LogitsWanted::kNone, true};
    ASSERT_OK(model_->Forward({&entry, 1}, outputs));
    // Pair t = (h_t, x_{t+1}) for t = 0..T−2.
    std::span<const float> hidden(outputs[0].hidden.data(), pairs * c.hidden_size);
    std::span<const int32_t> next(tokens.data() + 1, pairs);
    std::vector<float> logits;
    RecordingTrace trace(0);
    ASSERT_OK(model_->MtpForward(state, hidden, next, logits, {}, &trace));
    ExpectLogitsMatch(logits, golden_->Floats("mtp_logits." + std::to_string(j)), c.vocab_size, "mtp logits");
    const std::string suffix = j == 0 ? "" : "." + std::to_string(j);
    if (j == 0) {
      for (const char* name : {"mtp.eh_out", "mtp.attn_out", "mtp.ffn_out"}) {
        EXPECT_LT(testing::RelativeRmsError(trace.floats[name], golden_->Floats(name)), kIntermediateTolerance) << name;
      }
    }
    EXPECT_EQ(trace.ints["mtp.indexer_selected"], golden_->Ints("mtp.indexer_selected" + suffix));
    EXPECT_EQ(trace.ints["mtp.moe_experts"], golden_->Ints("mtp.moe_experts" + suffix));
  }
}

// Whole prefill = any split into chunks = token-by-token decode, with state carried; for both KDA algorithms and
// both attention forms. Tolerance 1e-5 × std(logits): the computations differ only in fp32 summation order.
TEST_P(GoldenModel, PrefillEqualsChunksEqualsDecode) {
  const auto sequences = golden_->Tokens();
  // The longest sequence of at most 120 tokens keeps the test fast and still runs past the dense regime in both
  // fixtures (tiny-dense seq 1 from position 19, tiny-sparse seq 0 from position 35).
  std::vector<int32_t> tokens;
  for (const auto& sequence : sequences) {
    if (sequence.size() <= 120 && sequence.size() > tokens.size()) tokens = sequence;
  }
  const int64_t length = static_cast<int64_t>(tokens.size());
  const std::vector<float> whole = Run(tokens).logits;
  const double bound = 1e-5 * testing::StdDev(whole);
  std::vector<std::vector<int64_t>> splits = {{1, length - 1}, {length / 3, length - length / 3}, {}};
  for (int64_t i = 0; i < length; ++i) splits.back().push_back(1);  // token by token
  for (const auto& split : splits) {
    // Both KDA algorithms and both MLA forms, each pairing once.
    for (auto [algorithm, form] : {std::pair{KdaAlgorithm::kChunked, MlaForm::kAbsorbed},
                                   std::pair{KdaAlgorithm::kRecurrent, MlaForm::kNaive}}) {
      ForwardOptions options;
      options.kda_algorithm = algorithm;
      options.dsa.form = form;
      SequenceState state = model_->NewSequence();
      std::vector<float> logits;
      int64_t offset = 0;
      for (int64_t part : split) {
        std::vector<EntryOutput> outputs;
        BatchEntry entry{std::span<const int32_t>(tokens.data() + offset, part), &state, LogitsWanted::kAll, false};
        ASSERT_OK(model_->Forward({&entry, 1}, outputs, options));
        logits.insert(logits.end(), outputs[0].logits.begin(), outputs[0].logits.end());
        offset += part;
      }
      EXPECT_LT(testing::MaxAbsError(logits, whole), bound)
          << "split of " << split.size() << " parts, recurrent=" << (algorithm == KdaAlgorithm::kRecurrent)
          << " naive=" << (form == MlaForm::kNaive);
      EXPECT_EQ(state.tokens, length);
    }
  }
}

// A batch of several sequences gives each sequence exactly what it gets alone.
TEST_P(GoldenModel, BatchEqualsAlone) {
  const auto sequences = golden_->Tokens();
  std::vector<SequenceState> states;
  for (size_t j = 0; j < sequences.size(); ++j) states.push_back(model_->NewSequence());
  std::vector<BatchEntry> batch;
  for (size_t j = 0; j < sequences.size(); ++j) batch.push_back({sequences[j], &states[j], LogitsWanted::kAll, false});
  std::vector<EntryOutput> outputs;
  ASSERT_OK(model_->Forward(batch, outputs));
  for (size_t j = 0; j < sequences.size(); ++j) EXPECT_EQ(outputs[j].logits, Run(sequences[j]).logits) << j;
}

TEST_P(GoldenModel, BadInputIsRefusedWithoutChangingState) {
  const ModelConfig& c = model_->config();
  SequenceState state = model_->NewSequence();
  std::vector<EntryOutput> outputs;
  const std::vector<int32_t> out_of_range = {1, static_cast<int32_t>(c.vocab_size)};
  BatchEntry entry{out_of_range, &state, LogitsWanted::kLast, false};
  EXPECT_ERROR_CONTAINS(model_->Forward({&entry, 1}, outputs), "is out of range");
  const std::vector<int32_t> negative = {-5};
  entry.tokens = negative;
  EXPECT_ERROR_CONTAINS(model_->Forward({&entry, 1}, outputs), "token id -5");
  entry.tokens = {};
  EXPECT_ERROR_CONTAINS(model_->Forward({&entry, 1}, outputs), "has no tokens");
  EXPECT_EQ(state.tokens, 0);

  const Checkpoint checkpoint = Checkpoint::Open(testing::TestDataPath("golden/" + GetParam())).value();
  ReferenceModel other(c, LoadModelWeights(checkpoint, c).value());
  SequenceState foreign = other.NewSequence();
  const std::vector<int32_t> one = {1};
  BatchEntry foreign_entry{one, &foreign, LogitsWanted::kLast, false};
  EXPECT_ERROR_CONTAINS(model_->Forward({&foreign_entry, 1}, outputs), "not created by this model");

  ModelConfig short_context = c;
  short_context.max_position_embeddings = 4;
  ReferenceModel limited(short_context, LoadModelWeights(checkpoint, c).value());
  SequenceState limited_state = limited.NewSequence();
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  BatchEntry long_entry{five, &limited_state, LogitsWanted::kLast, false};
  EXPECT_ERROR_CONTAINS(limited.Forward({&long_entry, 1}, outputs), "the model's maximum is 4");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenModel, ::testing::Values("tiny-dense", "tiny-sparse"));

}  // namespace
}  // namespace glint

namespace glint {
namespace {

// The caches are paged: a state bound to memory the caller manages must have blocks reserved for every position a
// call writes, and a state whose forward pass failed midway is refused from then on.
TEST(ReferenceModelState, BoundMemoryMustCoverTheCall) {
  auto model = ReferenceModel::Load(testing::TestDataPath("golden/tiny-dense")).value();
  const ModelConfig& c = model->config();
  CacheOptions options;
  options.block_tokens = 8;
  auto layout = std::make_shared<const CacheLayout>(model->CacheLayoutFor(options).value());
  ItemArena blocks = ItemArena::Fixed(4, layout->block_bytes).value();
  ItemArena slot = ItemArena::Fixed(1, layout->slot_bytes).value();
  std::vector<int32_t> table = {2};
  SequenceState state = model->BindSequence(layout, {&blocks, &table, slot.Item(0)}, 0);
  std::vector<EntryOutput> outputs;
  const std::vector<int32_t> nine = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  BatchEntry entry{nine, &state, LogitsWanted::kLast, false};
  EXPECT_ERROR_CONTAINS(model->Forward({&entry, 1}, outputs), "covers 8 positions but this call needs 9");
  table.push_back(0);
  ASSERT_OK(model->Forward({&entry, 1}, outputs));
  EXPECT_EQ(state.tokens, 9);
  // Same logits as a sequence that owns its memory.
  SequenceState own = model->NewSequence();
  std::vector<EntryOutput> own_outputs;
  BatchEntry own_entry{nine, &own, LogitsWanted::kLast, false};
  ASSERT_OK(model->Forward({&own_entry, 1}, own_outputs));
  EXPECT_EQ(outputs[0].logits, own_outputs[0].logits);
  table.push_back(7);
  EXPECT_ERROR_CONTAINS(model->Forward({&entry, 1}, outputs), "names block 7 of 4");
  EXPECT_ERROR_CONTAINS(
      model->MtpForward(state, std::vector<float>(c.hidden_size), std::vector<int32_t>{1}, outputs[0].logits),
      "no MTP cache");
  state.broken = true;
  table.pop_back();
  EXPECT_ERROR_CONTAINS(model->Forward({&entry, 1}, outputs), "left inconsistent");
  ModelConfig changed = c;
  changed.kv_lora_rank += 1;
  EXPECT_ERROR_CONTAINS(MakeCacheLayout(changed, options).value().CheckMatches(c), "made for another model");
}

}  // namespace
}  // namespace glint

namespace glint {
namespace {

// The KDA state written at a checkpoint inside a call is exactly the state of a sequence whose calls end there.
TEST(ReferenceModelState, CheckpointsInsideACallEqualTheStateAtThatPosition) {
  auto model = ReferenceModel::Load(testing::TestDataPath("golden/tiny-sparse")).value();
  testing::ExpectCheckpointsInsideACallEqualTheStateAtThatPosition(*model);
}

}  // namespace
}  // namespace glint
