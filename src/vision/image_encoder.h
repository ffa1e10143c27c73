// The vision tower as the engine runs it (docs/vision.md "In the engine"): one image's patches in, its image-token
// embeddings out. Two implementations, chosen with the text model's forward path: the fp32 reference tower (beside
// the reference model) and the fast bf16/int8 tower on a worker pool (beside the fast model).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/worker_pool.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "vision/tower.h"
#include "vision/tower_fast.h"
#include "vision/tower_weights.h"

namespace glint {

class ImageEncoder {
 public:
  virtual ~ImageEncoder() = default;
  // Rows [VisionTokenCount(config(), input), out_hidden_size], in placeholder order. Checks the input first.
  virtual Result<std::vector<float>> Encode(const VisionInput& input) = 0;
  virtual const VisionConfig& config() const = 0;
  virtual std::string_view description() const = 0;  // "fp32 reference tower", "bf16 fast tower"
};

// The fp32 reference tower (vision/tower_reference.h) over `weights`.
std::unique_ptr<ImageEncoder> MakeReferenceImageEncoder(VisionWeights weights, const VisionConfig& config);
// The fast tower (vision/tower_fast.h) on `pool` (not owned; it must outlive the encoder). Encode runs on the
// calling thread and the pool: the engine calls it between two forward passes, never during one.
Result<std::unique_ptr<ImageEncoder>> MakeFastImageEncoder(const VisionWeights& weights, const VisionConfig& config,
                                                           WorkerPool& pool, const FastVisionOptions& options = {});

// The container metadata key `glint convert` writes (docs/vision.md "In a container"): "bf16" or "int8" when the
// container holds the fast tower's packed tensors, otherwise why it holds none. A container without the key was
// written before containers held the tower.
inline constexpr std::string_view kContainerVisionKey = "vision";

// The tower of a model directory for the forward path `reference` (fp32, from the checkpoint's `model.visual.*`)
// or fast (on `pool`; from the directory's `glint convert` container when it has one, as FastModel::Load, else
// from the checkpoint). Errors say why a model takes no images: no vision_config, no vision tensors (text-only),
// a container written without the tower (re-run `glint convert`), a tensor that does not bind.
Result<std::unique_ptr<ImageEncoder>> LoadImageEncoder(const std::string& dir, const ModelConfig& config,
                                                       bool reference, WorkerPool* pool);

}  // namespace glint
