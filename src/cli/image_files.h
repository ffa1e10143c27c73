// Image files on the command line (`glint run --image`, `glint score --images`): read, decoded and preprocessed as
// the server does with an image part (docs/vision-input.md), then run through the model's vision tower.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "media/image.h"
#include "vision/image_encoder.h"
#include "vision/tower.h"

namespace glint::cli {

// Each file's patches, with the checkpoint directory's processor config. Errors name the file.
Result<std::vector<std::shared_ptr<const VisionInput>>> LoadImageFiles(const std::vector<std::string>& paths,
                                                                       const std::string& dir,
                                                                       const media::DecodeLimits& limits);

// The tower's rows of `images` [Σ tokens, D], in order.
Result<std::vector<float>> EncodeImages(ImageEncoder& tower,
                                        const std::vector<std::shared_ptr<const VisionInput>>& images);

}  // namespace glint::cli
