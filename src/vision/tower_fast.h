// The fast vision tower: the same equations as tower_reference.h on glint's GEMM kernels (kernels/linear.h).
//
// Linear layers run on packed bf16 weights (the checkpoint's values, bit-exact; the default, as the tower is
// released in BF16) or on W8A8 int8 (a scale per row and K-group, activations quantized per token and group).
// Attention runs per (frame, head) as two products on the bf16 kernel: scores = K q with K [len, head_dim]
// packed as the "weight" (rounded to bf16), then P V with Vᵀ [head_dim, len] packed the same way; q and the
// probabilities stay fp32. Norms, the rotary, softmax, GELU and the clamped SwiGLU are fp32 vector code.
//
// Error against the reference (derived in docs/vision.md, checked by tests/unit/vision_tower_test.cc): bf16
// weights are exact, so the bf16 tower differs only by fp32 accumulation and the bf16 rounding of K and V
// (relative 2^-9 per element); int8 adds the W8A8 rounding of every linear layer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/worker_pool.h"
#include "io/config.h"
#include "io/weight_container.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_i8.h"
#include "kernels/isa.h"
#include "quant/bf16_matrix.h"
#include "quant/int8_matrix.h"
#include "vision/tower.h"
#include "vision/tower_weights.h"

namespace glint {

enum class VisionWeightFormat { kBf16, kInt8 };
std::string_view VisionWeightFormatName(VisionWeightFormat format);  // "bf16", "int8"
Result<VisionWeightFormat> ParseVisionWeightFormat(std::string_view name);

struct FastVisionOptions {
  Isa isa = BestIsa();
  VisionWeightFormat format = VisionWeightFormat::kBf16;
  int64_t int8_group = 128;            // K-group of int8 weights (as the text fast path)
  int64_t max_tokens_per_pass = 1024;  // rows per MLP pass: bounds the [rows, intermediate] buffers
};

// Where the time of one Run went (wall seconds) and the multiply-adds done in each part.
struct VisionRunProfile {
  double linear_seconds = 0, attention_seconds = 0, total_seconds = 0;
  double linear_macs = 0, attention_macs = 0;
};

class FastVisionTower {
 public:
  static Result<FastVisionTower> Create(const VisionWeights& weights, const VisionConfig& config,
                                        const FastVisionOptions& options = {});

  // Image-token embeddings [VisionTokenCount, out_hidden_size]; trace and profile are optional.
  Result<std::vector<float>> Run(WorkerPool& pool, const VisionInput& input, VisionTrace* trace = nullptr,
                                 VisionRunProfile* profile = nullptr);

  const VisionConfig& config() const { return config_; }
  VisionWeightFormat format() const { return options_.format; }
  uint64_t WeightBytes() const;  // packed weights held

  // The packed tower as container entries (tower_store.cc; names and kinds documented there), viewing this
  // tower's memory: `glint convert` writes them into model.glint beside the text model's tensors.
  std::vector<ContainerEntry> StoredTensors() const;
  // The tower over stored entries (a mapped container's): `find` returns the entry of a name or nullptr; the
  // matrices are viewed in place, not copied, and `storage` (the mapping) is kept alive by the tower. The weight
  // format is the entries' (bf16 or int8); options.format is ignored. Errors name the entry and what was expected.
  static Result<FastVisionTower> FromStored(const VisionConfig& config, const FastVisionOptions& options,
                                            const std::function<const ContainerEntry*(const std::string&)>& find,
                                            std::shared_ptr<const void> storage);

 private:
  struct PackedLinear {
    int64_t rows = 0, cols = 0;
    Bf16Matrix bf16;           // format kBf16, when packed by this tower (empty when viewing stored entries)
    Int8Matrix int8;           // format kInt8, likewise
    Bf16MatrixView bf16_view;  // what the kernels read: `bf16`'s or a stored entry's
    Int8MatrixView int8_view;
    std::vector<float> bias;  // [rows] or empty
  };
  struct PackedBlock {
    std::vector<float> norm1, norm2, q_norm, k_norm;
    PackedLinear qkv, proj, gate, up, down;
  };
  struct Scratch;

  Result<PackedLinear> Pack(const VisionMatrix& w, const std::vector<float>& bias) const;
  // Calls linear(name, packed, rows, cols, has_bias) and vector(name, values, size) for every tensor, in store
  // order (tower_store.cc); `Tower` is FastVisionTower or const FastVisionTower.
  template <typename Tower, typename LinearFn, typename VectorFn>
  static void VisitTensors(Tower& tower, LinearFn linear, VectorFn vector);
  // y [tokens, l.rows] (row stride y_stride) = W x + b.
  void Apply(WorkerPool& pool, const PackedLinear& l, const float* x, int64_t x_stride, int64_t tokens, float* y,
             int64_t y_stride, VisionRunProfile& profile);
  void RunBlock(WorkerPool& pool, const PackedBlock& block, const VisionInput& input, Scratch& s,
                VisionRunProfile& profile);
  void RunAttention(WorkerPool& pool, const VisionInput& input, Scratch& s, VisionRunProfile& profile);
  void RunMerger(WorkerPool& pool, Scratch& s, int64_t tokens, std::vector<float>& out, VisionTrace* trace,
                 VisionRunProfile& profile);

  VisionConfig config_;
  FastVisionOptions options_;
  const Bf16Kernels* bf16_ = nullptr;
  const Int8Kernels* int8_ = nullptr;
  PackedLinear patch_embed_;
  std::vector<PackedBlock> blocks_;
  std::vector<float> post_layernorm_;
  PackedLinear downsample_;  // columns reordered to (position in merge block, channel): rows are contiguous
  PackedLinear merger_proj_, merger_gate_, merger_up_, merger_down_;
  std::vector<float> merger_norm_weight_, merger_norm_bias_;
  ActivationScratch activations_;
  std::shared_ptr<const void> storage_;  // the mapping stored views point into (FromStored), or null
};

}  // namespace glint
