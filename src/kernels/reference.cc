#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "quant/formats.h"

namespace glint::ref {

double Dot(const float* a, const float* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

void Linear(const float* x, int64_t tokens, const float* weight, int64_t out, int64_t in, float* y) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = x + t * in;
    for (int64_t o = 0; o < out; ++o) y[t * out + o] = static_cast<float>(Dot(weight + o * in, row, in));
  }
}

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  const double mean_square = Dot(x, x, n) / static_cast<double>(n);
  const double inverse = 1.0 / std::sqrt(mean_square + eps);
  for (int64_t i = 0; i < n; ++i) {
    const double normed = x[i] * inverse;
    y[i] = static_cast<float>(weight ? normed * weight[i] : normed);
  }
}

void LayerNorm(const float* x, const float* weight, const float* bias, int64_t n, float eps, float* y) {
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double variance = 0;  // centred two-pass variance: no cancellation (model card §12)
  for (int64_t i = 0; i < n; ++i) variance += (x[i] - mean) * (x[i] - mean);
  variance /= static_cast<double>(n);
  const double inverse = 1.0 / std::sqrt(variance + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>((x[i] - mean) * inverse * weight[i] + bias[i]);
}

void Softmax(float* values, int64_t n) {
  if (n <= 0) return;
  const float max_value = *std::max_element(values, values + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    values[i] = std::exp(values[i] - max_value);
    sum += values[i];
  }
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(values[i] / sum);
}

void KdaRecurrent(double* state, const float* q, const float* k, const float* v, const float* g, int64_t qk_stride,
                  int64_t v_stride, const float* beta, int64_t beta_stride, int64_t tokens, int64_t dk, int64_t dv,
                  double* o) {
  std::vector<double> u(dv);
  for (int64_t t = 0; t < tokens; ++t) {
    const float *q_t = q + t * qk_stride, *k_t = k + t * qk_stride, *g_t = g + t * qk_stride, *v_t = v + t * v_stride;
    for (int64_t key = 0; key < dk; ++key) {
      const double alpha = std::exp(static_cast<double>(g_t[key]));
      for (int64_t j = 0; j < dv; ++j) state[key * dv + j] *= alpha;
    }
    std::fill(u.begin(), u.end(), 0.0);
    for (int64_t key = 0; key < dk; ++key) {
      for (int64_t j = 0; j < dv; ++j) u[j] += state[key * dv + j] * k_t[key];
    }
    for (int64_t j = 0; j < dv; ++j) u[j] = beta[t * beta_stride] * (v_t[j] - u[j]);
    for (int64_t key = 0; key < dk; ++key) {
      for (int64_t j = 0; j < dv; ++j) state[key * dv + j] += k_t[key] * u[j];
    }
    double* o_t = o + t * v_stride;
    std::fill(o_t, o_t + dv, 0.0);
    for (int64_t key = 0; key < dk; ++key) {
      for (int64_t j = 0; j < dv; ++j) o_t[j] += state[key * dv + j] * q_t[key];
    }
  }
}

namespace {

// p[i] = softmax_i(scale · q · rows[i]) over the count rows, in double.
void AttentionWeights(const float* q, const float* const* rows, int64_t count, int64_t rank, double scale, double* p) {
  double max_score = -INFINITY;
  for (int64_t i = 0; i < count; ++i) {
    p[i] = scale * Dot(q, rows[i], rank);
    max_score = std::max(max_score, p[i]);
  }
  double sum = 0;
  for (int64_t i = 0; i < count; ++i) sum += (p[i] = std::exp(p[i] - max_score));
  for (int64_t i = 0; i < count; ++i) p[i] /= sum;
}

}  // namespace

void LatentAttention(const float* q_latent, int64_t heads, int64_t rank, const float* const* rows, int64_t count,
                     double scale, double* out) {
  std::vector<double> p(count);
  for (int64_t h = 0; h < heads; ++h) {
    AttentionWeights(q_latent + h * rank, rows, count, rank, scale, p.data());
    double* o = out + h * rank;
    std::fill(o, o + rank, 0.0);
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t r = 0; r < rank; ++r) o[r] += p[i] * rows[i][r];
    }
  }
}

void LatentAttentionBf16(const float* q_latent, int64_t heads, int64_t rank, const float* const* rows, int64_t count,
                         double scale, double* out, double* probabilities) {
  std::vector<float> q(heads * rank), c(count * rank);
  std::vector<const float*> c_rows(count);
  for (int64_t k = 0; k < heads * rank; ++k) q[k] = RoundToBf16(q_latent[k]);
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t r = 0; r < rank; ++r) c[i * rank + r] = RoundToBf16(rows[i][r]);
    c_rows[i] = c.data() + i * rank;
  }
  std::vector<double> p(count);
  for (int64_t h = 0; h < heads; ++h) {
    AttentionWeights(q.data() + h * rank, c_rows.data(), count, rank, scale, p.data());
    double* o = out + h * rank;
    std::fill(o, o + rank, 0.0);
    for (int64_t i = 0; i < count; ++i) {
      if (probabilities != nullptr) probabilities[h * count + i] = p[i];
      const double rounded = RoundToBf16(static_cast<float>(p[i]));
      for (int64_t r = 0; r < rank; ++r) o[r] += rounded * c_rows[i][r];
    }
  }
}

void IndexerScores(const float* query, const float* head_weights, const float* pooled, int64_t pools, int64_t heads,
                   int64_t dim, double scale, double* scores) {
  for (int64_t m = 0; m < pools; ++m) {
    double score = 0;
    for (int64_t h = 0; h < heads; ++h) {
      score += head_weights[h] * std::max(0.0, scale * Dot(query + h * dim, pooled + m * dim, dim));
    }
    scores[m] = score;
  }
}

}  // namespace glint::ref
