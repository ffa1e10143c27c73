#include "model/ffn.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/reference.h"

namespace glint {

void SwiGluMlp(const MlpWeights& w, float swiglu_limit, const float* x, float* y) {
  const int64_t width = w.gate_proj.rows;
  const int64_t hidden = w.gate_proj.cols;
  std::vector<float> gate(width), up(width);  // [width]
  ref::Linear(x, 1, w.gate_proj.data.data(), width, hidden, gate.data());
  ref::Linear(x, 1, w.up_proj.data.data(), width, hidden, up.data());
  for (int64_t i = 0; i < width; ++i) {
    const float g = std::min(gate[i], swiglu_limit);
    const float u = std::clamp(up[i], -swiglu_limit, swiglu_limit);
    gate[i] = ref::Silu(g) * u;
  }
  ref::Linear(gate.data(), 1, w.down_proj.data.data(), hidden, width, y);
}

RouterChoice Route(const MoeWeights& w, const ModelConfig& c, const float* x) {
  std::vector<float> logits(c.n_routed_experts);  // [E]
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    logits[e] = static_cast<float>(ref::Dot(w.router.Row(e), x, c.hidden_size));
  }
  return RouteFromLogits(logits.data(), w.e_score_correction_bias.data(), c);
}

std::vector<float> RouterWeights(const float* logits, const std::vector<int32_t>& experts, const ModelConfig& c) {
  double sum = 0;
  for (int32_t e : experts) sum += ref::Sigmoid(logits[e]);
  std::vector<float> weights;
  for (int32_t e : experts) {
    const double score = ref::Sigmoid(logits[e]);
    const double normalised = c.norm_topk_prob ? score / (sum + 1e-20) : score;
    weights.push_back(static_cast<float>(normalised * c.routed_scaling_factor));
  }
  return weights;
}

RouterChoice RouteFromLogits(const float* logits, const float* bias, const ModelConfig& c) {
  const int64_t experts = c.n_routed_experts;
  const int64_t k = c.num_experts_per_tok;
  std::vector<float> choice(experts);  // [E] sigmoid(logit) + bias, for the choice only
  for (int64_t e = 0; e < experts; ++e) {
    choice[e] = ref::Sigmoid(logits[e]) + bias[e];
    if (std::isnan(choice[e])) choice[e] = -std::numeric_limits<float>::infinity();
  }
  std::vector<int32_t> order(experts);
  std::iota(order.begin(), order.end(), 0);
  // Descending choice score, ties toward the lower expert id.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return choice[a] > choice[b]; });
  RouterChoice out;
  out.margin = k < experts ? choice[order[k - 1]] - choice[order[k]] : std::numeric_limits<float>::infinity();
  out.experts.assign(order.begin(), order.begin() + k);
  std::sort(out.experts.begin(), out.experts.end());
  out.weights = RouterWeights(logits, out.experts, c);
  return out;
}

RouterChoice MoeForward(const MoeWeights& w, const ModelConfig& c, const float* x, float* y, const RouterChoice* forced,
                        const LocalExperts& local) {
  const int64_t hidden = c.hidden_size;
  RouterChoice choice = forced != nullptr ? *forced : Route(w, c, x);
  std::vector<double> sum(hidden, 0.0);
  std::vector<float> expert_out(hidden);  // [D]
  // Ascending expert id, shared expert last: the accumulation order of HF's index_add_ (§8.3).
  for (size_t i = 0; i < choice.experts.size(); ++i) {
    if (!local.routed.Holds(choice.experts[i])) continue;  // another rank's expert
    SwiGluMlp(w.experts[choice.experts[i]], c.swiglu_limit, x, expert_out.data());
    for (int64_t d = 0; d < hidden; ++d) sum[d] += static_cast<double>(choice.weights[i]) * expert_out[d];
  }
  for (const MlpWeights& shared : w.shared) {
    if (!local.shared) break;
    SwiGluMlp(shared, c.swiglu_limit, x, expert_out.data());
    for (int64_t d = 0; d < hidden; ++d) sum[d] += expert_out[d];
  }
  for (int64_t d = 0; d < hidden; ++d) y[d] = static_cast<float>(sum[d]);
  return choice;
}

}  // namespace glint
