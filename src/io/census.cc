#include "io/census.h"

#include <algorithm>
#include <unordered_map>

namespace glint {
namespace {

constexpr std::string_view kScaleSuffix = "_scale_inv";

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

void AddWeight(Census& census, GroupCensus& group, DType dtype, int64_t elements, uint64_t bytes) {
  group.weight_tensors += 1;
  group.params += elements;
  group.weight_bytes += bytes;
  group.weight_bytes_by_dtype[dtype] += bytes;
  DTypeCensus& by_dtype = census.dtypes[dtype];
  by_dtype.tensors += 1;
  by_dtype.elements += elements;
  by_dtype.bytes += bytes;
  census.tensor_count += 1;
}

void AddScale(Census& census, GroupCensus& group, DType dtype, int64_t elements, uint64_t bytes) {
  group.scale_tensors += 1;
  group.scale_bytes += bytes;
  DTypeCensus& by_dtype = census.dtypes[dtype];
  by_dtype.tensors += 1;
  by_dtype.elements += elements;
  by_dtype.bytes += bytes;
  census.tensor_count += 1;
}

// Bookkeeping shared by both sources for the pieces ActiveParams needs.
void NoteSpecialTensor(Census& census, const TensorSpec& spec, int64_t elements) {
  if (spec.group == TensorGroup::kMtp && spec.expert >= 0) census.mtp_routed_expert_params += elements;
  if (spec.name == std::string(kLanguageModelPrefix) + "embed_tokens.weight") {
    census.embedding_lookup_params += elements;
  }
}

}  // namespace

int64_t Census::TotalParams() const {
  int64_t total = unknown.params;
  for (const GroupCensus& g : groups) total += g.params;
  return total;
}

uint64_t Census::TotalBytes() const {
  uint64_t total = unknown.TotalBytes();
  for (const GroupCensus& g : groups) total += g.TotalBytes();
  return total;
}

double ActiveParams(const Census& census, const ModelConfig& config, const ActiveParamsOptions& options) {
  // Routed experts are read in proportion k/E per token: each MoE layer runs num_experts_per_tok of
  // n_routed_experts experts of equal size.
  const double routed_fraction =
      static_cast<double>(config.num_experts_per_tok) / static_cast<double>(config.n_routed_experts);
  double active = 0;
  for (int g = 0; g < kNumTensorGroups; ++g) {
    const auto group = static_cast<TensorGroup>(g);
    const double params = static_cast<double>(census.groups[g].params);
    switch (group) {
      case TensorGroup::kRoutedExperts:
        active += params * routed_fraction;
        break;
      case TensorGroup::kMtp:
        if (options.include_mtp) {
          const double routed = static_cast<double>(census.mtp_routed_expert_params);
          active += (params - routed) + routed * routed_fraction;
        }
        break;
      case TensorGroup::kVision:
        if (options.include_vision) active += params;
        break;
      default:
        active += params;
        break;
    }
  }
  if (!options.include_embedding_lookup) active -= static_cast<double>(census.embedding_lookup_params);
  return active;
}

std::vector<TensorSpec> VisionTowerTensors(const VisionConfig& v) {
  std::vector<TensorSpec> specs;
  if (!v.present) return specs;
  const std::string p = "model.visual.";
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    specs.push_back({p + std::move(name), std::move(shape), TensorStorage::kBf16, TensorGroup::kVision});
  };
  const int64_t h = v.hidden_size;
  const int64_t head_dim = h / v.num_heads;
  // Conv3d over (temporal_patch, patch, patch) pixels of in_channels, with bias.
  add("patch_embed.proj.weight", {h, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size});
  add("patch_embed.proj.bias", {h});
  for (int64_t i = 0; i < v.depth; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    add(b + "norm1.weight", {h});
    add(b + "norm2.weight", {h});
    add(b + "attn.qkv.weight", {3 * h, h});
    add(b + "attn.proj.weight", {h, h});
    add(b + "attn.q_norm.weight", {head_dim});
    add(b + "attn.k_norm.weight", {head_dim});
    add(b + "mlp.gate_proj.weight", {v.intermediate_size, h});
    add(b + "mlp.up_proj.weight", {v.intermediate_size, h});
    add(b + "mlp.down_proj.weight", {h, v.intermediate_size});
    if (v.attention_bias) {
      add(b + "attn.qkv.bias", {3 * h});
      add(b + "attn.proj.bias", {h});
      add(b + "mlp.gate_proj.bias", {v.intermediate_size});
      add(b + "mlp.up_proj.bias", {v.intermediate_size});
      add(b + "mlp.down_proj.bias", {h});
    }
  }
  add("post_layernorm.weight", {h});
  // spatial_merge × spatial_merge patches → one token of out_hidden_size.
  add("downsample.weight", {v.out_hidden_size, h, v.spatial_merge_size, v.spatial_merge_size});
  add("downsample.bias", {v.out_hidden_size});
  add("merger.proj.weight", {v.out_hidden_size, v.out_hidden_size});
  add("merger.post_projection_norm.weight", {v.out_hidden_size});
  add("merger.post_projection_norm.bias", {v.out_hidden_size});
  add("merger.gate_proj.weight", {v.projection_intermediate_size, v.out_hidden_size});
  add("merger.up_proj.weight", {v.projection_intermediate_size, v.out_hidden_size});
  add("merger.down_proj.weight", {v.out_hidden_size, v.projection_intermediate_size});
  return specs;
}

