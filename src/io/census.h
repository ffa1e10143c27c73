// Parameter and byte census of a GLM-5.3-Flash checkpoint: per tensor group (checkpoint_schema.h TensorGroup) and
// per dtype, from the config alone or exactly from a checkpoint's safetensors headers.
//
// `glint inspect` prints it; `glint plan` builds its memory and roofline figures on it. Two sources:
//   - CensusFromConfig: ExpectedTensors(config) with the release's storage (FP8 payload + F32 block scales for
//     kFp8Block when config.fp8; BF16; F32), plus the vision tower estimated from vision_config (VisionTowerTensors).
//   - CensusFromCheckpoint: every tensor of the safetensors headers, classified by name. Only headers are read
//     (Checkpoint::Open maps the files and parses headers; no tensor byte is touched).
// Parameters count weight elements only; the FP8 block scales (`<name>_scale_inv`) are metadata: their bytes are
// counted in their tensor's group and listed apart, their elements are not parameters.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/checkpoint_schema.h"
#include "io/config.h"
#include "io/safetensors.h"

namespace glint {

struct GroupCensus {
  int64_t weight_tensors = 0;
  int64_t scale_tensors = 0;
  int64_t params = 0;  // weight elements (scales excluded)
  uint64_t weight_bytes = 0;
  uint64_t scale_bytes = 0;  // FP8 block scales (F32)
  std::map<DType, uint64_t> weight_bytes_by_dtype;
  uint64_t TotalBytes() const { return weight_bytes + scale_bytes; }
};

struct DTypeCensus {
  int64_t tensors = 0;
  int64_t elements = 0;  // includes scale elements for F32
  uint64_t bytes = 0;
};

struct CensusProblem {
  std::string name;
  std::string detail;  // what was expected and what was found
};

enum class CensusSource { kConfig, kCheckpoint };

struct Census {
  CensusSource source = CensusSource::kConfig;
  std::array<GroupCensus, kNumTensorGroups> groups;  // indexed by TensorGroup
  GroupCensus unknown;                               // checkpoint tensors no rule explains
  std::map<DType, DTypeCensus> dtypes;
  int64_t tensor_count = 0;  // every tensor, scales included

  // Pieces the active-parameter count needs (see ActiveParams).
  int64_t mtp_routed_expert_params = 0;  // routed experts of the MTP layer (inside group kMtp)
  int64_t embedding_lookup_params = 0;   // embed_tokens (a row lookup, not a matmul)
  bool vision_estimated = false;         // vision figures come from vision_config, not from tensors

  // Checkpoint only.
  std::vector<std::string> unknown_names;
  std::vector<CensusProblem> missing;  // expected tensors (or FP8 scales) absent from the checkpoint
  std::vector<CensusProblem> shape_mismatches;

  const GroupCensus& group(TensorGroup g) const { return groups[static_cast<int>(g)]; }
  GroupCensus& group(TensorGroup g) { return groups[static_cast<int>(g)]; }
  int64_t TotalParams() const;  // all groups + unknown
  uint64_t TotalBytes() const;  // all groups + unknown, scales included
};

// What "active parameters per token" includes. The trunk always counts; routed experts count k/E of their size.
struct ActiveParamsOptions {
  bool include_mtp = false;              // the MTP layer (one draft step per token)
  bool include_vision = false;           // the vision tower (only image tokens run it)
  bool include_embedding_lookup = true;  // embed_tokens: one row is read, no multiply
};

// Parameters a token touches: every group except routed experts in full, routed experts (trunk and, with MTP, the
// MTP layer's) × num_experts_per_tok / n_routed_experts.
double ActiveParams(const Census& census, const ModelConfig& config, const ActiveParamsOptions& options);

// The vision tower of the release (GLM-OCR ViT under `model.visual.`): patch embedding, `depth` pre-norm blocks
// (qkv, proj, per-head q/k RMSNorm, SwiGLU MLP), post-norm, spatial-merge Conv2d, patch merger. Storage BF16.
// The vision tower's binder (vision/tower_weights.h) checks checkpoints against this list, and the census counts it
// when no checkpoint is present. Names and shapes follow HF's Glm5NextVisionModel (docs/vision.md).
std::vector<TensorSpec> VisionTowerTensors(const VisionConfig& vision);

Census CensusFromConfig(const ModelConfig& config);

// `checkpoint` holds only parsed headers (no data is read). `config` supplies the expected names and groups.
Census CensusFromCheckpoint(const Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace glint
