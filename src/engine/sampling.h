// Token sampling from one logits row: penalties, temperature, top-k, top-p (nucleus), min-p, seeded.
//
// Order follows vLLM: penalties on the raw logits (repetition, then frequency and presence), then HF's `generate`
// warpers: temperature → top-k → top-p → min-p, then a draw from the renormalised distribution. Temperature 0
// means greedy (argmax of the penalised logits, ties toward the lower id).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace glint {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  int64_t top_k = 0;         // 0 = off
  float min_p = 0.0f;        // [0, 1]
  uint64_t seed = 0;
  // Penalties (OpenAI / vLLM semantics; 0, 0 and 1 turn them off):
  float presence_penalty = 0.0f;    // [−2, 2]: logit −= p for every token generated so far
  float frequency_penalty = 0.0f;   // [−2, 2]: logit −= f × (times the token was generated so far)
  float repetition_penalty = 1.0f;  // > 0: a token in the prompt or generated so far has its logit divided by r
                                    // when positive, multiplied by r when not (HF / vLLM)
  // (token, bias) pairs added to the logit after the penalties (OpenAI's logit_bias, each in [−100, 100]; −100
  // in effect bans a token, +100 forces it). Applied wherever penalties are, so plain sampling, greedy decoding,
  // MTP drafting and speculative verification all see the same biased distribution.
  std::vector<std::pair<int32_t, float>> logit_bias = {};
};

Status ValidateSamplingParams(const SamplingParams& params);

// A distribution over token ids after the sampler's filters: (token, probability > 0), most likely first, the
// probabilities summing to 1.
using TokenDistribution = std::vector<std::pair<int32_t, double>>;

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), generator_(params.seed) {}
  bool greedy() const { return params_.temperature == 0.0f; }
  // logits: [V]. Returns a token id in [0, V).
  int32_t Sample(std::span<const float> logits);

  // Speculative decoding (docs/engine.md "Speculative decoding"):
  // The distribution Sample draws from for `logits` [V] (greedy: the argmax with probability 1).
  TokenDistribution Distribution(std::span<const float> logits) const;
  // A draw from `distribution` (non-empty) with this sampler's generator.
  int32_t Draw(const TokenDistribution& distribution);
  // Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): `draft` was drawn from `draft_distribution` q
  // and `target` p is the distribution of the same position. The draft is kept with probability
  // min(1, p(draft) / q(draft)); otherwise the token is drawn from the residual max(0, p − q), renormalised. The
  // token returned is then distributed exactly as p, whatever q is. Returns (token, draft kept).
  std::pair<int32_t, bool> Verify(const TokenDistribution& target, int32_t draft,
                                  const TokenDistribution& draft_distribution);

 private:
  SamplingParams params_;
  std::mt19937_64 generator_;
};

// The token ids of `logits` sorted by logit, descending, equal logits (−0 = +0 included) by ascending id; NaN
// logits left out. A stable LSD radix sort of the logits' ordered bits: O(V), where a comparison sort of the
// 154,880-token vocabulary per sampled token took 13 ms (the sampler's whole cost at 16 sequences).
std::vector<int32_t> TokensByLogit(std::span<const float> logits);
// The specification: std::stable_sort of the ascending non-NaN ids by logit, descending.
std::vector<int32_t> TokensByLogitReference(std::span<const float> logits);

// Index of the largest value; ties toward the lower index; NaN never wins.
int32_t ArgMax(std::span<const float> values);

// The tokens a sequence has seen, for the penalties.
class TokenHistory {
 public:
  explicit TokenHistory(std::span<const int32_t> prompt);
  void Add(int32_t generated);
  const std::vector<int32_t>& prompt_tokens() const { return prompt_tokens_; }  // distinct, ascending
  const std::unordered_map<int32_t, int32_t>& generated_counts() const { return generated_counts_; }

 private:
  std::vector<int32_t> prompt_tokens_;
  std::unordered_map<int32_t, int32_t> generated_counts_;
};

// Applies the penalties and then the logit bias of `params` to `logits` [V] in place (a no-op when they are off).
// Bias entries for ids outside [0, V) are ignored (the engine refuses them at submission).
void ApplyPenalties(const SamplingParams& params, const TokenHistory& history, std::span<float> logits);

// Structured output (docs/server.md "Structured output"): every token outside `allowed` (a bitset over [V], bit
// t % 64 of word t / 64) gets logit −inf, so it has probability exactly 0 for every sampler step (greedy, top-k,
// top-p, min-p, the draw and speculative verification) and the choice is made among the allowed tokens only.
// Applied after the penalties, before the sampler.
void ApplyTokenMask(std::span<const uint64_t> allowed, std::span<float> logits);

// log softmax of `logits` [V] at `token`, and the `k` most likely tokens (ties toward the lower id).
struct Logprobs {
  float chosen = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // [k] (token, logprob), most likely first
};
Logprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int64_t k);

}  // namespace glint
