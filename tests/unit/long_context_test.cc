// Long context past every index width (docs/long-context.md): the DSA layer of make-tiny's long-context preset
// (80 B of cache per token) with its cache filled past 2^16, 2^17, 2^18 and 2^20 positions, and the context limit
// (max_position_embeddings = 1,048,576) at the model and the engine.
//
// Why a cache filled with forced selections is the real one: a DSA layer's cache (latents, pooled keys, the filling
// pool's rows) is a function of its input rows h alone, never of what the queries attended. So the fill runs FastDsa
// with each query forced to attend only itself (O(1) attention instead of the indexer's O(n_pool) per query, which
// would make a 2^20-token prefill O(N²)), and the cache it leaves is exactly the one a free prefill would leave. The
// last positions before and after each boundary then run with the indexer, and are checked:
//   (1) fast path: one call = uneven chunks (one ending on the boundary) = token by token, outputs, selections and
//       the cache rows they write;
//   (2) reference (fp32, DsaForward) on the same cache: one call = token by token, bit for bit (docs/model-dsa.md);
//   (3) the reference's selections = an independent brute-force indexer in double (own pooled keys computed from h,
//       own top-K by a linear scan), except where the brute force's K-th/(K+1)-th gap is below fp32 score rounding;
//   (4) the fast path's selections = the brute force fed the fast path's own indexer query (its int8 q_a product,
//       computed with FastContext::Linear), with the same near-tie allowance; its outputs with the reference's
//       selections forced within the W8A8 budget of the reference's;
//   (5) the latents and pooled keys the fill wrote at the boundary = the brute force's, within the int8 / fp32 error.
// The reference's old cache rows are the fast path's (the fill): what is compared is the window's own computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "base/worker_pool.h"
#include "engine/engine_core.h"
#include "fast/fast_layers.h"
#include "fast/fast_model.h"
#include "kernels/isa.h"
#include "kernels/vector_ops.h"
#include "model/dsa.h"
#include "modelgen/make_tiny.h"
#include "modelgen/random_weights.h"
#include "test_util.h"

namespace glint {
namespace {

constexpr int64_t kDsaLayer = 3;                // the preset's one DSA layer (layers 0–2 are KDA)
constexpr int64_t kBefore = 32;                 // window positions before each boundary
constexpr int64_t kWindow = 64;                 // positions B − 32 … B + 31
constexpr int64_t kFillChunk = 8192;            // rows per fill call (bounds FastDsa's pass buffers)
constexpr int64_t kContext = int64_t{1} << 20;  // the preset's max_position_embeddings

// h(p) [D]: unit-variance values, a pure function of the position (nothing stored for 2^20 rows).
void HiddenRow(int64_t position, int64_t d, float* row) {
  for (int64_t j = 0; j < d; ++j)
    row[j] = UnitBellFromBits(SplitMix64At(0x10c0, static_cast<uint64_t>(position * d + j)));
}

std::vector<float> HiddenRows(int64_t first, int64_t count, int64_t d) {
  std::vector<float> rows(count * d);  // [count, D]
  for (int64_t t = 0; t < count; ++t) HiddenRow(first + t, d, &rows[t * d]);
  return rows;
}

std::vector<double> ToDouble(const float* x, int64_t n) { return std::vector<double>(x, x + n); }

// y [rows] = W x in double; W [rows, cols] fp32.
std::vector<double> MatVec(const Matrix& w, const std::vector<double>& x) {
  std::vector<double> y(w.rows, 0.0);
  for (int64_t r = 0; r < w.rows; ++r) {
    for (int64_t k = 0; k < w.cols; ++k) y[r] += static_cast<double>(w.data[r * w.cols + k]) * x[k];
  }
  return y;
}

std::vector<double> RmsNormed(std::vector<double> x, const std::vector<float>& weight, double eps) {
  double sum = 0;
  for (double v : x) sum += v * v;
  const double inverse = 1.0 / std::sqrt(sum / static_cast<double>(x.size()) + eps);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= inverse * weight[i];
  return x;
}

double Norm(const double* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  return std::sqrt(sum);
}

// The indexer written again from the equations (model-glm53.md §7) in double, from h and the fp32 weights only:
// its own keys, pooled keys, queries, scores and top-K. Pools are added as the fill goes.
class BruteForceIndexer {
 public:
  BruteForceIndexer(const DsaWeights& w, const ModelConfig& c) : w_(w), c_(c) {}

