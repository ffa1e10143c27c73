#include "model/mhc.h"

#include <cmath>

#include "kernels/reference.h"

namespace glint {

MhcCoefficients MhcComputeCoefficients(const MhcWeights& w, const ModelConfig& c, const float* streams) {
  const int64_t flat = c.hc_mult * c.hidden_size;  // xf = flatten(X), stream-major
  // r = 1/sqrt(mean(xf²) + rms_norm_eps): the flat norm uses rms_norm_eps, not hc_eps (pitfall 5).
  const double inverse_rms = 1.0 / std::sqrt(ref::Dot(streams, streams, flat) / flat + c.rms_norm_eps);
  // mix = fn · (xf · r) = (fn · xf) · r.   mix: [(2 + hc) · hc]
  std::vector<double> mix(w.fn.rows);
  for (int64_t i = 0; i < w.fn.rows; ++i) mix[i] = ref::Dot(w.fn.Row(i), streams, flat) * inverse_rms;
  return MhcCoefficientsFromMix(mix.data(), w.base.data(), w.scale.data(), c);
}

MhcCoefficients MhcCoefficientsFromMix(const double* mix, const float* base, const float* scale, const ModelConfig& c) {
  const int64_t hc = c.hc_mult;
  const float eps = c.hc_eps;
  MhcCoefficients out;
  out.pre.resize(hc);
  out.post.resize(hc);
  out.comb.resize(hc * hc);
  for (int64_t i = 0; i < hc; ++i) {
    out.pre[i] = ref::Sigmoid(static_cast<float>(mix[i] * scale[0] + base[i])) + eps;
    out.post[i] = 2.0f * ref::Sigmoid(static_cast<float>(mix[hc + i] * scale[1] + base[hc + i]));
  }
  // comb: softmax over destinations k for each source row j, + hc_eps; then one column normalisation and
  // (iters − 1) × (row, column) Sinkhorn passes, directly in probability space (HF code, not its docstring).
  std::vector<double> comb(hc * hc);
  for (int64_t j = 0; j < hc; ++j) {
    double max_logit = -INFINITY;
    for (int64_t k = 0; k < hc; ++k) {
      comb[j * hc + k] = mix[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
      max_logit = std::max(max_logit, comb[j * hc + k]);
    }
    double sum = 0;
    for (int64_t k = 0; k < hc; ++k) sum += (comb[j * hc + k] = std::exp(comb[j * hc + k] - max_logit));
    for (int64_t k = 0; k < hc; ++k) comb[j * hc + k] = comb[j * hc + k] / sum + eps;
  }
  auto normalise_columns = [&] {
    for (int64_t k = 0; k < hc; ++k) {
      double sum = 0;
      for (int64_t j = 0; j < hc; ++j) sum += comb[j * hc + k];
      for (int64_t j = 0; j < hc; ++j) comb[j * hc + k] /= sum + eps;
    }
  };
  auto normalise_rows = [&] {
    for (int64_t j = 0; j < hc; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < hc; ++k) sum += comb[j * hc + k];
      for (int64_t k = 0; k < hc; ++k) comb[j * hc + k] /= sum + eps;
    }
  };
  normalise_columns();
  for (int64_t iteration = 1; iteration < c.hc_sinkhorn_iters; ++iteration) {
    normalise_rows();
    normalise_columns();
  }
  for (int64_t i = 0; i < hc * hc; ++i) out.comb[i] = static_cast<float>(comb[i]);
  return out;
}

void MhcRead(const MhcCoefficients& coefficients, const float* streams, int64_t hc, int64_t hidden, float* h) {
  for (int64_t d = 0; d < hidden; ++d) {
    double sum = 0;
    for (int64_t s = 0; s < hc; ++s) sum += static_cast<double>(coefficients.pre[s]) * streams[s * hidden + d];
    h[d] = static_cast<float>(sum);
  }
}

void MhcWrite(const MhcCoefficients& coefficients, const float* y, int64_t hc, int64_t hidden, float* streams) {
  std::vector<float> previous(streams, streams + hc * hidden);  // R: [hc, D]
  for (int64_t k = 0; k < hc; ++k) {
    for (int64_t d = 0; d < hidden; ++d) {
      double sum = static_cast<double>(coefficients.post[k]) * y[d];
      for (int64_t j = 0; j < hc; ++j)
        sum += static_cast<double>(coefficients.comb[j * hc + k]) * previous[j * hidden + d];
      streams[k * hidden + d] = static_cast<float>(sum);
    }
  }
}

void MhcCollapseMean(const float* streams, int64_t hc, int64_t hidden, float* out) {
  for (int64_t d = 0; d < hidden; ++d) {
    double sum = 0;
    for (int64_t s = 0; s < hc; ++s) sum += streams[s * hidden + d];
    out[d] = static_cast<float>(sum / hc);
  }
}

}  // namespace glint
