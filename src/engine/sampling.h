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
};

Status ValidateSamplingParams(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), generator_(params.seed) {}
  // logits: [V]. Returns a token id in [0, V).
  int32_t Sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 generator_;
};

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

// Applies the penalties of `params` to `logits` [V] in place (a no-op when they are off).
void ApplyPenalties(const SamplingParams& params, const TokenHistory& history, std::span<float> logits);

// log softmax of `logits` [V] at `token`, and the `k` most likely tokens (ties toward the lower id).
struct Logprobs {
  float chosen = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // [k] (token, logprob), most likely first
};
Logprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int64_t k);

}  // namespace glint
