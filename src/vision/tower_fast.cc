#include "vision/tower_fast.h"

#include <algorithm>
#include <cmath>

#include "base/timer.h"
#include "kernels/linear.h"
#include "kernels/vector_ops.h"

namespace glint {

struct FastVisionTower::Scratch {
  int64_t n = 0;
  std::vector<float> x, h, qkv, attn, y;          // [N, hidden], [N, hidden], [N, 3·hidden], [N, hidden], [N, hidden]
  std::vector<float> gate, up;                    // [pass, intermediate]
  std::vector<float> cos_table, sin_table;        // [N, head_dim]
  std::vector<Bf16Matrix> keys;                   // per (frame, head): K [len, head_dim]
  std::vector<std::vector<Bf16Matrix>> values_t;  // per (frame, head): Vᵀ [head_dim, len] in chunks of kKeyChunk keys
  std::vector<std::vector<float>> scores;         // per worker: [query block, len]
  std::vector<std::vector<float>> partial;        // per worker: [query block, head_dim], one key chunk's Vᵀ p
};

namespace {

// Queries per attention task: each task streams its head's packed K and Vᵀ once, so more queries per task read
// them less often (at 1344² a head's K is 1.2 MB); 64 keeps a worker's score rows ([64, len] fp32) near L2 size.
constexpr int64_t kQueryBlock = 64;
// Keys per chunk of Vᵀ in out = Vᵀ p: the kernel streams its weights (here Vᵀ, head_dim × keys) once per 4
// queries, so a whole Vᵀ (1.2 MB per head at 1344²) came from L3 16 times per query block; a chunk of 512 keys
// (64 KB at head_dim 64) stays in L2 across the block. The chunks' products are added in fp32.
constexpr int64_t kKeyChunk = 512;

void RotateHalf(float* x, const float* cos_row, const float* sin_row, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t d = 0; d < half; ++d) {
    const float a = x[d], b = x[d + half];
    x[d] = a * cos_row[d] - b * sin_row[d];
    x[d + half] = b * cos_row[d + half] + a * sin_row[d + half];
  }
}

// [rows, cols] gathered from a strided source into a packed bf16 matrix.
Bf16Matrix PackStrided(const float* source, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                       std::vector<float>& dense) {
  dense.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dense[r * cols + c] = source[r * row_stride + c * col_stride];
  }
  Result<Bf16Matrix> packed = PackBf16FromFloat(dense.data(), rows, cols);
  return packed.ok() ? std::move(*packed) : Bf16Matrix();  // sizes were checked: packing cannot fail here
}

}  // namespace

std::string_view VisionWeightFormatName(VisionWeightFormat format) {
  return format == VisionWeightFormat::kInt8 ? "int8" : "bf16";
}

Result<VisionWeightFormat> ParseVisionWeightFormat(std::string_view name) {
  if (name == "bf16") return VisionWeightFormat::kBf16;
  if (name == "int8") return VisionWeightFormat::kInt8;
  return InvalidArgument("vision weight format '", name, "'; expected bf16 (as released) or int8 (W8A8)");
}

Result<FastVisionTower::PackedLinear> FastVisionTower::Pack(const VisionMatrix& w,
                                                            const std::vector<float>& bias) const {
  PackedLinear l;
  l.rows = w.rows;
  l.cols = w.cols;
  l.bias = bias;
  if (options_.format == VisionWeightFormat::kInt8) {
    GLINT_ASSIGN_OR_RETURN(l.int8, QuantizeInt8(w.data.data(), w.rows, w.cols, options_.int8_group));
    l.int8_view = l.int8.view();
  } else {
    GLINT_ASSIGN_OR_RETURN(l.bf16, PackBf16FromFloat(w.data.data(), w.rows, w.cols));
    l.bf16_view = l.bf16.view();
  }
  return l;
}

