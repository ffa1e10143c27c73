// DSA layer (NoPE MLA + KPool indexer), fp32 reference: golden outputs, a brute-force indexer, equivalences of
// forms, selections and chunkings, and bad input. docs/model-dsa.md explains the tolerances used here.
#include "model/dsa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "io/config.h"
#include "io/safetensors.h"
#include "kernels/reference.h"
#include "model/indexer.h"
#include "model/weights.h"
#include "test_util.h"

namespace glint {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// ‖a − b‖ / ‖b‖ over all elements, in double.
double RelativeRms(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// ---------------------------------------------------------------------------------------------------------------
// A tiny random config and weights: K = 4 pools of 4 tokens, so with thousands of tokens almost every pool is
// dropped. Weights are N(0, 1/in) so every projection output is O(1), like a trained model's normed activations.

ModelConfig TinyConfig() {
  ModelConfig c;
  c.hidden_size = 32;
  c.num_attention_heads = 2;
  c.q_lora_rank = 24;
  c.kv_lora_rank = 16;
  c.qk_head_dim = 8;
  c.v_head_dim = 12;
  c.index_n_heads = 4;
  c.index_head_dim = 16;
  c.index_topk = 16;
  c.index_kpool = 4;
  c.rms_norm_eps = 1e-5f;
  return c;
}

Matrix RandomMatrix(int64_t rows, int64_t cols, std::mt19937_64& rng, double stddev) {
  std::normal_distribution<float> normal(0.0f, static_cast<float>(stddev));
  Matrix m{rows, cols, std::vector<float>(rows * cols)};
  for (float& x : m.data) x = normal(rng);
  return m;
}

std::vector<float> RandomNormWeight(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(1.0f, 0.2f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

DsaWeights RandomDsaWeights(const ModelConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto fan_in = [](int64_t in) { return 1.0 / std::sqrt(static_cast<double>(in)); };
  const int64_t heads = c.num_attention_heads, e = c.index_head_dim;
  DsaWeights w;
  w.q_a_proj = RandomMatrix(c.q_lora_rank, c.hidden_size, rng, fan_in(c.hidden_size));
  w.q_a_layernorm = RandomNormWeight(c.q_lora_rank, rng);
  // ×3 so attention logits spread (a softmax over O(1) logits would be nearly uniform and hide errors).
  w.q_b_proj = RandomMatrix(heads * c.qk_head_dim, c.q_lora_rank, rng, 3 * fan_in(c.q_lora_rank));
  w.kv_a_proj = RandomMatrix(c.kv_lora_rank, c.hidden_size, rng, fan_in(c.hidden_size));
  w.kv_a_layernorm = RandomNormWeight(c.kv_lora_rank, rng);
  w.kv_b_proj = RandomMatrix(heads * (c.qk_head_dim + c.v_head_dim), c.kv_lora_rank, rng, fan_in(c.kv_lora_rank));
  w.o_proj = RandomMatrix(c.hidden_size, heads * c.v_head_dim, rng, fan_in(heads * c.v_head_dim));
  IndexerWeights& x = w.indexer;
  x.wq_b = RandomMatrix(c.index_n_heads * e, c.q_lora_rank, rng, fan_in(c.q_lora_rank));
  x.wk = RandomMatrix(e, c.hidden_size, rng, fan_in(c.hidden_size));
  x.k_norm_weight = RandomNormWeight(e, rng);
  x.k_norm_bias = RandomMatrix(1, e, rng, 0.3).data;
  x.weights_proj = RandomMatrix(c.index_n_heads, c.hidden_size, rng, fan_in(c.hidden_size));
  x.compress_gate = RandomMatrix(e, c.hidden_size, rng, fan_in(c.hidden_size));
  x.compress_ape = RandomMatrix(c.index_kpool, e, rng, 0.5);
  return w;
}

std::vector<float> RandomHidden(int64_t tokens, int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> h(tokens * d);  // [tokens, D]
  for (float& x : h) x = normal(rng);
  return h;
}

// One whole-sequence call on a fresh cache.
struct LayerRun {
  std::vector<float> out;  // [T, D]
  DsaTrace trace;
  DsaCache cache;
};

LayerRun Prefill(const DsaWeights& w, const ModelConfig& c, const std::vector<float>& hidden,
                 const DsaOptions& options) {
  LayerRun run;
  const int64_t tokens = static_cast<int64_t>(hidden.size()) / c.hidden_size;
  run.cache = NewDsaCache(c);
  run.out.resize(hidden.size());
  const Status status = DsaForward(w, c, hidden.data(), tokens, run.cache, options, run.out.data(), &run.trace);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return run;
}

// The same tokens fed in consecutive chunks of the given sizes (cycled), cache carried; traces concatenated.
LayerRun Chunked(const DsaWeights& w, const ModelConfig& c, const std::vector<float>& hidden, const DsaOptions& options,
                 const std::vector<int64_t>& chunk_sizes) {
  LayerRun run;
  const int64_t d = c.hidden_size, tokens = static_cast<int64_t>(hidden.size()) / d;
  run.cache = NewDsaCache(c);
  run.out.resize(hidden.size());
  size_t chunk = 0;
  for (int64_t start = 0; start < tokens;) {
    const int64_t n = std::min(chunk_sizes[chunk++ % chunk_sizes.size()], tokens - start);
    DsaTrace part;
    const Status status =
        DsaForward(w, c, hidden.data() + start * d, n, run.cache, options, run.out.data() + start * d, &part);
    EXPECT_TRUE(status.ok()) << status.ToString();
    run.trace.selected.insert(run.trace.selected.end(), part.selected.begin(), part.selected.end());
    run.trace.margin.insert(run.trace.margin.end(), part.margin.begin(), part.margin.end());
    start += n;
  }
  return run;
}

// Bitwise equality of floats (NaN-safe, distinguishes −0).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---------------------------------------------------------------------------------------------------------------
// 1. Golden: DsaForward on the stored layer input reproduces the float64 HF reference.

struct Golden {
  ModelConfig config;
  ModelWeights weights;
  Checkpoint expected;

  std::vector<float> F32(const std::string& name) const {
    auto view = expected.View(name);
    EXPECT_TRUE(view.ok()) << view.status().ToString();
    if (!view.ok()) return {};
    EXPECT_EQ(view->dtype(), DType::kF32);
    std::vector<float> values(view->bytes.size() / sizeof(float));
    std::memcpy(values.data(), view->bytes.data(), view->bytes.size());
    return values;
  }
  // The selected positions of every query, −1 padding removed.
  std::vector<std::vector<int64_t>> Selections(const std::string& name) const {
    auto view = expected.View(name);
    EXPECT_TRUE(view.ok()) << view.status().ToString();
    if (!view.ok()) return {};
    EXPECT_EQ(view->dtype(), DType::kI32);
    const int64_t rows = view->shape()[0], width = view->shape()[1];
    std::vector<int32_t> values(rows * width);
    std::memcpy(values.data(), view->bytes.data(), view->bytes.size());
    std::vector<std::vector<int64_t>> selections(rows);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < width && values[r * width + i] >= 0; ++i) selections[r].push_back(values[r * width + i]);
    }
    return selections;
  }
};

Golden LoadGolden(const std::string& fixture) {
  const std::string dir = testing::TestDataPath("golden/" + fixture);
  auto config = LoadModelConfig(dir);
  auto checkpoint = Checkpoint::Open(dir + "/model.safetensors");
  auto expected = Checkpoint::Open(dir + "/expected.safetensors");
  EXPECT_TRUE(config.ok() && checkpoint.ok() && expected.ok());
  auto weights = LoadModelWeights(*checkpoint, *config);
  EXPECT_TRUE(weights.ok()) << weights.status().ToString();
  return {std::move(config).value(), std::move(weights).value(), std::move(expected).value()};
}

// Compares one DSA layer's output, selections and margins with the golden tensors named `prefix`.*.
// Tolerances (docs/model-dsa.md "Numerics"). The golden README suggests relative RMS 1e-4 for intermediates deep
// in the model, where errors of all earlier layers have accumulated. Fed the stored input, one layer carries only
// its own fp32 rounding: a few chained projections and norms (double-accumulated dots, ~6e-8 each) and a softmax
// over logits of O(1–10), measured ≤ 1.3e-7; so we hold it to 1e-5 (stricter than 1e-4, ~80× headroom).
// Selections exactly: the smallest golden margin (8.8e-5) is ~400× our score error. Margins to 2e-6 absolute:
// measured ≤ 2.1e-7, and a wrong key-norm eps (1e-5 instead of 1e-6) already moves them by 3e-6.
void ExpectMatchesGolden(const Golden& g, const DsaWeights& weights, const std::vector<float>& input,
                         const std::string& prefix, const std::string& out_name) {
  const std::vector<float> expected_out = g.F32(out_name);
  const auto expected_selected = g.Selections(prefix + ".indexer_selected");
  const std::vector<float> expected_margin = g.F32(prefix + ".indexer_margin");
  for (MlaForm form : {MlaForm::kNaive, MlaForm::kAbsorbed}) {
    SCOPED_TRACE(prefix + (form == MlaForm::kNaive ? " naive" : " absorbed"));
    DsaOptions options;
    options.form = form;
    const LayerRun run = Prefill(weights, g.config, input, options);
    const double error = RelativeRms(run.out, expected_out);
    std::printf("[golden] %s %s: relative RMS %.3g\n", out_name.c_str(), form == MlaForm::kNaive ? "naive" : "absorbed",
                error);
    EXPECT_LE(error, 1e-5);
    ASSERT_EQ(run.trace.selected.size(), expected_selected.size());
    double max_margin_error = 0;
    int sparse_queries = 0;
    for (size_t t = 0; t < expected_selected.size(); ++t) {
      EXPECT_EQ(run.trace.selected[t], expected_selected[t]) << "query " << t;
      if (std::isinf(expected_margin[t])) {
        EXPECT_EQ(run.trace.margin[t], kInf) << "query " << t;
      } else {
        ++sparse_queries;
        max_margin_error = std::max(max_margin_error, std::fabs(double{run.trace.margin[t]} - expected_margin[t]));
      }
    }
    std::printf("[golden] %s: %d sparse queries, max |margin error| %.3g\n", prefix.c_str(), sparse_queries,
                max_margin_error);
    EXPECT_LE(max_margin_error, 2e-6);
  }
}

TEST(DsaGolden, EveryDsaLayerOfSequence0MatchesTheReference) {
  int layers_checked = 0;
  for (const char* fixture : {"tiny-dense", "tiny-sparse"}) {
    const Golden g = LoadGolden(fixture);
    for (int64_t l = 0; l < g.config.num_hidden_layers; ++l) {
      if (g.config.attention_kinds[l] != AttentionKind::kDsa) continue;
      const std::string prefix = "layer." + std::to_string(l);
      ExpectMatchesGolden(g, g.weights.layers[l].dsa, g.F32(prefix + ".attn_in"), prefix, prefix + ".attn_out");
      ++layers_checked;
    }
  }
  EXPECT_EQ(layers_checked, 3);  // tiny-dense layer 3, tiny-sparse layers 3 and 7
}

// The MTP layer's DSA runs over the T − 1 pairs as a sequence of its own; its input is RMSNorm(z; input_layernorm).
TEST(DsaGolden, MtpLayerAttentionMatchesTheReference) {
  for (const char* fixture : {"tiny-dense", "tiny-sparse"}) {
    const Golden g = LoadGolden(fixture);
    ASSERT_NE(g.weights.mtp, nullptr);
    std::vector<float> input = g.F32("mtp.eh_out");  // [T0 − 1, D]
    const int64_t d = g.config.hidden_size;
    for (size_t t = 0; t < input.size() / d; ++t) {
      ref::RmsNorm(input.data() + t * d, g.weights.mtp->input_layernorm.data(), d, g.config.rms_norm_eps,
                   input.data() + t * d);
    }
    ExpectMatchesGolden(g, g.weights.mtp->dsa, input, "mtp", "mtp.attn_out");
  }
}

// The golden layer fed in uneven chunks and token by token reproduces the whole prefill bit for bit.
TEST(DsaGolden, ChunkedAndStepwiseFeedingReproduceThePrefill) {
  const Golden g = LoadGolden("tiny-sparse");
  const DsaWeights& w = g.weights.layers[7].dsa;
  const std::vector<float> input = g.F32("layer.7.attn_in");
  const LayerRun whole = Prefill(w, g.config, input, {});
  const LayerRun chunks = Chunked(w, g.config, input, {}, {33, 2, 1, 4, 60});
  const LayerRun steps = Chunked(w, g.config, input, {}, {1});
  EXPECT_TRUE(SameBits(chunks.out, whole.out));
  EXPECT_TRUE(SameBits(steps.out, whole.out));
  EXPECT_EQ(steps.trace.selected, whole.trace.selected);
  EXPECT_TRUE(SameBits(steps.trace.margin, whole.trace.margin));
}

// ---------------------------------------------------------------------------------------------------------------
// 2. A brute-force indexer written from the equations (model card §7) with its own code: every token's key and
// gate, every pool's key and every score in double, pools ranked by a full sort on (score desc, index asc). It
// shares only the ref:: kernels with model/indexer.cc.

class BruteForceIndexer {
 public:
  BruteForceIndexer(const DsaWeights& w, const ModelConfig& c, const std::vector<float>& hidden)
      : w_(w), c_(c), hidden_(hidden) {
    const int64_t d = c.hidden_size, e = c.index_head_dim, kpool = c.index_kpool;
    const int64_t tokens = static_cast<int64_t>(hidden.size()) / d;
    std::vector<float> keys(tokens * e), gates(tokens * e);  // [T, e]
    for (int64_t t = 0; t < tokens; ++t) {
      ref::Linear(&hidden[t * d], 1, w.indexer.wk.data.data(), e, d, &keys[t * e]);
      ref::LayerNorm(&keys[t * e], w.indexer.k_norm_weight.data(), w.indexer.k_norm_bias.data(), e, 1e-6f,
                     &keys[t * e]);
      ref::Linear(&hidden[t * d], 1, w.indexer.compress_gate.data.data(), e, d, &gates[t * e]);
    }
    const int64_t pools = tokens / kpool;
    pooled_.assign(pools * e, 0.0);
    for (int64_t m = 0; m < pools; ++m) {
      for (int64_t ch = 0; ch < e; ++ch) {
        std::vector<double> logit(kpool);
        double max_logit = -1e300, total = 0;
        for (int64_t j = 0; j < kpool; ++j) {
          logit[j] = double{gates[(m * kpool + j) * e + ch]} + w.indexer.compress_ape.data[j * e + ch];
          max_logit = std::max(max_logit, logit[j]);
        }
        for (int64_t j = 0; j < kpool; ++j) total += std::exp(logit[j] - max_logit);
        for (int64_t j = 0; j < kpool; ++j) {
          pooled_[m * e + ch] += std::exp(logit[j] - max_logit) / total * keys[(m * kpool + j) * e + ch];
        }
      }
    }
  }

  struct Answer {
    std::vector<int64_t> positions;
    double margin = 0;       // +inf when every visible pool is selected
    double score_scale = 0;  // max |s_m|, for relative comparisons
  };

  Answer Select(int64_t p) const {
    const int64_t d = c_.hidden_size, e = c_.index_head_dim, heads = c_.index_n_heads, kpool = c_.index_kpool;
    std::vector<float> q_resid(c_.q_lora_rank), query(heads * e), head_weight(heads);
    ref::Linear(&hidden_[p * d], 1, w_.q_a_proj.data.data(), c_.q_lora_rank, d, q_resid.data());
    ref::RmsNorm(q_resid.data(), w_.q_a_layernorm.data(), c_.q_lora_rank, c_.rms_norm_eps, q_resid.data());
    ref::Linear(q_resid.data(), 1, w_.indexer.wq_b.data.data(), heads * e, c_.q_lora_rank, query.data());
    ref::Linear(&hidden_[p * d], 1, w_.indexer.weights_proj.data.data(), heads, d, head_weight.data());
    std::vector<std::pair<double, int64_t>> ranked;  // (score, pool) of every complete pool with 4m+3 ≤ p
    Answer answer;
    for (int64_t m = 0; m * kpool + kpool - 1 <= p; ++m) {
      double score = 0;
      for (int64_t h = 0; h < heads; ++h) {
        double dot = 0;
        for (int64_t ch = 0; ch < e; ++ch) dot += double{query[h * e + ch]} * pooled_[m * e + ch];
        score += head_weight[h] / std::sqrt(double(heads)) * std::max(dot / std::sqrt(double(e)), 0.0);
      }
      ranked.push_back({score, m});
      answer.score_scale = std::max(answer.score_scale, std::fabs(score));
    }
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    const size_t k = static_cast<size_t>(c_.index_topk / kpool);
    answer.margin = ranked.size() <= k ? INFINITY : ranked[k - 1].first - ranked[k].first;
    std::vector<int64_t> chosen;
    for (size_t i = 0; i < std::min(k, ranked.size()); ++i) chosen.push_back(ranked[i].second);
    for (int64_t m : chosen) {
      for (int64_t j = 0; j < kpool; ++j) answer.positions.push_back(m * kpool + j);
    }
    for (int64_t j = static_cast<int64_t>(ranked.size()) * kpool; j <= p; ++j) answer.positions.push_back(j);
    std::sort(answer.positions.begin(), answer.positions.end());
    return answer;
  }

 private:
  const DsaWeights& w_;
  const ModelConfig& c_;
  const std::vector<float>& hidden_;
  std::vector<double> pooled_;  // [pools, e]
};

TEST(DsaIndexer, MatchesBruteForceOnThousandsOfRandomTokens) {
  const ModelConfig c = TinyConfig();
  const DsaWeights w = RandomDsaWeights(c, 7);
  const int64_t tokens = 3001;
  const std::vector<float> hidden = RandomHidden(tokens, c.hidden_size, 11);
  const LayerRun run = Prefill(w, c, hidden, {});
  const BruteForceIndexer brute(w, c, hidden);
  const int64_t k = c.IndexTopkPools(), kpool = c.index_kpool;
  ASSERT_EQ(c.DenseRegimeTokens(), 19);

  int exact_ties = 0, near_tie_flips = 0, own_pool_completing = 0, own_pool_completing_selected = 0;
  double max_margin_error = 0;
  int64_t dropped = 0, visible_total = 0;
  for (int64_t p = 0; p < tokens; ++p) {
    const BruteForceIndexer::Answer expected = brute.Select(p);
    const std::vector<int64_t>& got = run.trace.selected[p];
    // Score error: fp32 keys and queries (relative ~1e-7) over O(1) scores; 1e-5 × the score scale is ~10× that.
    const double score_tolerance = 1e-5 * std::max(expected.score_scale, 1.0);
    if (std::isinf(expected.margin)) {
      EXPECT_EQ(run.trace.margin[p], kInf) << p;
    } else {
      max_margin_error = std::max(max_margin_error, std::fabs(run.trace.margin[p] - expected.margin));
    }
    // Exact ties (margin 0: e.g. several pools whose every head is cut by the ReLU, when all w_h < 0) must follow
    // the lower-index rule exactly. Only a boundary closer than the score error may be decided either way.
    if (expected.margin == 0) ++exact_ties;
    if (got != expected.positions) {
      ASSERT_TRUE(expected.margin > 0 && expected.margin < score_tolerance)
          << "query at position " << p << ", margin " << expected.margin;
      ++near_tie_flips;
    }
    const int64_t visible = VisiblePools(p, kpool);
    visible_total += visible;
    dropped += std::max<int64_t>(visible - k, 0);
    // Shape of the set: K whole pools (or all visible ones) and the tail of (p + 1) mod kpool tokens.
    EXPECT_EQ(static_cast<int64_t>(got.size()), std::min(visible, k) * kpool + (p + 1) % kpool) << p;
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
    if (visible > k && (p + 1) % kpool == 0) {  // a pool completes on this token and the tail is empty
      ++own_pool_completing;
      if (std::binary_search(got.begin(), got.end(), p)) ++own_pool_completing_selected;
    }
  }
  std::printf(
      "[brute] %lld queries, %.1f%% of visible pools dropped, %d exact ties, %d near-tie flips, "
      "max |margin error| %.3g\n",
      static_cast<long long>(tokens), 100.0 * dropped / visible_total, exact_ties, near_tie_flips, max_margin_error);
  // The brute force is float64 from the same fp32 weights, so this is our fp32 score error (measured 2.5e-7).
  EXPECT_LE(max_margin_error, 2e-6);
  EXPECT_LE(near_tie_flips, 3);
  EXPECT_GT(exact_ties, 0);  // the tie rule was exercised
  EXPECT_GT(double(dropped) / visible_total, 0.98);
  // Both outcomes of the empty-tail case occur: the query's own token attended only through its pool.
  EXPECT_GT(own_pool_completing_selected, 0);
  EXPECT_GT(own_pool_completing - own_pool_completing_selected, 0);

  // The regime boundary: exactly DenseRegimeTokens visible tokens is the last dense query, then the first sparse
  // query (20 tokens, 5 pools, a pool completing on the current token, empty tail) drops one pool.
  const int64_t last_dense = c.DenseRegimeTokens() - 1;
  EXPECT_EQ(run.trace.selected[last_dense], Iota(last_dense + 1));
  EXPECT_EQ(run.trace.margin[last_dense], kInf);
  EXPECT_EQ(run.trace.selected[last_dense + 1].size(), static_cast<size_t>(k * kpool));
  EXPECT_TRUE(std::isfinite(run.trace.margin[last_dense + 1]));
}

// Equal scores rank toward the lower pool index: with wq_b = 0 every score is exactly 0.
TEST(DsaIndexer, AllTiedScoresSelectTheLowestPools) {
  const ModelConfig c = TinyConfig();
  DsaWeights w = RandomDsaWeights(c, 3);
  std::fill(w.indexer.wq_b.data.begin(), w.indexer.wq_b.data.end(), 0.0f);
  const std::vector<float> hidden = RandomHidden(203, c.hidden_size, 5);
  const LayerRun run = Prefill(w, c, hidden, {});
  const BruteForceIndexer brute(w, c, hidden);
  for (int64_t p = c.DenseRegimeTokens(); p < 203; ++p) {
    std::vector<int64_t> expected = Iota(c.IndexTopkPools() * c.index_kpool);
    for (int64_t j = VisiblePools(p, c.index_kpool) * c.index_kpool; j <= p; ++j) expected.push_back(j);
    EXPECT_EQ(run.trace.selected[p], expected) << p;
    EXPECT_EQ(brute.Select(p).positions, expected) << p;
    EXPECT_EQ(run.trace.margin[p], 0.0f);
  }
}

TEST(DsaIndexer, SelectTopPoolsIsTotalOverTiesInfinitiesAndNan) {
  const std::vector<float> scores = {1.0f, kNan, 3.0f, kNan, 2.0f, 3.0f, -kInf};
  PoolSelection s = SelectTopPools(scores, 2);
  EXPECT_EQ(s.pools, (std::vector<int64_t>{2, 5}));  // the two 3.0s
  EXPECT_EQ(s.margin, 1.0f);
  s = SelectTopPools(scores, 1);
  EXPECT_EQ(s.pools, (std::vector<int64_t>{2}));  // tie at 3.0 → lower index
  EXPECT_EQ(s.margin, 0.0f);
  s = SelectTopPools(scores, 5);  // 3, 3, 2, 1, −inf; NaNs last
  EXPECT_EQ(s.pools, (std::vector<int64_t>{0, 2, 4, 5, 6}));
  EXPECT_TRUE(std::isnan(s.margin));  // −inf − NaN: the boundary is undecided
  s = SelectTopPools(scores, 6);
  EXPECT_EQ(s.pools, (std::vector<int64_t>{0, 1, 2, 4, 5, 6}));  // the lower-index NaN first
  s = SelectTopPools(scores, 7);
  EXPECT_EQ(s.pools, Iota(7));
  EXPECT_EQ(s.margin, kInf);
  const std::vector<float> all_nan(9, kNan);
  s = SelectTopPools(all_nan, 3);
  EXPECT_EQ(s.pools, Iota(3));
  EXPECT_TRUE(std::isnan(s.margin));
  s = SelectTopPools(std::vector<float>{kInf, kInf, 5.0f}, 1);
  EXPECT_EQ(s.pools, (std::vector<int64_t>{0}));
}

TEST(DsaIndexer, ExpandPoolsAddsTheTailOfTheIncompletePool) {
  const std::vector<int64_t> pools = {1, 3};
  EXPECT_EQ(ExpandPools(pools, 17, 4), (std::vector<int64_t>{4, 5, 6, 7, 12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(ExpandPools(pools, 19, 4), (std::vector<int64_t>{4, 5, 6, 7, 12, 13, 14, 15}));  // empty tail
  EXPECT_EQ(ExpandPools({}, 2, 4), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(VisiblePools(2, 4), 0);
  EXPECT_EQ(VisiblePools(3, 4), 1);  // the pool completing on the query's own token is visible
}

// A NaN hidden row poisons its own latent and its pool's key. The pool's NaN score ranks last, so sparse queries
// never select it; the NaN token's own query scores NaN everywhere and still gets a well-formed set.
TEST(DsaIndexer, NanInputNeverSelectsGarbage) {
  const ModelConfig c = TinyConfig();
  const DsaWeights w = RandomDsaWeights(c, 13);
  std::vector<float> hidden = RandomHidden(120, c.hidden_size, 17);
  const int64_t poisoned = 41;  // pool 10
  hidden[poisoned * c.hidden_size + 3] = kNan;
  const LayerRun run = Prefill(w, c, hidden, {});
  for (int64_t p = 0; p < 120; ++p) {
    const std::vector<int64_t>& s = run.trace.selected[p];
    ASSERT_FALSE(s.empty());
    EXPECT_TRUE(std::is_sorted(s.begin(), s.end()) && std::adjacent_find(s.begin(), s.end()) == s.end());
    EXPECT_GE(s.front(), 0);
    EXPECT_LE(s.back(), p);
    const bool attends_poison = std::binary_search(s.begin(), s.end(), poisoned);
    if (p >= 43) {  // pool 10 (tokens 40..43) scores NaN once complete
      EXPECT_FALSE(attends_poison) << p;
    }
    bool finite = true;
    for (int64_t i = 0; i < c.hidden_size; ++i) finite &= std::isfinite(run.out[p * c.hidden_size + i]);
    EXPECT_EQ(finite, !attends_poison && p != poisoned) << p;
  }
  EXPECT_TRUE(std::isnan(run.trace.margin[poisoned]));
  EXPECT_EQ(run.trace.selected[poisoned],
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 40, 41}));
}

// ---------------------------------------------------------------------------------------------------------------
// 3. Equivalences.

// Absorbed and naive differ only in product order: k_h(j) = Wk_h c_j rounded to fp32 vs q̃_h = Wk_hᵀ q_h rounded to
// fp32. Each perturbs a logit by ~1e-7 relative; through softmax (logits here up to ~10) and the value sums that is
// ≤ ~1e-6 relative, so 1e-5 has 10× headroom. Selections do not depend on the form at all.
TEST(DsaEquivalence, AbsorbedEqualsNaive) {
  const ModelConfig c = TinyConfig();
  const DsaWeights w = RandomDsaWeights(c, 21);
  const std::vector<float> hidden = RandomHidden(700, c.hidden_size, 23);
  DsaOptions naive, absorbed;
  naive.form = MlaForm::kNaive;
  absorbed.form = MlaForm::kAbsorbed;
  const LayerRun a = Prefill(w, c, hidden, naive);
  const LayerRun b = Prefill(w, c, hidden, absorbed);
  const double error = RelativeRms(b.out, a.out);
  std::printf("[equivalence] absorbed vs naive: relative RMS %.3g\n", error);
  EXPECT_LE(error, 1e-5);
  EXPECT_GT(error, 0.0);  // different code paths really ran
  EXPECT_EQ(a.trace.selected, b.trace.selected);
}

// While p + 1 ≤ DenseRegimeTokens() every visible pool is selected and the tail completes 0..p: the indexer's
// set IS the dense set, so the outputs are bit-identical. One token later they must differ.
TEST(DsaEquivalence, SparseEqualsDenseInTheDenseRegime) {
  for (const char* fixture : {"", "tiny-sparse"}) {
    ModelConfig c = TinyConfig();
    DsaWeights w;
    if (*fixture) {
      Golden g = LoadGolden(fixture);
      c = g.config;
      w = g.weights.layers[3].dsa;
    } else {
      w = RandomDsaWeights(c, 31);
    }
    SCOPED_TRACE(*fixture ? fixture : "tiny random");
    const int64_t dense = c.DenseRegimeTokens(), d = c.hidden_size;
    const std::vector<float> hidden = RandomHidden(dense + 1, d, 37);
    for (MlaForm form : {MlaForm::kNaive, MlaForm::kAbsorbed}) {
      DsaOptions sparse_options, dense_options;
      sparse_options.form = dense_options.form = form;
      dense_options.selection = KeySelection::kDense;
      const LayerRun sparse = Prefill(w, c, hidden, sparse_options);
      const LayerRun full = Prefill(w, c, hidden, dense_options);
      const std::vector<float> head(sparse.out.begin(), sparse.out.begin() + dense * d);
      const std::vector<float> full_head(full.out.begin(), full.out.begin() + dense * d);
      EXPECT_TRUE(SameBits(head, full_head));
      for (int64_t p = 0; p < dense; ++p) EXPECT_EQ(sparse.trace.selected[p], Iota(p + 1));
      // The first sparse query drops a pool, so its output differs from dense attention.
      EXPECT_LT(sparse.trace.selected[dense].size(), static_cast<size_t>(dense + 1));
      const std::vector<float> last(sparse.out.begin() + dense * d, sparse.out.end());
      const std::vector<float> full_last(full.out.begin() + dense * d, full.out.end());
      EXPECT_GT(RelativeRms(last, full_last), 1e-3);
    }
  }
}

// Every query row is computed independently with the same operation order, so prefill, any chunking and
// single-token steps are bit-identical (tolerance 0), and the caches end identical.
TEST(DsaEquivalence, PrefillEqualsChunksEqualsSingleSteps) {
  const ModelConfig c = TinyConfig();
  const DsaWeights w = RandomDsaWeights(c, 41);
  const std::vector<float> hidden = RandomHidden(157, c.hidden_size, 43);
  for (MlaForm form : {MlaForm::kNaive, MlaForm::kAbsorbed}) {
    DsaOptions options;
    options.form = form;
    const LayerRun whole = Prefill(w, c, hidden, options);
    for (const std::vector<int64_t>& split :
         {std::vector<int64_t>{1}, {3}, {4}, {5, 2, 7}, {19, 1, 20}, {100, 57}, {2, 155}}) {
      const LayerRun chunked = Chunked(w, c, hidden, options, split);
      EXPECT_TRUE(SameBits(chunked.out, whole.out)) << "split starting " << split[0];
      EXPECT_EQ(chunked.trace.selected, whole.trace.selected);
      EXPECT_TRUE(SameBits(chunked.trace.margin, whole.trace.margin));
      EXPECT_EQ(chunked.cache.tokens, 157);
      EXPECT_TRUE(SameBits(GatherLatents(chunked.cache), GatherLatents(whole.cache)));
      EXPECT_TRUE(SameBits(GatherPooledKeys(chunked.cache), GatherPooledKeys(whole.cache)));
      EXPECT_TRUE(SameBits(GatherPendingKeys(chunked.cache), GatherPendingKeys(whole.cache)));
      EXPECT_TRUE(SameBits(GatherPendingGates(chunked.cache), GatherPendingGates(whole.cache)));
    }
  }
  const LayerRun whole = Prefill(w, c, hidden, {});
  EXPECT_EQ(whole.cache.NumPools(), 39);
  EXPECT_EQ(whole.cache.NumPending(), 1);
}

// Replaying the indexer's own choices reproduces the indexer run; a forced single position p gives
// o_h = v_h(p) exactly (softmax over one key), checked against a hand computation.
TEST(DsaEquivalence, ForcedSelectionReplaysAndOverrides) {
  const ModelConfig c = TinyConfig();
  const DsaWeights w = RandomDsaWeights(c, 51);
  const std::vector<float> hidden = RandomHidden(90, c.hidden_size, 53);
  const LayerRun indexed = Prefill(w, c, hidden, {});
  DsaOptions replay;
  replay.selection = KeySelection::kForced;
  replay.forced_positions = &indexed.trace.selected;
  const LayerRun replayed = Prefill(w, c, hidden, replay);
  EXPECT_TRUE(SameBits(replayed.out, indexed.out));
  EXPECT_EQ(replayed.trace.selected, indexed.trace.selected);
  EXPECT_TRUE(std::isnan(replayed.trace.margin[50]));  // the indexer did not run

  std::vector<std::vector<int64_t>> self(90);
  for (int64_t p = 0; p < 90; ++p) self[p] = {p};
  DsaOptions only_self;
  only_self.selection = KeySelection::kForced;
  only_self.forced_positions = &self;
  only_self.form = MlaForm::kNaive;
  const LayerRun forced = Prefill(w, c, hidden, only_self);
  const int64_t heads = c.num_attention_heads, block = c.qk_head_dim + c.v_head_dim, rank = c.kv_lora_rank;
  std::vector<float> kv(heads * block), o(heads * c.v_head_dim), expected(c.hidden_size);
  for (int64_t p : {0, 37, 89}) {
    ref::Linear(forced.cache.LatentRow(p), 1, w.kv_b_proj.data.data(), heads * block, rank, kv.data());
    for (int64_t h = 0; h < heads; ++h) {
      std::copy_n(kv.data() + h * block + c.qk_head_dim, c.v_head_dim, o.data() + h * c.v_head_dim);
    }
    ref::Linear(o.data(), 1, w.o_proj.data.data(), c.hidden_size, heads * c.v_head_dim, expected.data());
    const std::vector<float> got(forced.out.begin() + p * c.hidden_size, forced.out.begin() + (p + 1) * c.hidden_size);
    EXPECT_LE(RelativeRms(got, expected), 1e-6) << p;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// 4. Bad input: a clear error, and the cache left untouched.

class DsaBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = TinyConfig();
    weights_ = RandomDsaWeights(config_, 61);
    hidden_ = RandomHidden(10, config_.hidden_size, 67);
    out_.resize(hidden_.size());
    cache_ = NewDsaCache(config_);
    ASSERT_OK(DsaForward(weights_, config_, hidden_.data(), 6, cache_, {}, out_.data()));
  }
  Status Call(int64_t tokens, const DsaOptions& options = {}) {
    return DsaForward(weights_, config_, hidden_.data(), tokens, cache_, options, out_.data());
  }
  void ExpectCacheUnchanged() {
    EXPECT_EQ(cache_.tokens, 6);
    EXPECT_EQ(GatherLatents(cache_).size(), static_cast<size_t>(6 * config_.kv_lora_rank));
    EXPECT_EQ(cache_.NumPools(), 1);
    EXPECT_EQ(cache_.NumPending(), 2);
  }

  ModelConfig config_;
  DsaWeights weights_;
  std::vector<float> hidden_, out_;
  DsaCache cache_;
};

TEST_F(DsaBadInput, TokenCountAndBuffers) {
  EXPECT_ERROR_CONTAINS(Call(0), "at least one new token");
  EXPECT_ERROR_CONTAINS(Call(-3), "at least one new token");
  EXPECT_ERROR_CONTAINS(DsaForward(weights_, config_, nullptr, 1, cache_, {}, out_.data()), "null");
  EXPECT_ERROR_CONTAINS(DsaForward(weights_, config_, hidden_.data(), 1, cache_, {}, nullptr), "null");
  ExpectCacheUnchanged();
}

TEST_F(DsaBadInput, CacheOfAnotherConfigOrCorrupt) {
  ModelConfig other = config_;
  other.kv_lora_rank = 20;
  DsaCache foreign = NewDsaCache(other);
  EXPECT_ERROR_CONTAINS(DsaForward(weights_, config_, hidden_.data(), 1, foreign, {}, out_.data()),
                        "made for kv_lora_rank 20");
  other = config_;
  other.index_kpool = 8;
  foreign = NewDsaCache(other);
  EXPECT_ERROR_CONTAINS(DsaForward(weights_, config_, hidden_.data(), 1, foreign, {}, out_.data()), "index_kpool 8");
  DsaCache blank;  // not made with NewDsaCache
  EXPECT_ERROR_CONTAINS(DsaForward(weights_, config_, hidden_.data(), 1, blank, {}, out_.data()), "NewDsaCache");
  // The cache is paged (dsa_cache.h): a view without memory, or whose block table does not cover the call, is
  // refused; only a cache that owns its memory grows.
  DsaCache corrupt = cache_;
  corrupt.block_table = nullptr;
  EXPECT_ERROR_CONTAINS(DsaForward(weights_, config_, hidden_.data(), 1, corrupt, {}, out_.data()), "has no memory");
  corrupt = cache_;
  corrupt.owned = nullptr;  // a view of the same memory: its one block covers 16 positions
  corrupt.tokens = 15;
  EXPECT_ERROR_CONTAINS(DsaForward(weights_, config_, hidden_.data(), 2, corrupt, {}, out_.data()),
                        "block table covers 16 positions but 17 are needed");
  ExpectCacheUnchanged();
}

TEST_F(DsaBadInput, WeightsOrConfigThatDoNotFit) {
  const Golden g = LoadGolden("tiny-dense");
  EXPECT_ERROR_CONTAINS(DsaForward(g.weights.layers[3].dsa, config_, hidden_.data(), 1, cache_, {}, out_.data()),
                        "q_a_proj is [48, 64]");
  DsaWeights broken = weights_;
  broken.indexer.compress_ape.data.pop_back();
  EXPECT_ERROR_CONTAINS(DsaForward(broken, config_, hidden_.data(), 1, cache_, {}, out_.data()),
                        "index_kpool_compress_ape");
  ModelConfig bad = config_;
  bad.index_topk = 18;  // not a multiple of index_kpool
  EXPECT_ERROR_CONTAINS(DsaForward(weights_, bad, hidden_.data(), 1, cache_, {}, out_.data()), "multiple");
  bad = config_;
  bad.index_kpool = 0;
  EXPECT_ERROR_CONTAINS(DsaForward(weights_, bad, hidden_.data(), 1, cache_, {}, out_.data()), "positive");
  ExpectCacheUnchanged();
}

TEST_F(DsaBadInput, ForcedPositions) {
  DsaOptions options;
  options.selection = KeySelection::kForced;
  EXPECT_ERROR_CONTAINS(Call(2, options), "needs DsaOptions::forced_positions");
  std::vector<std::vector<int64_t>> forced = {{0, 6}};
  options.forced_positions = &forced;
  EXPECT_ERROR_CONTAINS(Call(2, options), "one per new token (2)");
  forced = {{0, 6}, {2, 8}};  // the second query is at position 7
  EXPECT_ERROR_CONTAINS(Call(2, options), "forced_positions[1][1] = 8 for the query at position 7");
  forced = {{3, 3}, {0}};
  EXPECT_ERROR_CONTAINS(Call(2, options), "strictly ascending");
  forced = {{-1}, {0}};
  EXPECT_ERROR_CONTAINS(Call(2, options), "forced_positions[0][0] = -1");
  forced = {{0}, {}};
  EXPECT_ERROR_CONTAINS(Call(2, options), "is empty");
  ExpectCacheUnchanged();
  forced = {{0, 6}, {7}};
  EXPECT_OK(Call(2, options));
  EXPECT_EQ(cache_.tokens, 8);
}

}  // namespace
}  // namespace glint
