// KDA reference forward pass. Equations are numbered as in docs/model-kda.md; the spec is
// docs/model-glm53.md §5. Storage is fp32 (activations, the carried state S and conv window); sums
// over the head dim, the conv taps and whole chunks accumulate in double so that this oracle stays ~1e-7
// relative to float64 math (the golden fixtures are float64).
#include "model/kda.h"

#include <algorithm>
#include <cmath>

#include "kernels/reference.h"
#include "quant/formats.h"

namespace glint {
namespace {

// Fixed by the model, not by the config (§13 pitfall 2): HF `l2norm(x, eps=1e-6)`, eps inside the sqrt.
constexpr double kL2NormEps = 1e-6;

struct KdaDims {
  int64_t heads = 0;     // H
  int64_t head_dim = 0;  // d: key dim = value dim
  int64_t width = 0;     // H·d
  int64_t hidden = 0;    // D
  int64_t kernel = 0;    // K: short conv taps

  int64_t ConvHistory() const { return kernel - 1; }
  int64_t ConvWindowSize() const { return 3 * width * ConvHistory(); }   // [3, width, K−1]
  int64_t RecurrentSize() const { return heads * head_dim * head_dim; }  // [H, d, d]
};

KdaDims DimsOf(const ModelConfig& config) {
  KdaDims dims;
  dims.heads = config.kda_num_heads;
  dims.head_dim = config.kda_head_dim;
  dims.width = config.KdaWidth();
  dims.hidden = config.hidden_size;
  dims.kernel = config.kda_conv_kernel;
  return dims;
}

Status CheckMatrix(const Matrix& matrix, const char* name, int64_t rows, int64_t cols) {
  if (matrix.rows != rows || matrix.cols != cols || static_cast<int64_t>(matrix.data.size()) != rows * cols) {
    return InvalidArgument("KDA weight ", name, " is [", matrix.rows, ", ", matrix.cols, "] with ", matrix.data.size(),
                           " values; the config expects [", rows, ", ", cols, "]");
  }
  return Status::Ok();
}

Status CheckVector(const std::vector<float>& vector, const char* name, int64_t size) {
  if (static_cast<int64_t>(vector.size()) != size) {
    return InvalidArgument("KDA weight ", name, " has ", vector.size(), " values; the config expects ", size);
  }
  return Status::Ok();
}

Status ValidateState(const KdaDims& dims, const KdaState& state) {
  if (static_cast<int64_t>(state.conv_window.size()) != dims.ConvWindowSize()) {
    return InvalidArgument("KDA state conv window has ", state.conv_window.size(), " values; this config needs 3 × ",
                           dims.width, " × ", dims.ConvHistory(), " = ", dims.ConvWindowSize(),
                           " (use KdaState::Zero)");
  }
  if (static_cast<int64_t>(state.recurrent.size()) != dims.RecurrentSize()) {
    return InvalidArgument("KDA recurrent state has ", state.recurrent.size(), " values; this config needs ",
                           dims.heads, " × ", dims.head_dim, " × ", dims.head_dim, " = ", dims.RecurrentSize(),
                           " (use KdaState::Zero)");
  }
  if (state.tokens_seen < 0) return InvalidArgument("KDA state has tokens_seen=", state.tokens_seen, " < 0");
  return Status::Ok();
}

Status ValidateArguments(const KdaWeights& w, const KdaDims& dims, const float* h, int64_t tokens, const float* out) {
  if (dims.heads <= 0 || dims.head_dim <= 0 || dims.hidden <= 0 || dims.kernel <= 0) {
    return InvalidArgument("KDA config has heads=", dims.heads, ", head_dim=", dims.head_dim, ", hidden=", dims.hidden,
                           ", conv kernel=", dims.kernel, "; all must be positive");
  }
  if (tokens <= 0) return InvalidArgument("KDA forward needs at least one token; got ", tokens);
  if (h == nullptr || out == nullptr) return InvalidArgument("KDA forward got a null input or output buffer");
  const int64_t d = dims.head_dim, width = dims.width, hidden = dims.hidden;
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.q_proj, "q_proj", width, hidden));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.k_proj, "k_proj", width, hidden));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.v_proj, "v_proj", width, hidden));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.o_proj, "o_proj", hidden, width));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.f_a_proj, "f_a_proj", d, hidden));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.f_b_proj, "f_b_proj", width, d));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.g_a_proj, "g_a_proj", d, hidden));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.g_b_proj, "g_b_proj", width, d));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.b_proj, "b_proj", dims.heads, hidden));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.q_conv, "q_conv1d", width, dims.kernel));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.k_conv, "k_conv1d", width, dims.kernel));
  GLINT_RETURN_IF_ERROR(CheckMatrix(w.v_conv, "v_conv1d", width, dims.kernel));
  GLINT_RETURN_IF_ERROR(CheckVector(w.a_log, "A_log", dims.heads));
  GLINT_RETURN_IF_ERROR(CheckVector(w.dt_bias, "dt_bias", width));
  return CheckVector(w.o_norm, "o_norm", d);
}

