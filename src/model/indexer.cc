#include "model/indexer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "base/float_order.h"
#include "kernels/indexer_ops.h"
#include "kernels/reference.h"

namespace glint {
namespace {

// LayerNorm eps of the indexer key norm: hard-coded 1e-6 in HF, not rms_norm_eps (pitfall 9).
constexpr float kKeyNormEps = 1e-6f;

Status CheckMatrix(const Matrix& m, const char* name, int64_t rows, int64_t cols) {
  if (m.rows != rows || m.cols != cols || static_cast<int64_t>(m.data.size()) != rows * cols) {
    return InvalidArgument("indexer weight ", name, " is [", m.rows, ", ", m.cols, "] with ", m.data.size(),
                           " values; the config needs [", rows, ", ", cols, "]");
  }
  return Status::Ok();
}

Status CheckVector(const std::vector<float>& v, const char* name, int64_t size) {
  if (static_cast<int64_t>(v.size()) != size) {
    return InvalidArgument("indexer weight ", name, " has ", v.size(), " values; the config needs ", size);
  }
  return Status::Ok();
}

// True when pool a ranks before pool b: the total order of SelectTopPools.
bool RanksBefore(float score_a, int64_t a, float score_b, int64_t b) {
  const bool nan_a = std::isnan(score_a), nan_b = std::isnan(score_b);
  if (nan_a != nan_b) return nan_b;  // a number beats NaN
  if (!nan_a && score_a != score_b) return score_a > score_b;
  return a < b;  // equal scores (or both NaN): lower index first
}

}  // namespace

Status ValidateIndexerWeights(const IndexerWeights& w, const ModelConfig& c) {
  const int64_t e = c.index_head_dim;
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.wq_b, "wq_b", c.index_n_heads * e, c.q_lora_rank));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.wk, "wk", e, c.hidden_size));
  GLINT_RETURN_IF_ERROR(CheckVector(w.k_norm_weight, "k_norm.weight", e));
  GLINT_RETURN_IF_ERROR(CheckVector(w.k_norm_bias, "k_norm.bias", e));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.weights_proj, "weights_proj", c.index_n_heads, c.hidden_size));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.compress_gate, "index_kpool_compress_gate", e, c.hidden_size));
  return CheckMatrix(w.compress_ape, "index_kpool_compress_ape", c.index_kpool, e);
}

void PoolKeys(const float* keys, const float* gates, const float* ape, int64_t kpool, int64_t head_dim, float* pooled) {
  std::vector<float> weight(kpool);  // [kpool] softmax over the pool's members, one channel at a time
  for (int64_t c = 0; c < head_dim; ++c) {
    for (int64_t j = 0; j < kpool; ++j) weight[j] = gates[j * head_dim + c] + ape[j * head_dim + c];
    ref::Softmax(weight.data(), kpool);
    double sum = 0;
    for (int64_t j = 0; j < kpool; ++j) sum += static_cast<double>(weight[j]) * keys[j * head_dim + c];
    pooled[c] = static_cast<float>(sum);
  }
}

void AppendIndexerKeys(const IndexerWeights& w, const ModelConfig& config, const float* hidden, int64_t tokens,
                       const DsaCache& cache) {
  const int64_t d = config.hidden_size, e = config.index_head_dim, kpool = config.index_kpool;
  std::vector<float> keys(kpool * e), gates(kpool * e);  // [kpool, e] the completing pool's rows
  std::vector<float> key(e), gate(e), pooled(e);         // [e] each
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t position = cache.tokens + t;
    const int64_t row = position % kpool;  // row within the filling pool
    const float* h = hidden + t * d;
    ref::Linear(h, 1, w.wk.data.data(), e, d, key.data());
    ref::LayerNorm(key.data(), w.k_norm_weight.data(), w.k_norm_bias.data(), e, kKeyNormEps, key.data());
    ref::Linear(h, 1, w.compress_gate.data.data(), e, d, gate.data());
    if (row < kpool - 1) {  // the pool is still filling: keep the raw rows in the slot
      std::copy(key.begin(), key.end(), cache.PendingKey(row));
      std::copy(gate.begin(), gate.end(), cache.PendingGate(row));
      continue;
    }
    // The pool completes on this token: its key is final (§7.5), the pending rows are no longer needed.
    for (int64_t j = 0; j < kpool - 1; ++j) {
      std::copy_n(cache.PendingKey(j), e, &keys[j * e]);
      std::copy_n(cache.PendingGate(j), e, &gates[j * e]);
    }
    std::copy(key.begin(), key.end(), &keys[(kpool - 1) * e]);
    std::copy(gate.begin(), gate.end(), &gates[(kpool - 1) * e]);
    PoolKeys(keys.data(), gates.data(), w.compress_ape.data.data(), kpool, e, pooled.data());
    cache.StorePooledKey(position / kpool, pooled.data());
  }
}

