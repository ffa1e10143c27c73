// Weights of the vision tower (`model.visual.*`, docs/vision.md) as fp32, bound by name from a checkpoint with
// every shape checked against the VisionConfig (the list is io/census.h VisionTowerTensors, the same one
// `glint inspect` and the planner count). Conventions as the text path: row-major, linear weights [out, in].
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "io/safetensors.h"

namespace glint {

struct VisionMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> data;  // [rows · cols]

  const float* Row(int64_t r) const { return data.data() + r * cols; }
};

struct VisionBlockWeights {
  std::vector<float> norm1, norm2;                   // [hidden] RMSNorm weights
  VisionMatrix qkv;                                  // [3·hidden, hidden]: rows q (head-major), then k, then v
  VisionMatrix proj;                                 // [hidden, hidden]
  std::vector<float> qkv_bias, proj_bias;            // [3·hidden], [hidden]; empty without attention_bias
  std::vector<float> q_norm, k_norm;                 // [head_dim] per-head RMSNorm weights
  VisionMatrix gate, up;                             // [intermediate, hidden]
  VisionMatrix down;                                 // [hidden, intermediate]
  std::vector<float> gate_bias, up_bias, down_bias;  // empty without attention_bias
};

struct VisionWeights {
  VisionMatrix patch_embed;             // [hidden, C·T·P·P]  (Conv3d weight [hidden, C, T, P, P] flattened)
  std::vector<float> patch_embed_bias;  // [hidden]
  std::vector<VisionBlockWeights> blocks;
  std::vector<float> post_layernorm;   // [hidden]
  VisionMatrix downsample;             // [out_hidden, hidden·m²]  (Conv2d weight [out, hidden, m, m] flattened)
  std::vector<float> downsample_bias;  // [out_hidden]
  VisionMatrix merger_proj;            // [out_hidden, out_hidden], no bias
  std::vector<float> merger_norm_weight, merger_norm_bias;  // [out_hidden] LayerNorm
  VisionMatrix merger_gate, merger_up;                      // [projection_intermediate, out_hidden], no bias
  VisionMatrix merger_down;                                 // [out_hidden, projection_intermediate], no bias
};

// True when the checkpoint holds any `model.visual.` tensor.
bool CheckpointHasVisionTower(const Checkpoint& checkpoint);

// Binds the tower. Errors name the tensor: missing, wrong shape, a dtype other than F32/BF16/F16, non-finite
// values; a `model.visual.` tensor the architecture does not have is refused too (it would be silently unused).
// A checkpoint without any vision tensor is a FailedPrecondition saying the model is text-only.
Result<VisionWeights> LoadVisionWeights(const Checkpoint& checkpoint, const VisionConfig& config);

}  // namespace glint
