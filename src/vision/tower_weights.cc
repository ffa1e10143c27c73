#include "vision/tower_weights.h"

#include <cmath>
#include <cstring>
#include <map>

#include "io/census.h"
#include "io/checkpoint_schema.h"
#include "quant/formats.h"

namespace glint {
namespace {

constexpr std::string_view kVisionPrefix = "model.visual.";

Result<std::vector<float>> DecodeVisionTensor(const TensorView& view) {
  const int64_t count = view.info->NumElements();
  std::vector<float> out(static_cast<size_t>(count));
  const uint8_t* bytes = view.bytes.data();
  for (int64_t i = 0; i < count; ++i) {
    uint16_t half = 0;
    switch (view.dtype()) {
      case DType::kF32:
        std::memcpy(&out[i], bytes + 4 * i, 4);  // safetensors data need not be aligned
        break;
      case DType::kBF16:
        std::memcpy(&half, bytes + 2 * i, 2);
        out[i] = Bf16ToFloat(half);
        break;
      case DType::kF16:
        std::memcpy(&half, bytes + 2 * i, 2);
        out[i] = Fp16ToFloat(half);
        break;
      default:
        return InvalidArgument("vision tensor '", view.info->name, "' is ", DTypeName(view.dtype()),
                               "; expected BF16 (as released), F32 or F16");
    }
    if (!std::isfinite(out[i])) {
      return InvalidArgument("vision tensor '", view.info->name, "' holds a non-finite value at flat index ", i,
                             ": the checkpoint is corrupt");
    }
  }
  return out;
}

class VisionBinder {
 public:
  VisionBinder(const Checkpoint& checkpoint, const VisionConfig& config) : checkpoint_(checkpoint) {
    for (TensorSpec& spec : VisionTowerTensors(config)) specs_.emplace(spec.name, std::move(spec));
  }

  // Every `model.visual.` tensor of the checkpoint is one the architecture has (checked before any is read).
  Status CheckNames() const {
    for (const TensorInfo& info : checkpoint_.tensors()) {
      if (IsVisionTensorName(info.name) && !specs_.count(info.name)) {
        return InvalidArgument("vision tensor '", info.name, "' ", info.ShapeString(),
                               " is not part of the GLM-5.3 tower (docs/vision.md lists its tensors; e.g. glm4v's "
                               "learned position embeddings and post-conv norm were removed in this architecture)");
      }
    }
    return Status::Ok();
  }

  Result<std::vector<float>> Vector(const std::string& name) {
    const TensorSpec& spec = specs_.at(std::string(kVisionPrefix) + name);
    const TensorInfo* info = checkpoint_.Find(spec.name);
    if (info == nullptr) {
      return NotFound("vision tensor '", spec.name, "' ", ShapeString(spec.shape),
                      " is missing from the checkpoint (the tower needs every tensor of docs/vision.md)");
    }
    if (info->shape != spec.shape) {
      return InvalidArgument("vision tensor '", spec.name, "' has shape ", info->ShapeString(), "; the vision_config ",
                             "implies ", ShapeString(spec.shape));
    }
    return DecodeVisionTensor(checkpoint_.ViewOf(*info));
  }
  // A weight as a matrix [shape[0], product of the rest] (conv kernels flattened in their stored order).
  Status Matrix(const std::string& name, VisionMatrix& out) {
    GLINT_ASSIGN_OR_RETURN(out.data, Vector(name));
    const TensorSpec& spec = specs_.at(std::string(kVisionPrefix) + name);
    out.rows = spec.shape[0];
    out.cols = static_cast<int64_t>(out.data.size()) / out.rows;
    return Status::Ok();
  }