// (1) Causal depthwise short conv, no bias, then SiLU, over one stream (q, k or v), in place:
//   y_t[c] = silu( Σ_{i<K} conv[c, i] · x_{t−(K−1)+i}[c] )      tap K−1 multiplies the current token.
// `window` [width, K−1] holds x_{−(K−1)} … x_{−1} (oldest first) on entry and the last K−1 inputs on exit,
// so consecutive calls see one continuous sequence.
void ShortConvSilu(const Matrix& conv, const KdaDims& dims, int64_t tokens, float* window /* [width, K−1] */,
                   float* x /* [tokens, width] */) {
  const int64_t history = dims.ConvHistory();
  std::vector<float> series(history + tokens);  // [K−1 + tokens] one channel: history, then this call's inputs
  for (int64_t c = 0; c < dims.width; ++c) {
    float* channel_window = window + c * history;
    std::copy(channel_window, channel_window + history, series.begin());
    for (int64_t t = 0; t < tokens; ++t) series[history + t] = x[t * dims.width + c];
    const float* taps = conv.Row(c);  // [K]
    for (int64_t t = 0; t < tokens; ++t) {
      double sum = 0;
      for (int64_t i = 0; i < dims.kernel; ++i) sum += static_cast<double>(taps[i]) * series[t + i];
      x[t * dims.width + c] = ref::Silu(static_cast<float>(sum));
    }
    std::copy(series.end() - history, series.end(), channel_window);
  }
}

// (2) Per-head L2 norm with eps inside the sqrt, times `scale`: x ← x / sqrt(Σ_d x² + 1e-6) · scale.
// q uses scale d^−1/2 (the attention scale, folded in as HF does), k uses 1.
void L2NormalizeHeads(const KdaDims& dims, int64_t tokens, double scale, float* x /* [tokens, H, d] */) {
  for (int64_t row = 0; row < tokens * dims.heads; ++row) {
    float* head = x + row * dims.head_dim;
    const double inverse = scale / std::sqrt(ref::Dot(head, head, dims.head_dim) + kL2NormEps);
    for (int64_t i = 0; i < dims.head_dim; ++i) head[i] = static_cast<float>(head[i] * inverse);
  }
}

// (3) Per-key-channel log-decay (pitfalls 1 and 4: the lower bound multiplies a sigmoid; g is [H, d] per token):
//   f = f_b(f_a(h));  g[h, c] = lower_bound · sigmoid( exp(A_log[h]) · (f[h, c] + dt_bias[h, c]) ) ∈ (lb, 0)
void ForgetGate(const KdaWeights& w, const KdaDims& dims, float lower_bound, const float* h /* [tokens, D] */,
                int64_t tokens, float* g /* [tokens, H, d] */) {
  std::vector<float> low_rank(tokens * dims.head_dim);  // [tokens, d]
  ref::Linear(h, tokens, w.f_a_proj.data.data(), dims.head_dim, dims.hidden, low_rank.data());
  ref::Linear(low_rank.data(), tokens, w.f_b_proj.data.data(), dims.width, dims.head_dim, g);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t head = 0; head < dims.heads; ++head) {
      const float decay_rate = std::exp(w.a_log[head]);
      for (int64_t c = 0; c < dims.head_dim; ++c) {
        const int64_t channel = head * dims.head_dim + c;
        float& value = g[t * dims.width + channel];
        value = lower_bound * ref::Sigmoid(decay_rate * (value + w.dt_bias[channel]));
      }
    }
  }
}

