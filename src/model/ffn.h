// FFN sublayers (model-glm53.md §8): clamped SwiGLU MLP (dense layers, shared and routed experts) and the
// sigmoid-routed MoE with `e_score_correction_bias` used for the choice only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dist/sharding.h"
#include "io/config.h"
#include "model/weights.h"

namespace glint {

// §8.1, one token: g = min(W_gate x, limit); u = clamp(W_up x, −limit, limit); y = W_down(silu(g) · u).
// The gate is clamped above only, the up projection on both sides (pitfall 6).   x: [D], y: [D]
void SwiGluMlp(const MlpWeights& w, float swiglu_limit, const float* x, float* y);

// The routing decision of one token (§8.2).
struct RouterChoice {
  std::vector<int32_t> experts;  // [k] ascending expert id
  std::vector<float> weights;    // [k] normalised unbiased sigmoid scores × routed_scaling_factor, aligned
  float margin = 0;              // choice-score gap between the k-th and (k+1)-th expert (+inf when k = E)
};

// Router, all fp32: s = sigmoid(W_router x); choose the top-k of s + bias (ties toward the lower id; NaN scores
// rank last, so a NaN never selects an out-of-range expert, pitfall 14); weights from the UNBIASED s.
RouterChoice Route(const MoeWeights& w, const ModelConfig& c, const float* x);

// The router from its logits [E] = W_router x (computed elsewhere, e.g. by a fast kernel): the same choice rule.
RouterChoice RouteFromLogits(const float* logits, const float* bias, const ModelConfig& c);

// Weights for given experts (ascending) from the router logits [E]: normalised unbiased sigmoid scores ×
// routed_scaling_factor, as Route computes them for its own choice. Used when the experts are forced.
std::vector<float> RouterWeights(const float* logits, const std::vector<int32_t>& experts, const ModelConfig& c);

// §8.3: Σ_k weight_k · Expert_k(x) + Σ shared(x). With `forced` the router's choice is replaced (the fast path's
// quality gate forces the fp32 path's discrete choices). With `local` (expert parallel, sharding.h) only the
// chosen experts this rank holds are added: y is this rank's partial sum, the returned choice is the whole one.
//   x: [D], y: [D]
RouterChoice MoeForward(const MoeWeights& w, const ModelConfig& c, const float* x, float* y,
                        const RouterChoice* forced = nullptr, const LocalExperts& local = {});

}  // namespace glint