  // Pools of positions < `tokens` (a multiple of kpool).
  void ExtendTo(int64_t tokens) {
    const int64_t d = c_.hidden_size, e = c_.index_head_dim, kpool = c_.index_kpool;
    std::vector<float> row(d);
    std::vector<double> keys(kpool * e), logits(kpool * e);  // [kpool, e] a pool's ik and ig + ape
    for (int64_t m = NumPools(); m < tokens / kpool; ++m) {
      for (int64_t j = 0; j < kpool; ++j) {
        HiddenRow(m * kpool + j, d, row.data());
        const std::vector<double> h = ToDouble(row.data(), d);
        const std::vector<double> key = LayerNormed(MatVec(w_.indexer.wk, h));
        const std::vector<double> gate = MatVec(w_.indexer.compress_gate, h);
        for (int64_t ch = 0; ch < e; ++ch) {
          keys[j * e + ch] = key[ch];
          logits[j * e + ch] = gate[ch] + w_.indexer.compress_ape.data[j * e + ch];
        }
      }
      for (int64_t ch = 0; ch < e; ++ch) {  // softmax over the pool's members, per channel
        double max_logit = -1e300, total = 0, pooled = 0;
        for (int64_t j = 0; j < kpool; ++j) max_logit = std::max(max_logit, logits[j * e + ch]);
        for (int64_t j = 0; j < kpool; ++j) total += std::exp(logits[j * e + ch] - max_logit);
        for (int64_t j = 0; j < kpool; ++j)
          pooled += std::exp(logits[j * e + ch] - max_logit) / total * keys[j * e + ch];
        pooled_.push_back(pooled);
      }
      max_pooled_norm_ = std::max(max_pooled_norm_, Norm(&pooled_[m * e], e));
    }
  }
  int64_t NumPools() const { return static_cast<int64_t>(pooled_.size()) / c_.index_head_dim; }
  const double* Pooled(int64_t m) const { return &pooled_[m * c_.index_head_dim]; }
  // c = RMSNorm(kv_a h) [kv_lora], the latent of position p.
  std::vector<double> Latent(int64_t p) const {
    std::vector<float> row(c_.hidden_size);
    HiddenRow(p, c_.hidden_size, row.data());
    return RmsNormed(MatVec(w_.kv_a_proj, ToDouble(row.data(), c_.hidden_size)), w_.kv_a_layernorm, c_.rms_norm_eps);
  }

  struct Answer {
    std::vector<int64_t> positions;  // ascending
    std::vector<double> scores;      // [visible pools]
    double kth = 0, next = 0;        // scores of the K-th and (K+1)-th best pool
    double score_scale = 0;  // Σ_h |w_h| ‖iq_h‖ max‖pk‖ / √e: the Cauchy–Schwarz bound of any |s_m|
  };

  // The query at p from the fp32 weights: iq = wq_b RMSNorm(q_a h) [I, e], w = weights_proj h · I^-1/2 [I].
  Answer Select(int64_t p) const {
    const int64_t d = c_.hidden_size;
    std::vector<float> row(d);
    HiddenRow(p, d, row.data());
    const std::vector<double> h = ToDouble(row.data(), d);
    const std::vector<double> q_resid = RmsNormed(MatVec(w_.q_a_proj, h), w_.q_a_layernorm, c_.rms_norm_eps);
    std::vector<double> head_weight = MatVec(w_.indexer.weights_proj, h);
    for (double& x : head_weight) x /= std::sqrt(static_cast<double>(c_.index_n_heads));
    return SelectWith(p, MatVec(w_.indexer.wq_b, q_resid), head_weight);
  }