// (5) One delta-rule step per token and head, S ∈ R^{d×d} (key × value), fp32 state:
//   S ← Diag(exp(g_t)) S;   u = Sᵀ k_t;   S ← S + k_t ⊗ β_t (v_t − u);   o_t = Sᵀ q_t
// Closed form: S_t = (I − β_t k_t k_tᵀ) Diag(α_t) S_{t−1} + β_t k_t v_tᵀ with α_t = exp(g_t).
void DeltaRuleRecurrent(const KdaDims& dims, int64_t tokens, const float* q, const float* k, const float* v,
                        const float* g, const float* beta, float* state, float* o) {
  // q, k, v, g, o: [tokens, H, d]; beta: [tokens, H]; state: [H, d, d]
  const int64_t d = dims.head_dim;
  std::vector<double> accumulator(d);  // [d] a value-dim vector (u, then o) accumulated over the key dim
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t head = 0; head < dims.heads; ++head) {
      const int64_t offset = (t * dims.heads + head) * d;
      const float *q_t = q + offset, *k_t = k + offset, *v_t = v + offset, *g_t = g + offset;
      const double beta_t = beta[t * dims.heads + head];
      float* s = state + head * d * d;  // [d key, d value]

      for (int64_t key = 0; key < d; ++key) {  // S ← Diag(exp(g_t)) S: decay each key row
        const float alpha = std::exp(g_t[key]);
        for (int64_t value = 0; value < d; ++value) s[key * d + value] *= alpha;
      }
      std::fill(accumulator.begin(), accumulator.end(), 0.0);  // u = Sᵀ k_t: what S recalls for k_t
      for (int64_t key = 0; key < d; ++key) {
        const float* s_row = s + key * d;  // [d value]
        for (int64_t value = 0; value < d; ++value) accumulator[value] += static_cast<double>(s_row[value]) * k_t[key];
      }
      for (int64_t value = 0; value < d; ++value) accumulator[value] = beta_t * (v_t[value] - accumulator[value]);
      for (int64_t key = 0; key < d; ++key) {  // S ← S + k_t ⊗ β_t (v_t − u)
        float* s_row = s + key * d;            // [d value]
        for (int64_t value = 0; value < d; ++value) {
          s_row[value] = static_cast<float>(s_row[value] + static_cast<double>(k_t[key]) * accumulator[value]);
        }
      }
      std::fill(accumulator.begin(), accumulator.end(), 0.0);  // o_t = Sᵀ q_t (after this token's update)
      for (int64_t key = 0; key < d; ++key) {
        const float* s_row = s + key * d;  // [d value]
        for (int64_t value = 0; value < d; ++value) accumulator[value] += static_cast<double>(s_row[value]) * q_t[key];
      }
      for (int64_t value = 0; value < d; ++value) o[offset + value] = static_cast<float>(accumulator[value]);
    }
  }
}

// (6) One chunk of n ≤ 64 tokens of one head in WY form (§5.2), starting from S0 = `state` [d, d] and leaving the
// state after the chunk there. Index i, j run over the chunk, c over key channels. With the in-chunk cumulative
// log-decay G_i = Σ_{s≤i} g_s and Γ_i = exp(G_i), the state after token i is
//   S_i = Diag(Γ_i) ( S0 + Σ_{j≤i} (k_j / Γ_j) ν_jᵀ ),   ν_j = β_j ( v_j − (Diag(α_j) S_{j−1})ᵀ k_j )    (6a)
// Substituting S_{j−1} into ν_j gives a unit lower-triangular system for the "new values" ν:
//   (I + L) ν = β⊙V − (β⊙K⊙Γ) S0,   L[i, j] = β_i Σ_c k_i[c] k_j[c] exp(G_i[c] − G_j[c])  (j < i)      (6b)
// so with A = (I + L)^−1:  U = A (β⊙V),  W = A (β⊙K⊙Γ),  ν = U − W S0                                 (6c)
// and the outputs and the final state follow from (6a):
//   o_i = S0ᵀ (Γ_i ⊙ q_i) + Σ_{j≤i} ( Σ_c q_i[c] k_j[c] exp(G_i[c] − G_j[c]) ) ν_j                       (6d)
//   S_n = Diag(Γ_{n−1}) S0 + Σ_j (k_j ⊙ exp(G_{n−1} − G_j)) ν_jᵀ                                       (6e)
// Every exponent is ≤ 0 (g < 0 and j ≤ i), so nothing overflows. All chunk intermediates are double: the
// differences G_i − G_j lose |G|·ε relative to cancellation and |G| reaches hundreds over 64 tokens at strong decay.
// U and W do not depend on S0, which is what lets fast paths build them for every chunk in parallel.
struct ChunkInputs {
  int64_t n = 0;                // tokens in the chunk
  std::vector<double> q, k, v;  // [n, d] this head's rows (q already L2-normed and scaled)
  std::vector<double> g;        // [n, d] log-decay, becomes G (cumulative) in place
  std::vector<double> beta;     // [n]
};