Result<FastVisionTower> FastVisionTower::Create(const VisionWeights& w, const VisionConfig& config,
                                                const FastVisionOptions& options) {
  if (!IsaSupported(options.isa))
    return InvalidArgument("kernel level ", IsaName(options.isa), " is not supported here");
  FastVisionTower t;
  t.config_ = config;
  t.options_ = options;
  t.bf16_ = &GetBf16Kernels(options.isa);
  t.int8_ = &GetInt8Kernels(options.isa);
  GLINT_ASSIGN_OR_RETURN(t.patch_embed_, t.Pack(w.patch_embed, w.patch_embed_bias));
  for (const VisionBlockWeights& b : w.blocks) {
    PackedBlock p;
    p.norm1 = b.norm1;
    p.norm2 = b.norm2;
    p.q_norm = b.q_norm;
    p.k_norm = b.k_norm;
    GLINT_ASSIGN_OR_RETURN(p.qkv, t.Pack(b.qkv, b.qkv_bias));
    GLINT_ASSIGN_OR_RETURN(p.proj, t.Pack(b.proj, b.proj_bias));
    GLINT_ASSIGN_OR_RETURN(p.gate, t.Pack(b.gate, b.gate_bias));
    GLINT_ASSIGN_OR_RETURN(p.up, t.Pack(b.up, b.up_bias));
    GLINT_ASSIGN_OR_RETURN(p.down, t.Pack(b.down, b.down_bias));
    t.blocks_.push_back(std::move(p));
  }
  t.post_layernorm_ = w.post_layernorm;
  // Conv2d columns (channel c, position i) → (i, c), so a merge block's m² consecutive rows are one input row.
  const int64_t area = config.MergeArea(), hidden = config.hidden_size;
  VisionMatrix reordered{w.downsample.rows, w.downsample.cols, std::vector<float>(w.downsample.data.size())};
  for (int64_t o = 0; o < reordered.rows; ++o) {
    for (int64_t c = 0; c < hidden; ++c) {
      for (int64_t i = 0; i < area; ++i)
        reordered.data[o * reordered.cols + i * hidden + c] = w.downsample.Row(o)[c * area + i];
    }
  }
  GLINT_ASSIGN_OR_RETURN(t.downsample_, t.Pack(reordered, w.downsample_bias));
  const std::vector<float> none;
  GLINT_ASSIGN_OR_RETURN(t.merger_proj_, t.Pack(w.merger_proj, none));
  GLINT_ASSIGN_OR_RETURN(t.merger_gate_, t.Pack(w.merger_gate, none));
  GLINT_ASSIGN_OR_RETURN(t.merger_up_, t.Pack(w.merger_up, none));
  GLINT_ASSIGN_OR_RETURN(t.merger_down_, t.Pack(w.merger_down, none));
  t.merger_norm_weight_ = w.merger_norm_weight;
  t.merger_norm_bias_ = w.merger_norm_bias;
  return t;
}

uint64_t FastVisionTower::WeightBytes() const {
  uint64_t bytes = 0;
  auto add = [&](const PackedLinear& l) {
    bytes += options_.format == VisionWeightFormat::kInt8
                 ? static_cast<uint64_t>(l.int8_view.layout.code_bytes() + 4 * l.int8_view.layout.scale_count())
                 : static_cast<uint64_t>(2 * l.bf16_view.layout.value_count());
  };
  add(patch_embed_);
  for (const PackedBlock& b : blocks_) {
    for (const PackedLinear* l : {&b.qkv, &b.proj, &b.gate, &b.up, &b.down}) add(*l);
  }
  for (const PackedLinear* l : {&downsample_, &merger_proj_, &merger_gate_, &merger_up_, &merger_down_}) add(*l);
  return bytes;
}

void FastVisionTower::Apply(WorkerPool& pool, const PackedLinear& l, const float* x, int64_t x_stride, int64_t tokens,
                            float* y, int64_t y_stride, VisionRunProfile& profile) {
  const Stopwatch watch;
  if (options_.format == VisionWeightFormat::kInt8) {
    LinearI8(pool, *int8_, l.int8_view, x, x_stride, tokens, y, y_stride, activations_);
  } else {
    LinearBf16(pool, *bf16_, l.bf16_view, x, x_stride, tokens, y, y_stride);
  }
  if (!l.bias.empty()) {
    pool.ParallelFor(tokens, 64, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) vec::Axpy(1.0f, l.bias.data(), l.rows, y + t * y_stride);
    });
  }
  profile.linear_seconds += watch.Seconds();
  profile.linear_macs += static_cast<double>(tokens) * static_cast<double>(l.rows) * static_cast<double>(l.cols);
}