  // The selection at p for a given indexer query [I, e] and head weights [I] (already scaled by I^-1/2).
  Answer SelectWith(int64_t p, const std::vector<double>& query, const std::vector<double>& head_weight) const {
    const int64_t e = c_.index_head_dim, heads = c_.index_n_heads, kpool = c_.index_kpool;
    Answer answer;
    const int64_t visible = (p + 1) / kpool;
    EXPECT_LE(visible, NumPools());
    for (int64_t m = 0; m < visible; ++m) {
      double score = 0;
      for (int64_t head = 0; head < heads; ++head) {
        double dot = 0;
        for (int64_t ch = 0; ch < e; ++ch) dot += query[head * e + ch] * pooled_[m * e + ch];
        score += head_weight[head] * std::max(dot / std::sqrt(static_cast<double>(e)), 0.0);
      }
      answer.scores.push_back(score);
    }
    for (int64_t head = 0; head < heads; ++head) {
      const double weight = std::fabs(head_weight[head]) * max_pooled_norm_ / std::sqrt(static_cast<double>(e));
      answer.score_scale += weight * Norm(&query[head * e], e);
    }
    // The K + 1 best by a linear scan with insertion: higher score first, ties to the lower pool (the model's
    // order; no NaN here).
    const int64_t k = c_.IndexTopkPools();
    std::vector<int64_t> best;
    const auto before = [&](int64_t a, int64_t b) {
      return answer.scores[a] != answer.scores[b] ? answer.scores[a] > answer.scores[b] : a < b;
    };
    for (int64_t m = 0; m < visible; ++m) {
      if (static_cast<int64_t>(best.size()) == k + 1 && !before(m, best.back())) continue;
      if (static_cast<int64_t>(best.size()) == k + 1) best.pop_back();
      best.insert(std::upper_bound(best.begin(), best.end(), m, before), m);
    }
    EXPECT_GT(static_cast<int64_t>(best.size()), k) << "the windows are far past the dense regime";
    answer.kth = answer.scores[best[k - 1]];
    answer.next = answer.scores[best[k]];
    best.pop_back();
    for (int64_t m : best) {
      for (int64_t j = 0; j < kpool; ++j) answer.positions.push_back(m * kpool + j);
    }
    for (int64_t j = visible * kpool; j <= p; ++j) answer.positions.push_back(j);  // the filling pool's tail
    std::sort(answer.positions.begin(), answer.positions.end());
    return answer;
  }

 private:
  std::vector<double> LayerNormed(std::vector<double> x) const {  // eps 1e-6, weight and bias (pitfall 9)
    const double n = static_cast<double>(x.size());
    double mean = 0, variance = 0;
    for (double v : x) mean += v / n;
    for (double v : x) variance += (v - mean) * (v - mean) / n;
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = (x[i] - mean) / std::sqrt(variance + 1e-6) * w_.indexer.k_norm_weight[i] + w_.indexer.k_norm_bias[i];
    }
    return x;
  }

