#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "base/float_order.h"

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
  if (!(params.presence_penalty >= -2 && params.presence_penalty <= 2)) {
    return InvalidArgument("presence_penalty ", params.presence_penalty, " is invalid; expected a number in [-2, 2]");
  }
  if (!(params.frequency_penalty >= -2 && params.frequency_penalty <= 2)) {
    return InvalidArgument("frequency_penalty ", params.frequency_penalty, " is invalid; expected a number in [-2, 2]");
  }
  if (!(params.repetition_penalty > 0) || !std::isfinite(params.repetition_penalty)) {
    return InvalidArgument("repetition_penalty ", params.repetition_penalty,
                           " is invalid; expected a finite number > 0 (1 = off)");
  }
  for (const auto& [token, bias] : params.logit_bias) {
    if (token < 0) return InvalidArgument("logit_bias token ", token, " is negative");
    if (!(bias >= -100 && bias <= 100)) {
      return InvalidArgument("logit_bias for token ", token, " is ", bias, "; expected a number in [-100, 100]");
    }
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

std::vector<int32_t> TokensByLogit(std::span<const float> logits) {
  const size_t n = logits.size();
  // keys[i]: ascending = descending logit (OrderedFloatBits inverted); NaNs are left out.
  std::vector<uint32_t> keys, keys_out;
  std::vector<int32_t> order, order_out;
  keys.reserve(n), order.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) continue;
    keys.push_back(~OrderedFloatBits(logits[i]));
    order.push_back(static_cast<int32_t>(i));
  }
  keys_out.resize(keys.size()), order_out.resize(order.size());
  // LSD radix sort, 11 + 11 + 10 bits: each pass is stable, so equal logits keep their ascending ids.
  constexpr int kDigitBits = 11;
  std::vector<size_t> start(size_t{1} << kDigitBits);
  for (int shift = 0; shift < 32; shift += kDigitBits) {
    std::fill(start.begin(), start.end(), 0);
    const auto digit = [&](uint32_t key) { return (key >> shift) & ((1u << kDigitBits) - 1); };
    for (uint32_t key : keys) ++start[digit(key)];
    if (std::find(start.begin(), start.end(), keys.size()) != start.end()) continue;  // one digit: order kept
    size_t position = 0;
    for (size_t& count : start) position += std::exchange(count, position);
    for (size_t i = 0; i < keys.size(); ++i) {
      const size_t to = start[digit(keys[i])]++;
      keys_out[to] = keys[i], order_out[to] = order[i];
    }
    keys.swap(keys_out), order.swap(order_out);
  }
  return order;
}

std::vector<int32_t> TokensByLogitReference(std::span<const float> logits) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isnan(logits[i])) order.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return order;
}

int32_t Sampler::Sample(std::span<const float> logits) {
  if (params_.temperature == 0.0f) return ArgMax(logits);
  return Draw(Distribution(logits));
}

TokenDistribution Sampler::Distribution(std::span<const float> logits) const {
  if (params_.temperature == 0.0f) return {{ArgMax(logits), 1.0}};
  // Candidates sorted by logit, descending (ties: lower id first); NaN logits are never candidates. Then the
  // softmax of logit/temperature (max subtracted, double sums), top-p and min-p, renormalised over what they keep.
  std::vector<int32_t> order = TokensByLogit(logits);
  if (order.empty()) return {{0, 1.0}};
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < order.size()) order.resize(params_.top_k);
  std::vector<double> probability(order.size());
  const double top = logits[order[0]] / params_.temperature;
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    total += probability[i] = std::exp(logits[order[i]] / params_.temperature - top);
  }
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
  TokenDistribution distribution;
  for (size_t i = 0; i < keep; ++i) {
    if (probability[i] > 0) distribution.emplace_back(order[i], probability[i] / kept_mass);
  }
  if (distribution.empty()) distribution.emplace_back(order[0], 1.0);
  return distribution;
}

int32_t Sampler::Draw(const TokenDistribution& distribution) {
  GLINT_CHECK(!distribution.empty()) << "drawing from an empty distribution";
  if (distribution.size() == 1) return distribution[0].first;
  double total = 0;
  for (const auto& [token, p] : distribution) total += p;
  const double draw = std::uniform_real_distribution<double>(0.0, total)(generator_);
  double cumulative = 0;
  for (const auto& [token, p] : distribution) {
    cumulative += p;
    if (draw < cumulative) return token;
  }
  return distribution.back().first;
}

