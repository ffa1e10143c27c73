#include "kernels/reference.h"

#include <algorithm>

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

}  // namespace glint::ref
