// mHC: manifold-constrained hyper-connections, hc_mult residual streams (model-glm53.md §4).
//
// Each sublayer site (attention, FFN) reads the streams through `pre` weights, runs the sublayer on the collapsed
// vector, and writes back through `post` weights plus a doubly-stochastic stream mixing matrix `comb` (softmax,
// then Sinkhorn). All coefficient math in fp32 (double for the long reductions) as in HF.
#pragma once

#include <cstdint>
#include <vector>

#include "io/config.h"
#include "model/weights.h"

namespace glint {

// Per-token coefficients of one site. hc = hc_mult.
struct MhcCoefficients {
  std::vector<float> pre;   // [hc]        read weights: sigmoid(·) + hc_eps
  std::vector<float> post;  // [hc]        write weights of the sublayer output: 2·sigmoid(·) ∈ (0, 2)
  std::vector<float> comb;  // [hc, hc]    comb[j·hc + k]: weight of source stream j in destination stream k
};

// §4.1. streams: [hc, D] of one token.
MhcCoefficients MhcComputeCoefficients(const MhcWeights& w, const ModelConfig& c, const float* streams);

// §4.1 from the projection onward: mix [(2 + hc)·hc] = (fn · xf) · r already computed (the fast path computes it with
// its own kernels); base [(2 + hc)·hc], scale [3].
MhcCoefficients MhcCoefficientsFromMix(const double* mix, const float* base, const float* scale, const ModelConfig& c);

// §4.2: h[d] = Σ_s pre[s] · streams[s, d].   streams: [hc, D], h: [D]
void MhcRead(const MhcCoefficients& coefficients, const float* streams, int64_t hc, int64_t hidden, float* h);

// §4.3: streams'[k] = post[k] · y + Σ_j comb[j][k] · streams[j], in place.   streams: [hc, D], y: [D]
void MhcWrite(const MhcCoefficients& coefficients, const float* y, int64_t hc, int64_t hidden, float* streams);

// §4.5: the unweighted mean of the streams.   streams: [hc, D], out: [D]
void MhcCollapseMean(const float* streams, int64_t hc, int64_t hidden, float* out);

}  // namespace glint
