// The checkpoint's tensor inventory, derived from a ModelConfig (docs/model-glm53.md §2, §9).
//
// One table serves every consumer: weight binding checks a checkpoint against it, `glint make-tiny` writes it,
// `glint inspect` and `glint plan` group and count it. Names use the HF layout: prefix
// `model.language_model.`, `lm_head.weight` at the top level, the MTP layer as `layers.<num_hidden_layers>`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/config.h"

namespace glint {

// How a tensor is stored in the release.
enum class TensorStorage {
  kFp8Block,  // F8_E4M3 payload + `<name>_scale_inv` F32 [ceil(out/block), ceil(in/block)] (or a float dtype
              // without scales in a dequantized export such as GLM-5.3-Flash-BF16)
  kBf16,      // BF16 in the release; F16/F32 accepted
  kF32,       // F32 in the release (small tensors whose precision matters, pitfall 13); BF16/F16 accepted
};

// Parameter groups used by `inspect` and `plan`.
enum class TensorGroup {
  kEmbedding,       // embed_tokens + lm_head
  kKda,             // KDA projections, convs, gate parameters, o_norm
  kMla,             // MLA projections and their norms
  kIndexer,         // DSA indexer
  kDenseMlp,        // dense MLP layers
  kRoutedExperts,   // routed experts
  kSharedExperts,   // shared experts
  kRouterMhcNorms,  // router, mHC, layer norms, final norm
  kMtp,             // everything in the MTP layer
  kVision,          // model.visual.*
};
constexpr int kNumTensorGroups = 10;
std::string_view TensorGroupName(TensorGroup group);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // [out, in] for linear weights
  TensorStorage storage;
  TensorGroup group;
  int layer = -1;   // -1 for embeddings and final norm; num_hidden_layers for MTP
  int expert = -1;  // routed expert index, or -1
};

constexpr std::string_view kLanguageModelPrefix = "model.language_model.";

std::string LayerPrefix(int64_t layer);  // "model.language_model.layers.<layer>."

// Every text-path tensor of the checkpoint for `config`, in a stable order (embeddings, layers in order, MTP,
// final norm, lm_head). Does not include `_scale_inv` companions; see ScaleShape.
std::vector<TensorSpec> ExpectedTensors(const ModelConfig& config);

// Shape of the `_scale_inv` of an FP8 tensor of `shape` with block rows × cols.
std::vector<int64_t> ScaleShape(const std::vector<int64_t>& shape, int64_t block_rows, int64_t block_cols);

// True for names the text path ignores on purpose: the vision tower (`model.visual.*`).
bool IsVisionTensorName(std::string_view name);

}  // namespace glint