// Attention of one block on s.qkv (q, k normed and rotated): per (frame, head) K and Vᵀ are packed once, then
// tasks of kQueryBlock queries compute scores = K q, p = exp(scores/√d − max), out = (Vᵀ p) / Σ p, Vᵀ p summed over
// chunks of kKeyChunk keys.
void FastVisionTower::RunAttention(WorkerPool& pool, const VisionInput& input, Scratch& s, VisionRunProfile& profile) {
  const Stopwatch watch;
  const int64_t hidden = config_.hidden_size, head_dim = config_.HeadDim(), heads = config_.num_heads;
  const int64_t frame = int64_t{input.grid_h} * input.grid_w, frames = input.grid_t, stride = 3 * hidden;
  s.keys.resize(frames * heads);
  s.values_t.resize(frames * heads);
  pool.Run(frames * heads, [&](int64_t task, int) {
    const float* base = s.qkv.data() + (task / heads) * frame * stride + (task % heads) * head_dim;
    std::vector<float> dense;
    s.keys[task] = PackStrided(base + hidden, frame, head_dim, stride, 1, dense);
    s.values_t[task].clear();
    for (int64_t k0 = 0; k0 < frame; k0 += kKeyChunk) {
      s.values_t[task].push_back(
          PackStrided(base + 2 * hidden + k0 * stride, head_dim, std::min(kKeyChunk, frame - k0), 1, stride, dense));
    }
  });
  const int64_t query_blocks = (frame + kQueryBlock - 1) / kQueryBlock;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  s.scores.resize(pool.size());
  s.partial.resize(pool.size());
  pool.Run(frames * heads * query_blocks, [&](int64_t task, int worker) {
    const int64_t pair = task / query_blocks, q0 = (task % query_blocks) * kQueryBlock;
    const int64_t count = std::min(kQueryBlock, frame - q0), row0 = (pair / heads) * frame + q0;
    const int64_t head = pair % heads;
    std::vector<float>& scores = s.scores[worker];
    scores.resize(count * frame);
    const Bf16MatrixView keys = s.keys[pair].view();
    bf16_->gemm(keys, s.qkv.data() + row0 * stride + head * head_dim, stride, count, 0, keys.layout.row_blocks(),
                scores.data(), frame);
    float sums[kQueryBlock];
    for (int64_t t = 0; t < count; ++t) sums[t] = vec::SoftmaxNumerators(scores.data() + t * frame, frame, scale);
    float* out = s.attn.data() + row0 * hidden + head * head_dim;
    std::vector<float>& partial = s.partial[worker];
    partial.resize(count * head_dim);
    for (size_t c = 0; c < s.values_t[pair].size(); ++c) {
      const Bf16MatrixView chunk = s.values_t[pair][c].view();
      const float* p = scores.data() + static_cast<int64_t>(c) * kKeyChunk;
      if (c == 0) {
        bf16_->gemm(chunk, p, frame, count, 0, chunk.layout.row_blocks(), out, hidden);
        continue;
      }
      bf16_->gemm(chunk, p, frame, count, 0, chunk.layout.row_blocks(), partial.data(), head_dim);
      for (int64_t t = 0; t < count; ++t) vec::Axpy(1.0f, &partial[t * head_dim], head_dim, out + t * hidden);
    }
    for (int64_t t = 0; t < count; ++t) vec::Scale(1.0f / sums[t], out + t * hidden, head_dim, out + t * hidden);
  });
  profile.attention_seconds += watch.Seconds();
  profile.attention_macs += 2.0 * static_cast<double>(frames * heads) * static_cast<double>(frame) *
                            static_cast<double>(frame) * static_cast<double>(head_dim);
}

void FastVisionTower::RunBlock(WorkerPool& pool, const PackedBlock& b, const VisionInput& input, Scratch& s,
                               VisionRunProfile& profile) {
  const int64_t n = s.n, hidden = config_.hidden_size, head_dim = config_.HeadDim(), width = config_.intermediate_size;
  const float eps = config_.rms_norm_eps;
  auto norm_rows = [&](const std::vector<float>& weight) {
    pool.ParallelFor(n, 64, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t)
        vec::RmsNorm(&s.x[t * hidden], weight.data(), hidden, eps, &s.h[t * hidden]);
    });
  };
  norm_rows(b.norm1);
  Apply(pool, b.qkv, s.h.data(), hidden, n, s.qkv.data(), 3 * hidden, profile);
  pool.ParallelFor(n, 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t head = 0; head < config_.num_heads; ++head) {
        float* q = &s.qkv[t * 3 * hidden + head * head_dim];
        float* k = q + hidden;
        vec::RmsNorm(q, b.q_norm.data(), head_dim, eps, q);
        vec::RmsNorm(k, b.k_norm.data(), head_dim, eps, k);
        RotateHalf(q, &s.cos_table[t * head_dim], &s.sin_table[t * head_dim], head_dim);
        RotateHalf(k, &s.cos_table[t * head_dim], &s.sin_table[t * head_dim], head_dim);
      }
    }
  });
  RunAttention(pool, input, s, profile);
  Apply(pool, b.proj, s.attn.data(), hidden, n, s.y.data(), hidden, profile);
  vec::Axpy(1.0f, s.y.data(), n * hidden, s.x.data());

  norm_rows(b.norm2);
  for (int64_t begin = 0; begin < n; begin += options_.max_tokens_per_pass) {
    const int64_t count = std::min(options_.max_tokens_per_pass, n - begin);
    Apply(pool, b.gate, &s.h[begin * hidden], hidden, count, s.gate.data(), width, profile);
    Apply(pool, b.up, &s.h[begin * hidden], hidden, count, s.up.data(), width, profile);
    pool.ParallelFor(count, 16, [&](int64_t r0, int64_t r1, int) {
      for (int64_t t = r0; t < r1; ++t) {
        vec::SwiGlu(&s.gate[t * width], &s.up[t * width], width, config_.swiglu_limit, &s.gate[t * width]);
      }
    });
    Apply(pool, b.down, s.gate.data(), width, count, &s.y[begin * hidden], hidden, profile);
  }
  vec::Axpy(1.0f, s.y.data(), n * hidden, s.x.data());
}