  const DsaWeights& w_;
  const ModelConfig& c_;
  std::vector<double> pooled_;  // [pools, e]
  double max_pooled_norm_ = 0;
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One run of the layer over the window.
struct WindowRun {
  std::vector<float> out;                      // [W, D]
  std::vector<std::vector<int64_t>> selected;  // [W][|S|]
  std::vector<float> written;                  // the cache rows the window wrote: latents, then pooled keys
};

class LongContext : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::MakeTempDir("long_context"));
    ASSERT_TRUE(WriteTinyModelFiles(*dir_, "long-context", 0, {}).ok());
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(reference_, ReferenceModel::Load(*dir_));
    ASSERT_OK_AND_ASSIGN(fast_, FastModel::Load(*dir_, pool_));
    ASSERT_EQ(reference_->config().max_position_embeddings, kContext);
  }

  const ModelConfig& config() const { return reference_->config(); }

  // The cache rows of positions [first, first + count) (count a multiple of kpool): latents, then pooled keys.
  static std::vector<float> CacheRows(const DsaCache& cache, int64_t first, int64_t count) {
    std::vector<float> rows;
    for (int64_t p = first; p < first + count; ++p) {
      rows.insert(rows.end(), cache.LatentRow(p), cache.LatentRow(p) + cache.kv_lora_rank);
    }
    for (int64_t m = first / cache.kpool; m < (first + count) / cache.kpool; ++m) {
      rows.insert(rows.end(), cache.PooledKey(m), cache.PooledKey(m) + cache.index_head_dim);
    }
    return rows;
  }

  // FastDsa over positions [cache.tokens, cache.tokens + rows/D) in calls of `parts` rows (cycled). `forced`: per
  // row, the attended positions (null: the indexer chooses).
  WindowRun RunFast(DsaCache& cache, const std::vector<float>& hidden, const std::vector<int64_t>& parts,
                    const std::vector<std::vector<int64_t>>* forced = nullptr) {
    const int64_t d = config().hidden_size, count = static_cast<int64_t>(hidden.size()) / d, first = cache.tokens;
    FastContext ctx(pool_, BestIsa(), config());
    WindowRun run;
    run.out.resize(hidden.size());
    for (int64_t done = 0, part = 0; done < count; ++part) {
      const int64_t n = std::min(parts[part % parts.size()], count - done);
      const Segment segment{0, 0, n, cache.tokens, 0};
      DsaTrace selections;
      std::vector<const std::vector<int64_t>*> forced_rows;  // [n] per row, or empty: the indexer chooses
      if (forced != nullptr) {
        for (int64_t i = 0; i < n; ++i) forced_rows.push_back(&(*forced)[done + i]);
      }
      const Status status = FastDsa(ctx, fast_->weights().layers[kDsaLayer].dsa, &hidden[done * d], {&segment, 1},
                                    {&cache, 1}, forced_rows, &run.out[done * d], &selections);
      EXPECT_TRUE(status.ok()) << status.ToString();
      for (auto& s : selections.selected) run.selected.push_back(std::move(s));
      done += n;
    }
    run.written = CacheRows(cache, first, count);
    return run;
  }

  // DsaForward (fp32 reference, absorbed form, indexer) in calls of `part` rows.
  WindowRun RunReference(DsaCache& cache, const std::vector<float>& hidden, int64_t part) {
    const int64_t d = config().hidden_size, count = static_cast<int64_t>(hidden.size()) / d, first = cache.tokens;
    WindowRun run;
    run.out.resize(hidden.size());
    for (int64_t done = 0; done < count; done += part) {
      const int64_t n = std::min(part, count - done);
      DsaTrace trace;
      const Status status = DsaForward(reference_->weights().layers[kDsaLayer].dsa, config(), &hidden[done * d], n,
                                       cache, DsaOptions{}, &run.out[done * d], &trace);
      EXPECT_TRUE(status.ok()) << status.ToString();
      for (auto& s : trace.selected) run.selected.push_back(std::move(s));
    }
    run.written = CacheRows(cache, first, count);
    return run;
  }

  // The fast path's indexer queries for rows h [n, D], through its own products (FastContext::Linear on its
  // weights, as FastDsa computes them): iq = wq_b RMSNorm(int8 q_a h) [n, I·e], w = weights_proj h · I^-1/2 [n, I].
  void FastIndexerQueries(const std::vector<float>& hidden, std::vector<float>& query, std::vector<float>& weights) {
    const ModelConfig& c = config();
    const FastDsaWeights& w = fast_->weights().layers[kDsaLayer].dsa;
    const int64_t d = c.hidden_size, n = static_cast<int64_t>(hidden.size()) / d, e = c.index_head_dim;
    const int64_t heads = c.index_n_heads, qa_width = w.qa_kva.rows(), index_width = w.index_in.rows();
    FastContext ctx(pool_, BestIsa(), c);
    std::vector<float> qa_kva(n * qa_width), index_in(n * index_width);  // [n, q_lora + kv_lora], [n, 2e + I]
    ctx.Linear(w.qa_kva, hidden.data(), d, n, qa_kva.data(), qa_width);
    ctx.Linear(w.index_in, hidden.data(), d, n, index_in.data(), index_width);
    for (int64_t t = 0; t < n; ++t) {
      vec::RmsNorm(&qa_kva[t * qa_width], w.q_a_norm, c.q_lora_rank, c.rms_norm_eps, &qa_kva[t * qa_width]);
    }
    query.resize(n * heads * e);
    ctx.Linear(w.index_q, qa_kva.data(), qa_width, n, query.data(), heads * e);
    weights.resize(n * heads);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        weights[t * heads + h] = index_in[t * index_width + 2 * e + h] / std::sqrt(static_cast<float>(heads));
      }
    }
  }

  // Fills `cache` to `tokens` positions with FastDsa, each query attending only itself (see the file comment).
  void Fill(DsaCache& cache, int64_t tokens) {
    const int64_t d = config().hidden_size;
    while (cache.tokens < tokens) {
      const int64_t n = std::min(kFillChunk, tokens - cache.tokens);
      std::vector<std::vector<int64_t>> self(n);
      for (int64_t i = 0; i < n; ++i) self[i] = {cache.tokens + i};
      RunFast(cache, HiddenRows(cache.tokens, n, d), {n}, &self);
    }
  }

  struct WindowRuns {
    WindowRun reference, whole;  // one call each: the fp32 reference, the fast path choosing freely
    double output_error = 0;     // fast path with the reference's choices, against the reference
  };
  WindowRuns RunWindow(DsaCache& cache, const std::vector<float>& hidden, int64_t boundary);
  void CheckSelections(const BruteForceIndexer& brute, const std::vector<float>& hidden, int64_t first,
                       const WindowRuns& runs, int64_t boundary);
  void CheckWrittenRows(const DsaCache& cache, const BruteForceIndexer& brute, int64_t first, int64_t boundary);

  static std::string* dir_;
  WorkerPool pool_{2};
  std::unique_ptr<ReferenceModel> reference_;
  std::unique_ptr<FastModel> fast_;
};