void DeltaRuleChunk(ChunkInputs& x, int64_t d, float* state /* [d, d] */, float* o /* [n, d] rows of stride o_stride */,
                    int64_t o_stride) {
  const int64_t n = x.n;
  std::vector<double>& G = x.g;  // [n, d]
  for (int64_t i = 1; i < n; ++i) {
    for (int64_t c = 0; c < d; ++c) G[i * d + c] += G[(i - 1) * d + c];
  }
  // Σ_c a_i[c] k_j[c] exp(G_i[c] − G_j[c]): the decayed inner product of token i's a (q or k) with k_j.
  auto decayed_dot = [&](const std::vector<double>& a, int64_t i, int64_t j) {
    double sum = 0;
    for (int64_t c = 0; c < d; ++c) sum += a[i * d + c] * x.k[j * d + c] * std::exp(G[i * d + c] - G[j * d + c]);
    return sum;
  };

  // (6b)/(6c) A = (I + L)^−1 by forward substitution: A[i, j] = δ_ij − Σ_{j≤m<i} L[i, m] A[m, j].
  std::vector<double> L(n * n, 0.0), A(n * n, 0.0);  // [n, n] strictly lower / unit lower triangular
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) L[i * n + j] = x.beta[i] * decayed_dot(x.k, i, j);
  }
  for (int64_t i = 0; i < n; ++i) {
    A[i * n + i] = 1.0;
    for (int64_t j = 0; j < i; ++j) {
      double sum = 0;
      for (int64_t m = j; m < i; ++m) sum += L[i * n + m] * A[m * n + j];
      A[i * n + j] = -sum;
    }
  }
  // (6c) U = A (β⊙V), W = A (β⊙K⊙Γ), ν = U − W S0.   U, W, ν: [n, d]
  std::vector<double> nu(n * d, 0.0), W(n * d, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const double a = A[i * n + j] * x.beta[j];
      for (int64_t c = 0; c < d; ++c) {
        nu[i * d + c] += a * x.v[j * d + c];                          // U
        W[i * d + c] += a * x.k[j * d + c] * std::exp(G[j * d + c]);  // W
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t key = 0; key < d; ++key) {
      const double w_ik = W[i * d + key];
      for (int64_t value = 0; value < d; ++value) nu[i * d + value] -= w_ik * state[key * d + value];
    }
  }
  // (6d) o_i = S0ᵀ (Γ_i ⊙ q_i) + Σ_{j≤i} (decayed q_i·k_j) ν_j
  std::vector<double> out(d);  // [d] one output row
  for (int64_t i = 0; i < n; ++i) {
    std::fill(out.begin(), out.end(), 0.0);
    for (int64_t key = 0; key < d; ++key) {
      const double decayed_q = x.q[i * d + key] * std::exp(G[i * d + key]);
      for (int64_t value = 0; value < d; ++value) out[value] += decayed_q * state[key * d + value];
    }
    for (int64_t j = 0; j <= i; ++j) {
      const double score = decayed_dot(x.q, i, j);
      for (int64_t value = 0; value < d; ++value) out[value] += score * nu[j * d + value];
    }
    for (int64_t value = 0; value < d; ++value) o[i * o_stride + value] = static_cast<float>(out[value]);
  }
  // (6e) S_n = Diag(Γ_{n−1}) S0 + Σ_j (k_j ⊙ exp(G_{n−1} − G_j)) ν_jᵀ
  const double* G_last = G.data() + (n - 1) * d;
  for (int64_t key = 0; key < d; ++key) {
    const double total_decay = std::exp(G_last[key]);
    for (int64_t value = 0; value < d; ++value) {
      double s = total_decay * state[key * d + value];
      for (int64_t j = 0; j < n; ++j) {
        s += x.k[j * d + key] * std::exp(G_last[key] - G[j * d + key]) * nu[j * d + value];
      }
      state[key * d + value] = static_cast<float>(s);
    }
  }
}

