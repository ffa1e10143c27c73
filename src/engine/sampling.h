// Token sampling from one logits row: temperature, top-k, top-p (nucleus), min-p, seeded.
//
// Order of the filters follows HF's `generate` warpers: temperature → top-k → top-p → min-p, then a draw from
// the renormalised distribution. Temperature 0 means greedy (argmax, ties toward the lower id).
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "base/status.h"

namespace glint {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  int64_t top_k = 0;         // 0 = off
  float min_p = 0.0f;        // [0, 1]
  uint64_t seed = 0;
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

}  // namespace glint