std::string* LongContext::dir_ = nullptr;

// (1), (2) and the outputs of (4): every run rewinds the cache to `first` (the rows past it are rewritten before
// they are read: the speculative-decoding rollback argument) and leaves the fast path's rows in the end.
LongContext::WindowRuns LongContext::RunWindow(DsaCache& cache, const std::vector<float>& hidden, int64_t boundary) {
  const int64_t first = cache.tokens;
  WindowRuns runs;
  // (2) The reference on the same cache: one call = token by token, bit for bit.
  runs.reference = RunReference(cache, hidden, kWindow);
  cache.tokens = first;
  const WindowRun reference_steps = RunReference(cache, hidden, 1);
  cache.tokens = first;
  EXPECT_TRUE(SameBits(reference_steps.out, runs.reference.out)) << boundary;
  EXPECT_EQ(reference_steps.selected, runs.reference.selected) << boundary;
  EXPECT_TRUE(SameBits(reference_steps.written, runs.reference.written)) << boundary;

  // (4, outputs) The fast path with the reference's choices forced: the W8A8 budget of one DSA sublayer (4%, the
  // bound of fast_model_test's golden sublayer gate).
  const WindowRun forced = RunFast(cache, hidden, {kWindow}, &runs.reference.selected);
  cache.tokens = first;
  EXPECT_EQ(forced.selected, runs.reference.selected);
  runs.output_error = testing::RelativeRmsError(forced.out, runs.reference.out);
  EXPECT_LT(runs.output_error, 0.04) << boundary;

  // (1) The fast path: one call = chunks with one ending on the boundary = token by token.
  runs.whole = RunFast(cache, hidden, {kWindow});
  cache.tokens = first;
  const WindowRun chunks = RunFast(cache, hidden, {5, kBefore - 5, kWindow - kBefore});
  cache.tokens = first;
  const WindowRun steps = RunFast(cache, hidden, {1});
  EXPECT_EQ(cache.tokens, first + kWindow);
  for (const WindowRun* run : {&chunks, &steps}) {
    EXPECT_TRUE(SameBits(run->out, runs.whole.out)) << boundary;
    EXPECT_EQ(run->selected, runs.whole.selected) << boundary;
    EXPECT_TRUE(SameBits(run->written, runs.whole.written)) << boundary;
  }
  return runs;
}

