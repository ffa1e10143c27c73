// The KDA kernels (kernels/kda_ops.h) on every compiled Highway target against the double recurrent rule: the fused
// decode step token by token and the chunked form for chunk lengths across the 16-token sub-blocks, from a non-zero
// state, with decays from strong (g = −5, the lower bound) to none. Bound: relative RMS error ≤ 4e-6 on outputs and
// state, 10× the worst measured (3.8e-7; fp32 rounding through exp of in-chunk sums reaching |G| = 320).
#include "kernels/kda_ops.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "kernels/reference.h"

namespace glint {
namespace {

struct Inputs {
  int64_t n, dk, dv;
  std::vector<float> q, k, v, g, beta;  // q, k, g [n, dk]; v [n, dv]; beta [n]
  std::vector<float> state;             // [dk, dv]
};

Inputs MakeInputs(int64_t n, int64_t dk, int64_t dv, uint32_t seed, float decay_scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  Inputs in{n,
            dk,
            dv,
            std::vector<float>(n * dk),
            std::vector<float>(n * dk),
            std::vector<float>(n * dv),
            std::vector<float>(n * dk),
            std::vector<float>(n),
            std::vector<float>(dk * dv)};
  for (int64_t t = 0; t < n; ++t) {
    double nq = 0, nk = 0;
    for (int64_t c = 0; c < dk; ++c) {
      in.q[t * dk + c] = normal(rng), in.k[t * dk + c] = normal(rng);
      nq += in.q[t * dk + c] * in.q[t * dk + c], nk += in.k[t * dk + c] * in.k[t * dk + c];
      // g = −5 · sigmoid(·): from the lower bound to ≈0, scaled to test weak and strong decay.
      in.g[t * dk + c] = -decay_scale * uniform(rng);
    }
    for (int64_t c = 0; c < dk; ++c) in.q[t * dk + c] /= std::sqrt(nq) * std::sqrt(static_cast<double>(dk));
    for (int64_t c = 0; c < dk; ++c) in.k[t * dk + c] /= std::sqrt(nk);
    for (int64_t c = 0; c < dv; ++c) in.v[t * dv + c] = normal(rng);
    in.beta[t] = uniform(rng);
  }
  for (float& s : in.state) s = 0.3f * normal(rng);
  return in;
}

double RelativeRms(const std::vector<float>& a, const std::vector<double>& b) {
  double error = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) error += (a[i] - b[i]) * (a[i] - b[i]), norm += b[i] * b[i];
  return std::sqrt(error / std::max(norm, 1e-300));
}

template <typename Body>
void ForEachTarget(Body&& body) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
}

constexpr double kBound = 4e-6;
double g_worst = 0;  // printed at the end: the measured figure behind kBound

TEST(KdaOps, ChunkAndDecodeMatchTheRecurrentRule) {
  ForEachTarget([] {
    // Head sizes: the model's 128, a small one, and widths that end inside a vector and a 16 × 16 transpose tile
    // with dk ≠ dv (the chunk's products mask their last vector; the transposes finish partial tiles one by one;
    // the decode step's register strips of 4 vectors leave a partial strip at dv = 40 and 80 on AVX2 and AVX-512).
    for (const auto& [dk, dv] : {std::pair<int64_t, int64_t>{32, 32}, {128, 128}, {24, 40}, {48, 80}}) {
      for (int64_t n : {1, 5, 16, 17, 33, 64}) {
        for (float decay : {0.05f, 1.0f, 5.0f}) {
          SCOPED_TRACE(::testing::Message() << "dk " << dk << " dv " << dv << " n " << n << " decay " << decay);
          const Inputs in = MakeInputs(n, dk, dv, static_cast<uint32_t>(n * 31 + dk), decay);
          std::vector<double> state(in.state.begin(), in.state.end()), o(n * dv);
          ref::KdaRecurrent(state.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), dk, dv, in.beta.data(), 1,
                            n, dk, dv, o.data());
          // Chunked.
          std::vector<float> chunk_state = in.state, chunk_o(n * dv);
          std::vector<float> scratch(kda::ChunkScratchFloats(dk, dv));
          kda::ChunkArgs args;
          args.q = in.q.data(), args.k = in.k.data(), args.qk_stride = dk;
          args.v = in.v.data(), args.v_stride = dv, args.g = in.g.data(), args.g_stride = dk;
          args.beta = in.beta.data(), args.beta_stride = 1, args.o = chunk_o.data(), args.o_stride = dv;
          args.n = n, args.dk = dk, args.dv = dv;
          kda::Chunk(chunk_state.data(), args, scratch.data());
          g_worst = std::max({g_worst, RelativeRms(chunk_o, o), RelativeRms(chunk_state, state)});
          EXPECT_LT(RelativeRms(chunk_o, o), kBound) << "chunk outputs";
          EXPECT_LT(RelativeRms(chunk_state, state), kBound) << "chunk state";
          // Decode steps.
          std::vector<float> step_state = in.state, step_o(n * dv);
          for (int64_t t = 0; t < n; ++t) {
            kda::DecodeStep(step_state.data(), in.q.data() + t * dk, in.k.data() + t * dk, in.v.data() + t * dv,
                            in.g.data() + t * dk, in.beta[t], dk, dv, step_o.data() + t * dv);
          }
          g_worst = std::max({g_worst, RelativeRms(step_o, o), RelativeRms(step_state, state)});
          EXPECT_LT(RelativeRms(step_o, o), kBound) << "decode outputs";
          EXPECT_LT(RelativeRms(step_state, state), kBound) << "decode state";
        }
      }
    }
  });
  std::printf("worst relative RMS error: %.3g\n", g_worst);
}

}  // namespace
}  // namespace glint