// proj → LayerNorm (eps 1e-5) → exact GELU → clamped SwiGLU, in passes of max_tokens_per_pass rows.
void FastVisionTower::RunMerger(WorkerPool& pool, Scratch& s, int64_t tokens, std::vector<float>& out,
                                VisionTrace* trace, VisionRunProfile& profile) {
  const int64_t dim = config_.out_hidden_size, width = config_.projection_intermediate_size;
  std::vector<float> p(tokens * dim);
  Apply(pool, merger_proj_, s.y.data(), dim, tokens, p.data(), dim, profile);
  pool.ParallelFor(tokens, 8, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = &p[t * dim];
      double mean = 0, var = 0;
      for (int64_t i = 0; i < dim; ++i) mean += row[i];
      mean /= static_cast<double>(dim);
      for (int64_t i = 0; i < dim; ++i) var += (row[i] - mean) * (row[i] - mean);
      const float inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(dim) + 1e-5));
      for (int64_t i = 0; i < dim; ++i) {
        const float normed = (row[i] - static_cast<float>(mean)) * inv * merger_norm_weight_[i] + merger_norm_bias_[i];
        row[i] = 0.5f * normed * (1.0f + std::erf(normed * 0.70710678118654752f));
      }
    }
  });
  out.assign(tokens * dim, 0.0f);
  s.gate.resize(std::max<size_t>(s.gate.size(), std::min(tokens, options_.max_tokens_per_pass) * width));
  s.up.resize(s.gate.size());
  for (int64_t begin = 0; begin < tokens; begin += options_.max_tokens_per_pass) {
    const int64_t count = std::min(options_.max_tokens_per_pass, tokens - begin);
    Apply(pool, merger_gate_, &p[begin * dim], dim, count, s.gate.data(), width, profile);
    Apply(pool, merger_up_, &p[begin * dim], dim, count, s.up.data(), width, profile);
    pool.ParallelFor(count, 8, [&](int64_t r0, int64_t r1, int) {
      for (int64_t t = r0; t < r1; ++t) {
        vec::SwiGlu(&s.gate[t * width], &s.up[t * width], width, config_.swiglu_limit, &s.gate[t * width]);
      }
    });
    Apply(pool, merger_down_, s.gate.data(), width, count, &out[begin * dim], dim, profile);
  }
  if (trace != nullptr) trace->merger = out;
}

Result<std::vector<float>> FastVisionTower::Run(WorkerPool& pool, const VisionInput& input, VisionTrace* trace,
                                                VisionRunProfile* profile) {
  GLINT_RETURN_IF_ERROR(CheckVisionInput(config_, input));
  const Stopwatch watch;
  VisionRunProfile local;
  const int64_t n = input.NumPatches(), hidden = config_.hidden_size, tokens = VisionTokenCount(config_, input);
  Scratch s;
  s.n = n;
  s.x.resize(n * hidden);
  s.h.resize(n * hidden);
  s.qkv.resize(n * 3 * hidden);
  s.attn.resize(n * hidden);
  s.y.resize(n * hidden);
  s.gate.resize(std::min(n, options_.max_tokens_per_pass) * config_.intermediate_size);
  s.up.resize(s.gate.size());
  Apply(pool, patch_embed_, input.patches.data(), config_.PatchValues(), n, s.x.data(), hidden, local);
  if (trace != nullptr) trace->patch_embed = s.x;
  VisionRotaryTables(config_, input, s.cos_table, s.sin_table);
  if (trace != nullptr) trace->blocks.clear();
  for (const PackedBlock& block : blocks_) {
    RunBlock(pool, block, input, s, local);
    if (trace != nullptr) trace->blocks.push_back(s.x);
  }
  pool.ParallelFor(n, 64, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      vec::RmsNorm(&s.x[t * hidden], post_layernorm_.data(), hidden, config_.rms_norm_eps, &s.x[t * hidden]);
    }
  });
  if (trace != nullptr) trace->post_layernorm = s.x;
  // A merge block's m² rows are contiguous: the downsample's input row is m²·hidden values (weights reordered).
  s.y.resize(tokens * config_.out_hidden_size);
  Apply(pool, downsample_, s.x.data(), config_.MergeArea() * hidden, tokens, s.y.data(), config_.out_hidden_size,
        local);
  if (trace != nullptr) trace->downsample = s.y;
  std::vector<float> out;
  RunMerger(pool, s, tokens, out, trace, local);
  local.total_seconds = watch.Seconds();
  if (profile != nullptr) *profile = local;
  return out;
}

}  // namespace glint
