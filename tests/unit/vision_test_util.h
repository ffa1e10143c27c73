// The golden tiny vision tower (tests/data/golden/tiny-vision, out_hidden 64: it fits tiny-dense) and images of
// deterministic pixels for the engine tests that feed it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "base/file.h"
#include "modelgen/random_weights.h"
#include "test_util.h"
#include "vision/image_encoder.h"
#include "vision/tower_weights.h"

namespace glint::testing {

inline VisionConfig TinyVisionConfig() {
  Result<std::string> json = ReadFile(JoinPath(TestDataPath("golden/tiny-vision"), "vision_config.json"), 1 << 20);
  EXPECT_TRUE(json.ok());
  return *ParseVisionConfig(*json, "vision_config.json");
}

inline VisionWeights TinyVisionWeights(const VisionConfig& config) {
  Result<Checkpoint> checkpoint = Checkpoint::Open(JoinPath(TestDataPath("golden/tiny-vision"), "model.safetensors"));
  EXPECT_TRUE(checkpoint.ok());
  return *LoadVisionWeights(*checkpoint, config);
}

// A grid_h × grid_w image (grid_t 1) of deterministic CLIP-range values: grid_h · grid_w / 4 image tokens.
inline std::shared_ptr<const VisionInput> Image(const VisionConfig& c, int grid_h, int grid_w, uint64_t seed) {
  auto input = std::make_shared<VisionInput>();
  input->grid_t = 1;
  input->grid_h = grid_h;
  input->grid_w = grid_w;
  input->patches.resize(input->NumPatches() * c.PatchValues());
  for (size_t i = 0; i < input->patches.size(); ++i)
    input->patches[i] = 1.04f * UnitBellFromBits(SplitMix64At(seed, i));
  return input;
}

}  // namespace glint::testing
