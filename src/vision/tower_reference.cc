#include "vision/tower_reference.h"

#include <algorithm>
#include <cmath>

namespace glint {
namespace {

// y[t] = W x[t] + b for n rows; accumulated in double.   x: [n, w.cols] (stride x_stride), y: [n, w.rows]
void Linear(const VisionMatrix& w, const std::vector<float>& bias, const float* x, int64_t n, int64_t x_stride,
            float* y) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      const float* row = w.Row(r);
      double sum = bias.empty() ? 0.0 : bias[r];
      for (int64_t c = 0; c < w.cols; ++c) sum += static_cast<double>(row[c]) * x[t * x_stride + c];
      y[t * w.rows + r] = static_cast<float>(sum);
    }
  }
}

// y = x / sqrt(mean(x²) + eps) · weight (HF GlmOcrRMSNorm).
void RmsNorm(const float* x, const std::vector<float>& weight, int64_t n, float eps, float* y) {
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(squares / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * inv * weight[i]);
}

// x'[d] = x[d]·cos[d] + rotate_half(x)[d]·sin[d], rotate_half(x) = (−x[half:], x[:half]).
void Rotate(float* x, const float* cos_row, const float* sin_row, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  std::vector<float> rotated(head_dim);
  for (int64_t d = 0; d < head_dim; ++d) {
    const double other = d < half ? -static_cast<double>(x[d + half]) : static_cast<double>(x[d - half]);
    rotated[d] = static_cast<float>(x[d] * static_cast<double>(cos_row[d]) + other * sin_row[d]);
  }
  std::copy(rotated.begin(), rotated.end(), x);
}

float SiluClampedGlu(float gate, float up, float limit) {
  const double g = std::min(static_cast<double>(gate), static_cast<double>(limit));
  const double u = std::clamp(static_cast<double>(up), -static_cast<double>(limit), static_cast<double>(limit));
  return static_cast<float>(g / (1.0 + std::exp(-g)) * u);
}

// Self-attention of one block on the normed rows h [N, hidden] → out [N, hidden] (before proj). q, k get the
// per-head RMSNorm, then the 2D rotary; softmax(q·k / sqrt(head_dim)) within each frame.
void Attention(const VisionBlockWeights& w, const VisionConfig& c, const VisionInput& input,
               const std::vector<float>& cos_table, const std::vector<float>& sin_table, const float* h, float* out) {
  const int64_t n = input.NumPatches(), hidden = c.hidden_size, head_dim = c.HeadDim();
  std::vector<float> qkv(n * 3 * hidden);  // [N, 3·hidden]: q | k | v, each head-major
  Linear(w.qkv, w.qkv_bias, h, n, hidden, qkv.data());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t head = 0; head < c.num_heads; ++head) {
      float* q = &qkv[t * 3 * hidden + head * head_dim];
      float* k = q + hidden;
      RmsNorm(q, w.q_norm, head_dim, c.rms_norm_eps, q);
      RmsNorm(k, w.k_norm, head_dim, c.rms_norm_eps, k);
      Rotate(q, &cos_table[t * head_dim], &sin_table[t * head_dim], head_dim);
      Rotate(k, &cos_table[t * head_dim], &sin_table[t * head_dim], head_dim);
    }
  }
  const int64_t frame = int64_t{input.grid_h} * input.grid_w;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> scores(frame);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t begin = t / frame * frame;
    for (int64_t head = 0; head < c.num_heads; ++head) {
      const float* q = &qkv[t * 3 * hidden + head * head_dim];
      double top = -INFINITY;
      for (int64_t s = 0; s < frame; ++s) {
        const float* k = &qkv[(begin + s) * 3 * hidden + hidden + head * head_dim];
        double dot = 0;
        for (int64_t d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
        scores[s] = dot * scale;
        top = std::max(top, scores[s]);
      }
      double total = 0;
      for (double& s : scores) total += (s = std::exp(s - top));
      for (int64_t d = 0; d < head_dim; ++d) {
        double sum = 0;
        for (int64_t s = 0; s < frame; ++s)
          sum += scores[s] * qkv[(begin + s) * 3 * hidden + 2 * hidden + head * head_dim + d];
        out[t * hidden + head * head_dim + d] = static_cast<float>(sum / total);
      }
    }
  }
}