// (3) and (4, selections) against the brute force, query by query: the reference's with the exact query, the fast
// path's with its own (int8 q_a) query. Both score in fp32 from pooled keys ~1e-7 relative off the brute force's; a
// choice may differ only where the K-th/(K+1)-th gap is below 1e-5 × the score bound (~10× that).
void LongContext::CheckSelections(const BruteForceIndexer& brute, const std::vector<float>& hidden, int64_t first,
                                  const WindowRuns& runs, int64_t boundary) {
  const ModelConfig& c = config();
  const int64_t heads = c.index_n_heads, e = c.index_head_dim, kpool = c.index_kpool;
  std::vector<float> fast_query, fast_weights;  // [W, I·e], [W, I]
  FastIndexerQueries(hidden, fast_query, fast_weights);
  int reference_flips = 0, fast_flips = 0, fast_differs_from_exact = 0, high_pools = 0;
  for (int64_t t = 0; t < kWindow; ++t) {
    const int64_t p = first + t;
    const BruteForceIndexer::Answer expected = brute.Select(p);
    if (runs.reference.selected[t] != expected.positions) {
      EXPECT_LT(expected.kth - expected.next, 1e-5 * expected.score_scale) << "reference, query at " << p;
      ++reference_flips;
    }
    const BruteForceIndexer::Answer fast_expected =
        brute.SelectWith(p, ToDouble(&fast_query[t * heads * e], heads * e), ToDouble(&fast_weights[t * heads], heads));
    const std::vector<int64_t>& got = runs.whole.selected[t];
    if (got != fast_expected.positions) {
      EXPECT_LT(fast_expected.kth - fast_expected.next, 1e-5 * fast_expected.score_scale) << "fast, query at " << p;
      ++fast_flips;
    }
    fast_differs_from_exact += got != runs.reference.selected[t];
    for (int64_t position : got) {  // selected pools past index 2^16 (the tail does not count)
      const int64_t pool = position / kpool;
      high_pools += pool >= (int64_t{1} << 16) && pool < VisiblePools(p, kpool) && position % kpool == 0 ? 1 : 0;
    }
  }
  EXPECT_LE(reference_flips + fast_flips, 2) << boundary;
  std::printf(
      "[boundary %lld] near-tie flips vs the brute force: reference %d, fast %d; the fast selection differs "
      "from the fp32 one at %d of %lld queries (its int8 query); %d selected pools past index 2^16; fast vs "
      "reference output %.3g with the reference's choices\n",
      static_cast<long long>(boundary), reference_flips, fast_flips, fast_differs_from_exact,
      static_cast<long long>(kWindow), high_pools, runs.output_error);
  if (boundary > (int64_t{1} << 18)) {
    EXPECT_GT(high_pools, 0) << "no pool past index 2^16 was ever chosen";
  }
}

// (5) The rows the fill and the window wrote at the boundary: latents within the int8 kv_a error (4%), pooled keys
// (bf16 weights exact, fp32 sums) within 1e-4.
void LongContext::CheckWrittenRows(const DsaCache& cache, const BruteForceIndexer& brute, int64_t first,
                                   int64_t boundary) {
  const ModelConfig& c = config();
  std::vector<float> latents, expected_latents, pooled, expected_pooled;
  for (int64_t p = first; p < first + kWindow; ++p) {
    latents.insert(latents.end(), cache.LatentRow(p), cache.LatentRow(p) + c.kv_lora_rank);
    const std::vector<double> latent = brute.Latent(p);
    expected_latents.insert(expected_latents.end(), latent.begin(), latent.end());
  }
  for (int64_t m = first / c.index_kpool; m < (first + kWindow) / c.index_kpool; ++m) {
    pooled.insert(pooled.end(), cache.PooledKey(m), cache.PooledKey(m) + c.index_head_dim);
    expected_pooled.insert(expected_pooled.end(), brute.Pooled(m), brute.Pooled(m) + c.index_head_dim);
  }
  const double latent_error = testing::RelativeRmsError(latents, expected_latents);
  const double pooled_error = testing::RelativeRmsError(pooled, expected_pooled);
  EXPECT_LT(latent_error, 0.04) << boundary;
  EXPECT_LT(pooled_error, 1e-4) << boundary;
  std::printf("[boundary %lld] cache rows off the brute force: latents %.3g, pooled keys %.3g\n",
              static_cast<long long>(boundary), latent_error, pooled_error);
}

