// The fp32 reference of the vision tower (tower.h has the equations; docs/vision.md their sources): plain loops,
// dot products accumulated in double, one patch at a time. The oracle every fast tower is tested against; it
// matches tools/vision_oracle.py (float64) on tests/data/golden/tiny-vision.
#pragma once

#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "vision/tower.h"
#include "vision/tower_weights.h"

namespace glint {

// Image-token embeddings [VisionTokenCount, out_hidden_size]; `trace` (optional) receives the intermediates.
Result<std::vector<float>> RunVisionTowerReference(const VisionWeights& weights, const VisionConfig& config,
                                                   const VisionInput& input, VisionTrace* trace = nullptr);

}  // namespace glint