void Block(const VisionBlockWeights& w, const VisionConfig& c, const VisionInput& input,
           const std::vector<float>& cos_table, const std::vector<float>& sin_table, std::vector<float>& x) {
  const int64_t n = input.NumPatches(), hidden = c.hidden_size, width = c.intermediate_size;
  std::vector<float> h(n * hidden), attn(n * hidden), y(n * hidden);
  for (int64_t t = 0; t < n; ++t) RmsNorm(&x[t * hidden], w.norm1, hidden, c.rms_norm_eps, &h[t * hidden]);
  Attention(w, c, input, cos_table, sin_table, h.data(), attn.data());
  Linear(w.proj, w.proj_bias, attn.data(), n, hidden, y.data());
  for (int64_t i = 0; i < n * hidden; ++i) x[i] += y[i];

  for (int64_t t = 0; t < n; ++t) RmsNorm(&x[t * hidden], w.norm2, hidden, c.rms_norm_eps, &h[t * hidden]);
  std::vector<float> gate(n * width), up(n * width);
  Linear(w.gate, w.gate_bias, h.data(), n, hidden, gate.data());
  Linear(w.up, w.up_bias, h.data(), n, hidden, up.data());
  for (int64_t i = 0; i < n * width; ++i) gate[i] = SiluClampedGlu(gate[i], up[i], c.swiglu_limit);
  Linear(w.down, w.down_bias, gate.data(), n, width, y.data());
  for (int64_t i = 0; i < n * hidden; ++i) x[i] += y[i];
}

// Conv2d(hidden → out, kernel m, stride m) on each merge block of m² consecutive rows:
// out[j, o] = b[o] + Σ_c Σ_{i<m²} W[o, c·m² + i] · x[j·m² + i, c].
void Downsample(const VisionWeights& w, const VisionConfig& c, const std::vector<float>& x, int64_t tokens,
                float* out) {
  const int64_t area = c.MergeArea(), hidden = c.hidden_size;
  for (int64_t j = 0; j < tokens; ++j) {
    for (int64_t o = 0; o < c.out_hidden_size; ++o) {
      const float* row = w.downsample.Row(o);
      double sum = w.downsample_bias[o];
      for (int64_t ch = 0; ch < hidden; ++ch) {
        for (int64_t i = 0; i < area; ++i)
          sum += static_cast<double>(row[ch * area + i]) * x[(j * area + i) * hidden + ch];
      }
      out[j * c.out_hidden_size + o] = static_cast<float>(sum);
    }
  }
}

// proj → LayerNorm (eps 1e-5, HF nn.LayerNorm default) → exact GELU → clamped SwiGLU.
void Merger(const VisionWeights& w, const VisionConfig& c, const float* x, int64_t tokens, float* out) {
  const int64_t dim = c.out_hidden_size, width = c.projection_intermediate_size;
  const std::vector<float> none;
  std::vector<float> p(tokens * dim), gate(tokens * width), up(tokens * width);
  Linear(w.merger_proj, none, x, tokens, dim, p.data());
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = &p[t * dim];
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mean += row[i];
    mean /= static_cast<double>(dim);
    for (int64_t i = 0; i < dim; ++i) var += (row[i] - mean) * (row[i] - mean);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(dim) + 1e-5);
    for (int64_t i = 0; i < dim; ++i) {
      const double normed = (row[i] - mean) * inv * w.merger_norm_weight[i] + w.merger_norm_bias[i];
      row[i] = static_cast<float>(0.5 * normed * (1.0 + std::erf(normed / std::sqrt(2.0))));
    }
  }
  Linear(w.merger_gate, none, p.data(), tokens, dim, gate.data());
  Linear(w.merger_up, none, p.data(), tokens, dim, up.data());
  for (int64_t i = 0; i < tokens * width; ++i) gate[i] = SiluClampedGlu(gate[i], up[i], c.swiglu_limit);
  Linear(w.merger_down, none, gate.data(), tokens, width, out);
}

}  // namespace

Result<std::vector<float>> RunVisionTowerReference(const VisionWeights& weights, const VisionConfig& config,
                                                   const VisionInput& input, VisionTrace* trace) {
  GLINT_RETURN_IF_ERROR(CheckVisionInput(config, input));
  const int64_t n = input.NumPatches(), hidden = config.hidden_size, tokens = VisionTokenCount(config, input);
  std::vector<float> x(n * hidden);  // [N, hidden]
  Linear(weights.patch_embed, weights.patch_embed_bias, input.patches.data(), n, config.PatchValues(), x.data());
  if (trace != nullptr) trace->patch_embed = x;
  std::vector<float> cos_table, sin_table;
  VisionRotaryTables(config, input, cos_table, sin_table);
  if (trace != nullptr) trace->blocks.clear();
  for (const VisionBlockWeights& block : weights.blocks) {
    Block(block, config, input, cos_table, sin_table, x);
    if (trace != nullptr) trace->blocks.push_back(x);
  }
  for (int64_t t = 0; t < n; ++t) {
    RmsNorm(&x[t * hidden], weights.post_layernorm, hidden, config.rms_norm_eps, &x[t * hidden]);
  }
  if (trace != nullptr) trace->post_layernorm = x;
  std::vector<float> merged(tokens * config.out_hidden_size), out(tokens * config.out_hidden_size);
  Downsample(weights, config, x, tokens, merged.data());
  if (trace != nullptr) trace->downsample = merged;
  Merger(weights, config, merged.data(), tokens, out.data());
  if (trace != nullptr) trace->merger = out;
  return out;
}

}  // namespace glint