// Each boundary in turn on one cache, filled on the way (2^20 + 32 positions: 84 MB).
TEST_F(LongContext, DsaLayerIsExactPastEveryIndexWidth) {
  const ModelConfig& c = config();
  DsaCache cache = NewDsaCache(c);
  BruteForceIndexer brute(reference_->weights().layers[kDsaLayer].dsa, c);
  for (int64_t bits : {16, 17, 18, 20}) {
    const int64_t boundary = int64_t{1} << bits;
    const int64_t first = boundary - kBefore;
    Fill(cache, first);
    ASSERT_EQ(cache.tokens, first);
    brute.ExtendTo(first + kWindow);
    const std::vector<float> hidden = HiddenRows(first, kWindow, c.hidden_size);
    const WindowRuns runs = RunWindow(cache, hidden, boundary);
    CheckSelections(brute, hidden, first, runs, boundary);
    CheckWrittenRows(cache, brute, first, boundary);
  }
}

// The last position of the context is computed; one more is refused with the limit, on both paths, before anything
// is allocated or written. (The states claim 2^20 − 1 cached positions whose caches are zero: what is checked here
// is the limit, not the values.)
TEST_F(LongContext, ModelsRefuseAPositionPastMaxPositionEmbeddings) {
  for (const Model* model : {static_cast<const Model*>(reference_.get()), static_cast<const Model*>(fast_.get())}) {
    SequenceState state = model->NewSequence();
    state.tokens = kContext - 1;
    const std::vector<int32_t> two = {1, 2};
    std::vector<EntryOutput> outputs;
    BatchEntry too_long{two, &state, LogitsWanted::kLast, false};
    EXPECT_ERROR_CONTAINS(model->Forward({&too_long, 1}, outputs),
                          "would reach 1048577 tokens; the model's maximum is 1048576 (max_position_embeddings)");
    EXPECT_EQ(state.tokens, kContext - 1);
    BatchEntry last{std::span<const int32_t>(two.data(), 1), &state, LogitsWanted::kLast, false};
    ASSERT_OK(model->Forward({&last, 1}, outputs));
    EXPECT_EQ(state.tokens, kContext);
    EXPECT_EQ(static_cast<int64_t>(outputs[0].logits.size()), config().vocab_size);
  }
}

// The engine's context is max_position_embeddings when the memory holds it; a request past it is refused naming
// the limit, and so is a --max-model-len past it.
TEST_F(LongContext, EngineContextIsMaxPositionEmbeddings) {
  EngineOptions options;
  options.memory_bytes = int64_t{256} << 20;  // 2^20 positions of 80 B are 80 MiB
  options.max_seqs = 2;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EngineCore> core, EngineCore::Create(*fast_, options));
  EXPECT_EQ(core->capacity().max_model_len, kContext);
  Request request;
  request.prompt = {1, 2, 3};
  request.stop.max_tokens = kContext - 2;
  EXPECT_ERROR_CONTAINS(core->Validate(request), "is more than the context limit of 1048576 tokens");
  options.max_model_len = kContext + 1;
  EXPECT_ERROR_CONTAINS(EngineCore::Create(*fast_, options),
                        "--max-model-len 1048577 exceeds the model's max_position_embeddings 1048576");
}

}  // namespace
}  // namespace glint
