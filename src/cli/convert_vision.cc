#include "cli/convert_vision.h"

#include <cstring>

#include "vision/tower_weights.h"

namespace glint::cli {

Result<VisionConversion> PlanVisionTower(const Checkpoint& checkpoint, const ModelConfig& config,
                                         VisionWeightFormat format, int64_t int8_group,
                                         std::vector<PlannedTensor>& plan) {
  VisionConversion conversion;
  if (!config.vision.present) {
    conversion.metadata = "none: the config has no vision_config (text-only)";
    return conversion;
  }
  if (!CheckpointHasVisionTower(checkpoint)) {
    conversion.metadata = "none: the checkpoint has no model.visual.* tensors";
    return conversion;
  }
  FastVisionOptions options;
  options.format = format;
  options.int8_group = int8_group;
  {
    // The fp32 weights (2.2 GB at release widths) live only while the tower packs them.
    GLINT_ASSIGN_OR_RETURN(VisionWeights weights, LoadVisionWeights(checkpoint, config.vision));
    GLINT_ASSIGN_OR_RETURN(FastVisionTower tower, FastVisionTower::Create(weights, config.vision, options));
    conversion.tower = std::make_shared<FastVisionTower>(std::move(tower));
  }
  for (const ContainerEntry& entry : conversion.tower->StoredTensors()) {
    PlannedTensor t{entry.name, entry.kind, entry.dims, {}, {}};
    for (const auto& blob : entry.blobs) t.blob_bytes.push_back(blob.size());
    // The blobs view the tower, which the captured pointer keeps alive until the plan is gone.
    t.fill = [tower = conversion.tower, blobs = entry.blobs](std::vector<std::span<uint8_t>>& out,
                                                             WorkerPool&) -> Status {
      for (size_t b = 0; b < blobs.size(); ++b) std::memcpy(out[b].data(), blobs[b].data(), blobs[b].size());
      return Status::Ok();
    };
    plan.push_back(std::move(t));
  }
  conversion.metadata = std::string(VisionWeightFormatName(format));
  return conversion;
}

}  // namespace glint::cli