Census CensusFromConfig(const ModelConfig& config) {
  Census census;
  census.source = CensusSource::kConfig;
  std::vector<TensorSpec> specs = ExpectedTensors(config);
  for (TensorSpec& spec : VisionTowerTensors(config.vision)) specs.push_back(std::move(spec));
  census.vision_estimated = config.vision.present;
  for (const TensorSpec& spec : specs) {
    const int64_t elements = ElementCount(spec.shape);
    GroupCensus& group = census.group(spec.group);
    NoteSpecialTensor(census, spec, elements);
    switch (spec.storage) {
      case TensorStorage::kFp8Block:
        if (config.fp8) {
          // e4m3 payload, one byte per weight, plus an F32 scale per fp8_block_rows × fp8_block_cols block.
          AddWeight(census, group, DType::kF8E4M3, elements, static_cast<uint64_t>(elements));
          const int64_t scales = ElementCount(ScaleShape(spec.shape, config.fp8_block_rows, config.fp8_block_cols));
          AddScale(census, group, DType::kF32, scales, static_cast<uint64_t>(scales) * 4);
        } else {
          // An unquantized export (GLM-5.3-Flash-BF16) stores these in BF16 without scales.
          AddWeight(census, group, DType::kBF16, elements, static_cast<uint64_t>(elements) * 2);
        }
        break;
      case TensorStorage::kBf16:
        AddWeight(census, group, DType::kBF16, elements, static_cast<uint64_t>(elements) * 2);
        break;
      case TensorStorage::kF32:
        AddWeight(census, group, DType::kF32, elements, static_cast<uint64_t>(elements) * 4);
        break;
    }
  }
  return census;
}

Census CensusFromCheckpoint(const Checkpoint& checkpoint, const ModelConfig& config) {
  Census census;
  census.source = CensusSource::kCheckpoint;
  const std::vector<TensorSpec> specs = ExpectedTensors(config);
  std::unordered_map<std::string_view, const TensorSpec*> by_name;
  for (const TensorSpec& spec : specs) by_name.emplace(spec.name, &spec);

  for (const TensorInfo& info : checkpoint.tensors()) {
    const std::string_view name = info.name;
    const int64_t elements = info.NumElements();
    const uint64_t bytes = info.NumBytes();
    if (auto it = by_name.find(name); it != by_name.end()) {
      const TensorSpec& spec = *it->second;
      if (info.shape != spec.shape) {
        census.shape_mismatches.push_back(
            {info.name, StrCat("expected ", ShapeText(spec.shape), ", found ", info.ShapeString())});
      }
      NoteSpecialTensor(census, spec, elements);
      AddWeight(census, census.group(spec.group), info.dtype, elements, bytes);
      continue;
    }
    if (name.ends_with(kScaleSuffix)) {
      const std::string_view base = name.substr(0, name.size() - kScaleSuffix.size());
      if (auto it = by_name.find(base); it != by_name.end()) {
        AddScale(census, census.group(it->second->group), info.dtype, elements, bytes);
        continue;
      }
      if (IsVisionTensorName(base)) {
        AddScale(census, census.group(TensorGroup::kVision), info.dtype, elements, bytes);
        continue;
      }
    }
    if (IsVisionTensorName(name)) {
      AddWeight(census, census.group(TensorGroup::kVision), info.dtype, elements, bytes);
      continue;
    }
    census.unknown_names.push_back(info.name);
    AddWeight(census, census.unknown, info.dtype, elements, bytes);
  }

  for (const TensorSpec& spec : specs) {
    const TensorInfo* info = checkpoint.Find(spec.name);
    if (info == nullptr) {
      census.missing.push_back({spec.name, StrCat("expected ", ShapeText(spec.shape), ", not in the checkpoint")});
      continue;
    }
    // An FP8 payload needs its block scales to mean anything.
    if (info->dtype == DType::kF8E4M3 && checkpoint.Find(spec.name + std::string(kScaleSuffix)) == nullptr) {
      census.missing.push_back(
          {spec.name + std::string(kScaleSuffix),
           StrCat("the block scales of F8_E4M3 tensor ", spec.name, " are not in the checkpoint")});
    }
  }
  std::sort(census.unknown_names.begin(), census.unknown_names.end());
  return census;
}

}  // namespace glint
