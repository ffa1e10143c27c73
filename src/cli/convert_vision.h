// The vision tower in a `glint convert` container (docs/vision.md "In a container"): the fast tower packed from
// the checkpoint's `model.visual.*` exactly as a load from the checkpoint packs it, appended to the text plan.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "packed/fast_convert.h"
#include "vision/image_encoder.h"
#include "vision/tower_fast.h"

namespace glint::cli {

struct VisionConversion {
  std::shared_ptr<FastVisionTower> tower;  // the packed tower the plan's entries copy from (null: none)
  std::string metadata;                    // the container's "vision" value: "bf16", "int8" or why none
};

// Appends the tower's entries to `plan` when the config has a vision_config and the checkpoint its tensors;
// otherwise plans nothing and says why in `metadata`. `format` is bf16 (the release's values) or int8.
Result<VisionConversion> PlanVisionTower(const Checkpoint& checkpoint, const ModelConfig& config,
                                         VisionWeightFormat format, int64_t int8_group,
                                         std::vector<PlannedTensor>& plan);

}  // namespace glint::cli