// (6) The chunked form over the whole call: chunks of 64 tokens from the first token of the call (as HF, whose
// chunk grid starts at each call; the last chunk may be shorter, which equals HF's zero padding: padded tokens
// come after every real one and have k = v = 0), S carried from chunk to chunk.
void DeltaRuleChunked(const KdaDims& dims, int64_t tokens, const float* q, const float* k, const float* v,
                      const float* g, const float* beta, float* state, float* o) {
  // q, k, v, g, o: [tokens, H, d]; beta: [tokens, H]; state: [H, d, d]
  const int64_t d = dims.head_dim;
  ChunkInputs chunk;
  for (int64_t head = 0; head < dims.heads; ++head) {
    for (int64_t start = 0; start < tokens; start += kKdaChunkTokens) {
      chunk.n = std::min(kKdaChunkTokens, tokens - start);
      for (auto* rows : {&chunk.q, &chunk.k, &chunk.v, &chunk.g}) rows->resize(chunk.n * d);
      chunk.beta.resize(chunk.n);
      for (int64_t i = 0; i < chunk.n; ++i) {
        const int64_t offset = ((start + i) * dims.heads + head) * d;
        std::copy(q + offset, q + offset + d, chunk.q.begin() + i * d);
        std::copy(k + offset, k + offset + d, chunk.k.begin() + i * d);
        std::copy(v + offset, v + offset + d, chunk.v.begin() + i * d);
        std::copy(g + offset, g + offset + d, chunk.g.begin() + i * d);
        chunk.beta[i] = beta[(start + i) * dims.heads + head];
      }
      DeltaRuleChunk(chunk, d, state + head * d * d, o + (start * dims.heads + head) * d, dims.heads * d);
    }
  }
}

}  // namespace

KdaState KdaState::Zero(const ModelConfig& config) {
  const KdaDims dims = DimsOf(config);
  KdaState state;
  state.conv_window.assign(std::max<int64_t>(dims.ConvWindowSize(), 0), 0.0f);
  state.recurrent.assign(std::max<int64_t>(dims.RecurrentSize(), 0), 0.0f);
  return state;
}