void IndexerQuery(const IndexerWeights& w, const ModelConfig& config, const float* q_resid, const float* hidden,
                  float* query, float* head_weights) {
  const int64_t heads = config.index_n_heads;
  ref::Linear(q_resid, 1, w.wq_b.data.data(), heads * config.index_head_dim, config.q_lora_rank, query);
  ref::Linear(hidden, 1, w.weights_proj.data.data(), heads, config.hidden_size, head_weights);
  const double head_scale = 1.0 / std::sqrt(static_cast<double>(heads));  // I^-1/2
  for (int64_t h = 0; h < heads; ++h) head_weights[h] = static_cast<float>(head_weights[h] * head_scale);
}

void ScorePools(const float* query, const float* head_weights, const float* pooled, int64_t num_pools,
                int64_t num_heads, int64_t head_dim, float* scores) {
  const double dot_scale = 1.0 / std::sqrt(static_cast<double>(head_dim));  // e^-1/2, applied before the ReLU
  for (int64_t m = 0; m < num_pools; ++m) {
    const float* key = pooled + m * head_dim;
    double score = 0;
    for (int64_t h = 0; h < num_heads; ++h) {
      const double logit = ref::Dot(query + h * head_dim, key, head_dim) * dot_scale;
      score += static_cast<double>(head_weights[h]) * std::max(logit, 0.0);
    }
    scores[m] = static_cast<float>(score);
  }
}

PoolSelection SelectTopPools(std::span<const float> scores, int64_t k) {
  const int64_t n = static_cast<int64_t>(scores.size());
  PoolSelection selection;
  if (k >= n) {
    selection.pools.resize(n);
    std::iota(selection.pools.begin(), selection.pools.end(), int64_t{0});
    selection.margin = std::numeric_limits<float>::infinity();
    return selection;
  }
  GLINT_CHECK(k > 0) << "SelectTopPools needs k ≥ 1, got " << k;
  std::vector<int64_t> order(n);  // [n] pool indices, the first k+1 ranked by the total order
  std::iota(order.begin(), order.end(), int64_t{0});
  const auto before = [&](int64_t a, int64_t b) { return RanksBefore(scores[a], a, scores[b], b); };
  std::partial_sort(order.begin(), order.begin() + k + 1, order.end(), before);
  selection.margin = scores[order[k - 1]] - scores[order[k]];  // NaN if either is NaN
  selection.pools.assign(order.begin(), order.begin() + k);
  std::sort(selection.pools.begin(), selection.pools.end());
  return selection;
}

uint64_t PoolOrderKey(float score, int64_t pool) {
  return (uint64_t{OrderedFloatBits(score)} << 32) | (0xffffffffu - static_cast<uint32_t>(pool));
}

PoolSelection SelectTopPoolsFromKeys(std::span<const float> scores, int64_t k, std::span<uint64_t> keys) {
  GLINT_CHECK(k > 0 && static_cast<int64_t>(keys.size()) > k)
      << "SelectTopPoolsFromKeys needs 1 ≤ k < keys, got " << k << ", " << keys.size();
  // keys[0..k] become the k+1 best (any order among the first k), keys[k] the (k+1)-th.
  std::nth_element(keys.begin(), keys.begin() + k, keys.end(), std::greater<uint64_t>());
  const auto index_of = [](uint64_t key) { return static_cast<int64_t>(0xffffffffu - static_cast<uint32_t>(key)); };
  const uint64_t kth = *std::min_element(keys.begin(), keys.begin() + k);  // the K-th best
  PoolSelection selection;
  selection.margin = scores[index_of(kth)] - scores[index_of(keys[k])];
  selection.pools.resize(k);
  for (int64_t i = 0; i < k; ++i) selection.pools[i] = index_of(keys[i]);
  std::sort(selection.pools.begin(), selection.pools.end());
  return selection;
}

