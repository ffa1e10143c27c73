// Weight bytes under the quantisation schemes of `glint plan`, tensor by tensor, with their metadata (scales,
// zero points) apart; and the matmul work per token by the dtype each tensor computes in.
//
//   R  as released: stored dtypes (FP8 e4m3 + F32 128×128 block scales, BF16, F32)
//   A  all bf16
//   B  MoE (routed + shared experts) int8, rest bf16
//   C  all int8 except embeddings, vision, router, mHC and norms (kept bf16)
//   D  MoE int4 with group scales, rest as C
//   E  routed experts int4 with group scales, shared experts int8, rest as C: glint's fast path with
//      `--experts int4` (W4A8; its exact metadata is --assume int4_group_size=64,quant_scale_bytes=4)
// In every scheme the tensors stored F32 (A_log, dt_bias, conv weights, hc_*, e_score_correction_bias) stay F32:
// the engine keeps them so (design.md §4). 1-D tensors (norms, biases) are never quantised.
// int8 of [rows, K]: rows·K bytes + rows·ceil(K / int8_group_size) scales; int4: rows·K/2 bytes + rows·ceil(K /
// int4_group_size) × (scale + zero point) — K is the last dimension.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "io/checkpoint_schema.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "plan/assumptions.h"
#include "plan/hardware.h"

namespace glint::plan {

enum class Scheme { kRelease, kA, kB, kC, kD, kE };
std::string_view SchemeLetter(Scheme scheme);  // "R", "A", ...
std::string_view SchemeDescription(Scheme scheme);
const std::vector<Scheme>& AllSchemes();            // R, A, B, C, D, E
Result<Scheme> ParseScheme(std::string_view name);  // a letter, case-insensitive

enum class WeightFormat { kF32, kBf16, kFp8Block, kInt8, kInt4 };

// One weight tensor (block scales are folded into their tensor's stored bytes).
struct WeightTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::optional<TensorGroup> group;  // nullopt: a checkpoint tensor no rule explains
  DType stored = DType::kBF16;
  uint64_t stored_bytes = 0;  // as released: payload + block scales
  bool routed_expert = false;
  bool shared_expert = false;
  bool router = false;        // mlp.gate.weight / e_score_correction_bias
  bool mtp = false;           // in the MTP layer
  bool embed_lookup = false;  // embed_tokens: one row read per token, no multiply

  int64_t Elements() const;
};

struct WeightSet {
  std::vector<WeightTensor> tensors;
  bool from_checkpoint = false;
};

// From ExpectedTensors(config) + the vision tower estimate, stored as the release stores them.
WeightSet WeightsFromConfig(const ModelConfig& config);
// From a checkpoint's headers (exact shapes and dtypes); `_scale_inv` tensors fold into their tensor.
WeightSet WeightsFromCheckpoint(const Checkpoint& checkpoint, const ModelConfig& config);

WeightFormat FormatUnder(Scheme scheme, const WeightTensor& tensor);

struct TensorBytes {
  double payload = 0;
  double metadata = 0;  // scales and zero points
  double Total() const { return payload + metadata; }
};
TensorBytes BytesUnder(WeightFormat format, const WeightTensor& tensor, const Assumptions& assumptions);

// A scheme's footprint, split the ways the memory and roofline models need.
struct SchemeFootprint {
  Scheme scheme = Scheme::kA;
  TensorBytes all;                // every tensor
  double routed_bytes = 0;        // routed experts, trunk + MTP (expert-parallel)
  double routed_trunk_bytes = 0;  // routed experts of the trunk only
  double other_bytes = 0;         // everything else (split evenly over chips)
  // Read by one decode step of the trunk, besides the routed experts: no MTP, no vision, no embed_tokens.
  double decode_dense_bytes = 0;
  // 2 × parameters × (k/E for routed experts) per token of the trunk, by the dtype the weights are stored in
  // (the chip decides the dtype it computes in; Chip::EffectivePeak). Excludes MTP, vision, the embedding lookup.
  std::map<ComputeDType, double> matmul_flops_per_token;
  std::array<double, kNumTensorGroups> group_bytes{};
  double unknown_bytes = 0;
};

SchemeFootprint Footprint(Scheme scheme, const WeightSet& weights, const ModelConfig& config,
                          const Assumptions& assumptions);

}  // namespace glint::plan