std::pair<int32_t, bool> Sampler::Verify(const TokenDistribution& target, int32_t draft,
                                         const TokenDistribution& draft_distribution) {
  const auto probability_of = [](const TokenDistribution& d, int32_t token) {
    for (const auto& [id, p] : d) {
      if (id == token) return p;
    }
    return 0.0;
  };
  const double p = probability_of(target, draft), q = probability_of(draft_distribution, draft);
  if (p >= q) return {draft, true};  // min(1, p/q) = 1 (q > 0 for a token drawn from q; q = 0 would mean p ≥ 0 too)
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(generator_);
  if (u * q < p) return {draft, true};
  // Rejected: residual r(x) = max(0, p(x) − q(x)), which is 0 at the draft (p < q there).
  std::unordered_map<int32_t, double> q_of(draft_distribution.begin(), draft_distribution.end());
  TokenDistribution residual;
  for (const auto& [token, target_p] : target) {
    const auto found = q_of.find(token);
    const double r = target_p - (found == q_of.end() ? 0.0 : found->second);
    if (r > 0) residual.emplace_back(token, r);
  }
  // Σ r = Σ max(0, q − p) ≥ q(draft) − p(draft) > 0 in exact arithmetic; only rounding could empty it.
  if (residual.empty()) return {Draw(target), false};
  return {Draw(residual), false};
}

}  // namespace glint

namespace glint {

TokenHistory::TokenHistory(std::span<const int32_t> prompt) : prompt_tokens_(prompt.begin(), prompt.end()) {
  std::sort(prompt_tokens_.begin(), prompt_tokens_.end());
  prompt_tokens_.erase(std::unique(prompt_tokens_.begin(), prompt_tokens_.end()), prompt_tokens_.end());
}

void TokenHistory::Add(int32_t generated) { ++generated_counts_[generated]; }

void ApplyPenalties(const SamplingParams& params, const TokenHistory& history, std::span<float> logits) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  const auto in_range = [vocab](int32_t token) { return token >= 0 && token < vocab; };
  if (params.repetition_penalty != 1.0f) {
    const float r = params.repetition_penalty;
    const auto penalise = [&](int32_t token) {
      float& logit = logits[token];
      logit = logit > 0 ? logit / r : logit * r;
    };
    for (int32_t token : history.prompt_tokens()) {
      if (in_range(token)) penalise(token);
    }
    for (const auto& [token, count] : history.generated_counts()) {
      // A token both in the prompt and generated is penalised once.
      if (in_range(token) &&
          !std::binary_search(history.prompt_tokens().begin(), history.prompt_tokens().end(), token)) {
        penalise(token);
      }
    }
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    for (const auto& [token, count] : history.generated_counts()) {
      if (!in_range(token)) continue;
      logits[token] -= params.frequency_penalty * static_cast<float>(count) + params.presence_penalty;
    }
  }
  for (const auto& [token, bias] : params.logit_bias) {
    if (in_range(token)) logits[token] += bias;
  }
}

void ApplyTokenMask(std::span<const uint64_t> allowed, std::span<float> logits) {
  constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
  const size_t vocab = logits.size();
  for (size_t word = 0; word * 64 < vocab; ++word) {
    const uint64_t bits = word < allowed.size() ? allowed[word] : 0;
    if (bits == ~uint64_t{0}) continue;  // a whole word allowed: the common case inside free text
    const size_t end = std::min(vocab, word * 64 + 64);
    if (bits == 0) {  // a whole word refused: the common case inside structure
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(word * 64),
                logits.begin() + static_cast<std::ptrdiff_t>(end), kMinusInfinity);
      continue;
    }
    for (size_t t = word * 64; t < end; ++t) {
      if (((bits >> (t - word * 64)) & 1) == 0) logits[t] = kMinusInfinity;
    }
  }
}

Logprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int64_t k) {
  // log softmax = x − max − log Σ exp(x − max), summed in double.
  float top = -std::numeric_limits<float>::infinity();
  for (float x : logits) {
    if (x > top) top = x;
  }
  double sum = 0;
  for (float x : logits) {
    if (!std::isnan(x)) sum += std::exp(static_cast<double>(x) - top);
  }
  const double log_normaliser = static_cast<double>(top) + std::log(sum);
  const auto logprob = [&](int32_t id) { return static_cast<float>(logits[id] - log_normaliser); };
  Logprobs result;
  result.chosen = logprob(token);
  k = std::min<int64_t>(k, static_cast<int64_t>(logits.size()));
  if (k > 0) {
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    const auto before = [&](int32_t a, int32_t b) {
      if (std::isnan(logits[a]) != std::isnan(logits[b])) return std::isnan(logits[b]);
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    for (int64_t i = 0; i < k; ++i) result.top.emplace_back(order[i], logprob(order[i]));
  }
  return result;
}

}  // namespace glint