PoolSelection SelectTopPoolsLinear(std::span<const float> scores, int64_t k, std::vector<uint64_t>& keys) {
  const int64_t n = static_cast<int64_t>(scores.size());
  if (k >= n) return SelectTopPools(scores, k);
  GLINT_CHECK(k > 0 && n < (int64_t{1} << 32)) << "SelectTopPoolsLinear needs 1 ≤ k < n < 2^32, got " << k << ", " << n;
  keys.resize(n);
  for (int64_t m = 0; m < n; ++m) keys[m] = PoolOrderKey(scores[m], m);
  return SelectTopPoolsFromKeys(scores, k, keys);
}

void TopKeyCollector::Reset(int64_t keep) {
  keep_ = keep;
  floor_ = 0;  // every key is ≥ 1 (the index half is ~m with m < 2^32 − 1), so all pass until the first cut
  floor_nan_ = true;
  keys_.clear();
  keys_.reserve(4 * keep);
}

void TopKeyCollector::Add(const float* scores, int64_t first_pool, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    // Once a cut has set a floor, the score half of a key ≥ the floor's is exactly score ≥ floor_value_ (the
    // map is monotone, ±0 equal on both sides, a NaN fails): a vector compare skips the scores below it, almost
    // all of them, without building keys. Before the first cut, and while the floor is a NaN's key (a NaN of
    // lower index ranks above it, and no float compare says so), every score goes to the key compare.
    if (!floor_nan_) i += indexer::FirstAtLeast(scores + i, count - i, floor_value_);
    if (i == count) break;
    const uint64_t key = PoolOrderKey(scores[i], first_pool + i);
    if (key <= floor_) continue;
    keys_.push_back(key);
    if (static_cast<int64_t>(keys_.size()) >= 4 * keep_) Cut();
  }
}

void TopKeyCollector::Cut() {
  // Keep the `keep_` best; the worst of them is the new floor (a key below it cannot be among the best keep_).
  std::nth_element(keys_.begin(), keys_.begin() + (keep_ - 1), keys_.end(), std::greater<uint64_t>());
  keys_.resize(keep_);
  floor_ = keys_[keep_ - 1];
  // The score of the floor's key (its pool's score, +0 for a zero); a NaN floor is flagged instead.
  floor_nan_ = (floor_ >> 32) == 0;
  floor_value_ = floor_nan_ ? 0.0f : FloatOfOrderedBits(static_cast<uint32_t>(floor_ >> 32));
}

std::vector<int64_t> ExpandPools(std::span<const int64_t> pools, int64_t position, int64_t kpool) {
  std::vector<int64_t> positions;
  positions.reserve(pools.size() * kpool + kpool);
  for (int64_t m : pools) {
    for (int64_t j = 0; j < kpool; ++j) positions.push_back(m * kpool + j);
  }
  for (int64_t j = VisiblePools(position, kpool) * kpool; j <= position; ++j) positions.push_back(j);
  return positions;
}

IndexerSelection IndexerSelect(const ModelConfig& config, const DsaCache& cache, const float* query,
                               const float* head_weights, int64_t position) {
  const int64_t visible = VisiblePools(position, config.index_kpool);
  GLINT_CHECK(visible <= cache.NumPools()) << "query at " << position << " sees pools not yet cached";
  PoolSelection pools;
  if (visible <= config.IndexTopkPools()) {  // dense regime: every visible pool, exactly tokens 0..position
    pools.pools.resize(visible);
    std::iota(pools.pools.begin(), pools.pools.end(), int64_t{0});
    pools.margin = std::numeric_limits<float>::infinity();
  } else {
    std::vector<float> scores(visible);  // [visible]
    const int64_t pools_per_block = cache.block_tokens / cache.kpool, e = config.index_head_dim;
    std::vector<float> keys(pools_per_block * e);  // [pools of a block, e] decoded from the cache's dtype
    for (int64_t first = 0; first < visible;) {
      const int64_t count = std::min(pools_per_block - first % pools_per_block, visible - first);
      for (int64_t m = 0; m < count; ++m) cache.LoadPooledKey(first + m, keys.data() + m * e);
      ScorePools(query, head_weights, keys.data(), count, config.index_n_heads, e, &scores[first]);
      first += count;
    }
    pools = SelectTopPools(scores, config.IndexTopkPools());
  }
  IndexerSelection selection;
  selection.positions = ExpandPools(pools.pools, position, config.index_kpool);
  selection.margin = pools.margin;
  return selection;
}

}  // namespace glint
