#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace glint {

Status ValidateSamplingParams(const SamplingParams& params) {
  if (!(params.temperature >= 0) || !std::isfinite(params.temperature)) {
    return InvalidArgument("temperature ", params.temperature, " is invalid; expected a finite number >= 0");
  }
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    return InvalidArgument("top_p ", params.top_p, " is invalid; expected a number in (0, 1]");
  }
  if (params.top_k < 0) return InvalidArgument("top_k ", params.top_k, " is invalid; expected >= 0 (0 = off)");
  if (!(params.min_p >= 0 && params.min_p <= 1)) {
    return InvalidArgument("min_p ", params.min_p, " is invalid; expected a number in [0, 1]");
  }
  return Status::Ok();
}

int32_t ArgMax(std::span<const float> values) {
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best] || std::isnan(values[best])) best = static_cast<int32_t>(i);
  }
  return best;
}

int32_t Sampler::Sample(std::span<const float> logits) {
  if (params_.temperature == 0.0f) return ArgMax(logits);
  // Candidates sorted by logit, descending (ties: lower id first); NaN logits are never candidates.
  std::vector<int32_t> order;
  order.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isnan(logits[i])) order.push_back(static_cast<int32_t>(i));
  }
  if (order.empty()) return 0;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < order.size()) order.resize(params_.top_k);
  // Softmax of logit/temperature over the remaining candidates (max subtracted; double sums).
  std::vector<double> probability(order.size());
  const double top = logits[order[0]] / params_.temperature;
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) total += probability[i] = std::exp(logits[order[i]] / params_.temperature - top);
  for (double& p : probability) p /= total;
  // Nucleus: the smallest prefix whose mass reaches top_p (at least one token).
  size_t keep = order.size();
  if (params_.top_p < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      mass += probability[i];
      if (mass >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  // min-p: drop tokens below min_p × the most likely token's probability.
  if (params_.min_p > 0) {
    const double floor = params_.min_p * probability[0];
    while (keep > 1 && probability[keep - 1] < floor) --keep;
  }
  double kept_mass = 0;
  for (size_t i = 0; i < keep; ++i) kept_mass += probability[i];
  const double draw = std::uniform_real_distribution<double>(0.0, kept_mass)(generator_);
  double cumulative = 0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probability[i];
    if (draw < cumulative) return order[i];
  }
  return order[keep - 1];
}

}  // namespace glint