namespace {

// The layer on validated arguments. conv_window: [3, width, K−1]; recurrent: [H, d, d] fp32, both updated.
void KdaForwardCore(const KdaWeights& weights, const ModelConfig& config, const KdaDims& dims, const float* h,
                    int64_t tokens, float* conv_window, float* recurrent, KdaAlgorithm algorithm, float* out) {
  const int64_t T = tokens, D = dims.hidden, width = dims.width, d = dims.head_dim;

  // Projections of the normed hidden h.
  std::vector<float> q(T * width), k(T * width), v(T * width);  // [T, width] = [T, H, d]
  ref::Linear(h, T, weights.q_proj.data.data(), width, D, q.data());
  ref::Linear(h, T, weights.k_proj.data.data(), width, D, k.data());
  ref::Linear(h, T, weights.v_proj.data.data(), width, D, v.data());
  std::vector<float> g(T * width);  // [T, H, d] (3) log-decay
  ForgetGate(weights, dims, config.kda_gate_lower_bound, h, T, g.data());
  std::vector<float> beta(T * dims.heads);  // [T, H] (4) β = sigmoid(b_proj h), not doubled
  ref::Linear(h, T, weights.b_proj.data.data(), dims.heads, D, beta.data());
  for (float& value : beta) value = ref::Sigmoid(value);
  std::vector<float> output_gate(T * width);  // [T, H, d] (7) z = g_b(g_a(h))
  {
    std::vector<float> low_rank(T * d);  // [T, d]
    ref::Linear(h, T, weights.g_a_proj.data.data(), d, D, low_rank.data());
    ref::Linear(low_rank.data(), T, weights.g_b_proj.data.data(), width, d, output_gate.data());
  }

  // (1) short conv + SiLU per stream; each stream owns one [width, K−1] slice of the window.
  const int64_t window_slice = width * dims.ConvHistory();
  ShortConvSilu(weights.q_conv, dims, T, conv_window + 0 * window_slice, q.data());
  ShortConvSilu(weights.k_conv, dims, T, conv_window + 1 * window_slice, k.data());
  ShortConvSilu(weights.v_conv, dims, T, conv_window + 2 * window_slice, v.data());
  // (2) L2 norms (v is used as is).
  L2NormalizeHeads(dims, T, 1.0 / std::sqrt(static_cast<double>(d)), q.data());
  L2NormalizeHeads(dims, T, 1.0, k.data());

  // (5)/(6) the delta rule.
  std::vector<float> attention(T * width);  // [T, H, d] o = Sᵀq per head
  if (algorithm == KdaAlgorithm::kRecurrent) {
    DeltaRuleRecurrent(dims, T, q.data(), k.data(), v.data(), g.data(), beta.data(), recurrent, attention.data());
  } else {
    DeltaRuleChunked(dims, T, q.data(), k.data(), v.data(), g.data(), beta.data(), recurrent, attention.data());
  }

  // (7) gated RMSNorm per head with a SIGMOID gate (pitfall 3), eps = rms_norm_eps:
  //   o'[h] = o_norm ⊙ o[h] / sqrt(mean(o[h]²) + eps) ⊙ sigmoid(z[h])
  for (int64_t row = 0; row < T * dims.heads; ++row) {
    float* head = attention.data() + row * d;
    ref::RmsNorm(head, weights.o_norm.data(), d, config.rms_norm_eps, head);
    for (int64_t c = 0; c < d; ++c) head[c] *= ref::Sigmoid(output_gate[row * d + c]);
  }
  // (8) out = o_proj o'
  ref::Linear(attention.data(), T, weights.o_proj.data.data(), D, width, out);
}

}  // namespace

Status KdaForward(const KdaWeights& weights, const ModelConfig& config, const float* h, int64_t tokens, KdaState& state,
                  KdaAlgorithm algorithm, float* out) {
  const KdaDims dims = DimsOf(config);
  GLINT_RETURN_IF_ERROR(ValidateArguments(weights, dims, h, tokens, out));
  GLINT_RETURN_IF_ERROR(ValidateState(dims, state));
  KdaForwardCore(weights, config, dims, h, tokens, state.conv_window.data(), state.recurrent.data(), algorithm, out);
  state.tokens_seen += tokens;
  return Status::Ok();
}

Status KdaForward(const KdaWeights& weights, const ModelConfig& config, const float* h, int64_t tokens,
                  const KdaStateView& state, KdaAlgorithm algorithm, float* out) {
  const KdaDims dims = DimsOf(config);
  GLINT_RETURN_IF_ERROR(ValidateArguments(weights, dims, h, tokens, out));
  if (state.conv_window == nullptr || state.recurrent == nullptr) {
    return InvalidArgument("the KDA state view has no memory (null conv window or recurrent state)");
  }
  switch (state.storage) {
    case KdaStateStorage::kFloat32:
      KdaForwardCore(weights, config, dims, h, tokens, state.conv_window, static_cast<float*>(state.recurrent),
                     algorithm, out);
      return Status::Ok();
    case KdaStateStorage::kBfloat16: {
      bf16_bits* stored = static_cast<bf16_bits*>(state.recurrent);
      std::vector<float> recurrent(dims.RecurrentSize());  // [H, d, d] fp32 working copy of S
      for (size_t i = 0; i < recurrent.size(); ++i) recurrent[i] = Bf16ToFloat(stored[i]);
      KdaForwardCore(weights, config, dims, h, tokens, state.conv_window, recurrent.data(), algorithm, out);
      for (size_t i = 0; i < recurrent.size(); ++i) stored[i] = FloatToBf16(recurrent[i]);
      return Status::Ok();
    }
  }
  return InvalidArgument("unknown KDA state storage ", static_cast<int>(state.storage));
}

}  // namespace glint