 private:
  const Checkpoint& checkpoint_;
  std::map<std::string, TensorSpec> specs_;
};

Status BindBlock(VisionBinder& bind, const VisionConfig& config, int64_t index, VisionBlockWeights& block) {
  const std::string b = "blocks." + std::to_string(index) + ".";
  GLINT_ASSIGN_OR_RETURN(block.norm1, bind.Vector(b + "norm1.weight"));
  GLINT_ASSIGN_OR_RETURN(block.norm2, bind.Vector(b + "norm2.weight"));
  GLINT_RETURN_IF_ERROR(bind.Matrix(b + "attn.qkv.weight", block.qkv));
  GLINT_RETURN_IF_ERROR(bind.Matrix(b + "attn.proj.weight", block.proj));
  GLINT_ASSIGN_OR_RETURN(block.q_norm, bind.Vector(b + "attn.q_norm.weight"));
  GLINT_ASSIGN_OR_RETURN(block.k_norm, bind.Vector(b + "attn.k_norm.weight"));
  GLINT_RETURN_IF_ERROR(bind.Matrix(b + "mlp.gate_proj.weight", block.gate));
  GLINT_RETURN_IF_ERROR(bind.Matrix(b + "mlp.up_proj.weight", block.up));
  GLINT_RETURN_IF_ERROR(bind.Matrix(b + "mlp.down_proj.weight", block.down));
  if (config.attention_bias) {
    GLINT_ASSIGN_OR_RETURN(block.qkv_bias, bind.Vector(b + "attn.qkv.bias"));
    GLINT_ASSIGN_OR_RETURN(block.proj_bias, bind.Vector(b + "attn.proj.bias"));
    GLINT_ASSIGN_OR_RETURN(block.gate_bias, bind.Vector(b + "mlp.gate_proj.bias"));
    GLINT_ASSIGN_OR_RETURN(block.up_bias, bind.Vector(b + "mlp.up_proj.bias"));
    GLINT_ASSIGN_OR_RETURN(block.down_bias, bind.Vector(b + "mlp.down_proj.bias"));
  }
  return Status::Ok();
}

}  // namespace

bool CheckpointHasVisionTower(const Checkpoint& checkpoint) {
  for (const TensorInfo& info : checkpoint.tensors()) {
    if (IsVisionTensorName(info.name)) return true;
  }
  return false;
}

Result<VisionWeights> LoadVisionWeights(const Checkpoint& checkpoint, const VisionConfig& config) {
  if (!config.present) return FailedPrecondition("the config has no vision_config: the model takes no images");
  if (!CheckpointHasVisionTower(checkpoint)) {
    return FailedPrecondition("the checkpoint has no vision tower tensors (model.visual.*): it is text-only");
  }
  VisionBinder bind(checkpoint, config);
  GLINT_RETURN_IF_ERROR(bind.CheckNames());
  VisionWeights w;
  GLINT_RETURN_IF_ERROR(bind.Matrix("patch_embed.proj.weight", w.patch_embed));
  GLINT_ASSIGN_OR_RETURN(w.patch_embed_bias, bind.Vector("patch_embed.proj.bias"));
  w.blocks.resize(static_cast<size_t>(config.depth));
  for (int64_t i = 0; i < config.depth; ++i) GLINT_RETURN_IF_ERROR(BindBlock(bind, config, i, w.blocks[i]));
  GLINT_ASSIGN_OR_RETURN(w.post_layernorm, bind.Vector("post_layernorm.weight"));
  GLINT_RETURN_IF_ERROR(bind.Matrix("downsample.weight", w.downsample));
  GLINT_ASSIGN_OR_RETURN(w.downsample_bias, bind.Vector("downsample.bias"));
  GLINT_RETURN_IF_ERROR(bind.Matrix("merger.proj.weight", w.merger_proj));
  GLINT_ASSIGN_OR_RETURN(w.merger_norm_weight, bind.Vector("merger.post_projection_norm.weight"));
  GLINT_ASSIGN_OR_RETURN(w.merger_norm_bias, bind.Vector("merger.post_projection_norm.bias"));
  GLINT_RETURN_IF_ERROR(bind.Matrix("merger.gate_proj.weight", w.merger_gate));
  GLINT_RETURN_IF_ERROR(bind.Matrix("merger.up_proj.weight", w.merger_up));
  GLINT_RETURN_IF_ERROR(bind.Matrix("merger.down_proj.weight", w.merger_down));
  return w;
}

}  // namespace glint
