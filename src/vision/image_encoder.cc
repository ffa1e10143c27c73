#include "vision/image_encoder.h"

#include <utility>

#include "base/file.h"
#include "io/weight_container.h"
#include "vision/tower_reference.h"

namespace glint {
namespace {

class ReferenceImageEncoder final : public ImageEncoder {
 public:
  ReferenceImageEncoder(VisionWeights weights, const VisionConfig& config)
      : weights_(std::move(weights)), config_(config) {}
  Result<std::vector<float>> Encode(const VisionInput& input) override {
    return RunVisionTowerReference(weights_, config_, input);
  }
  const VisionConfig& config() const override { return config_; }
  std::string_view description() const override { return "fp32 reference tower"; }

 private:
  VisionWeights weights_;
  VisionConfig config_;
};

class FastImageEncoder final : public ImageEncoder {
 public:
  FastImageEncoder(FastVisionTower tower, WorkerPool& pool)
      : tower_(std::move(tower)),
        pool_(pool),
        description_(tower_.format() == VisionWeightFormat::kBf16 ? "bf16 fast tower" : "int8 fast tower") {}
  Result<std::vector<float>> Encode(const VisionInput& input) override { return tower_.Run(pool_, input); }
  const VisionConfig& config() const override { return tower_.config(); }
  std::string_view description() const override { return description_; }

 private:
  FastVisionTower tower_;
  WorkerPool& pool_;
  std::string description_;
};

// The fast tower viewed in a `glint convert` container (tower_store.cc); the container is mapped a second time
// (the text model holds its own mapping; the pages are shared), without reading every page in.
Result<std::unique_ptr<ImageEncoder>> LoadContainerImageEncoder(const std::string& path, const VisionConfig& config,
                                                                WorkerPool& pool) {
  GLINT_ASSIGN_OR_RETURN(ContainerFile file, ContainerFile::Open(path));
  auto container = std::make_shared<const ContainerFile>(std::move(file));
  const auto stored = container->metadata().find(std::string(kContainerVisionKey));
  if (stored == container->metadata().end()) {
    return FailedPrecondition("'", path, "' was written by a `glint convert` that did not store the vision tower; ",
                              "re-run `glint convert --model CHECKPOINT --out DIR` to include it");
  }
  if (stored->second != "bf16" && stored->second != "int8") {
    return FailedPrecondition("'", path, "' holds no vision tower (", stored->second, ")");
  }
  // The tower's tensors against the container's checksums (io/weight_container.h): a few hundred MB at most, read
  // in by the first image anyway.
  for (const ContainerEntry& entry : container->entries()) {
    if (entry.name.starts_with("vision.")) GLINT_RETURN_IF_ERROR(container->VerifyEntry(entry));
  }
  auto find = [container](const std::string& name) { return container->Find(name); };
  GLINT_ASSIGN_OR_RETURN(FastVisionTower tower, FastVisionTower::FromStored(config, {}, find, container));
  return std::unique_ptr<ImageEncoder>(std::make_unique<FastImageEncoder>(std::move(tower), pool));
}

}  // namespace

std::unique_ptr<ImageEncoder> MakeReferenceImageEncoder(VisionWeights weights, const VisionConfig& config) {
  return std::make_unique<ReferenceImageEncoder>(std::move(weights), config);
}

Result<std::unique_ptr<ImageEncoder>> MakeFastImageEncoder(const VisionWeights& weights, const VisionConfig& config,
                                                           WorkerPool& pool, const FastVisionOptions& options) {
  GLINT_ASSIGN_OR_RETURN(FastVisionTower tower, FastVisionTower::Create(weights, config, options));
  return std::unique_ptr<ImageEncoder>(std::make_unique<FastImageEncoder>(std::move(tower), pool));
}

Result<std::unique_ptr<ImageEncoder>> LoadImageEncoder(const std::string& dir, const ModelConfig& config,
                                                       bool reference, WorkerPool* pool) {
  if (!config.vision.present) {
    return FailedPrecondition("the model's config.json has no vision_config: it is text-only");
  }
  // As FastModel::Load: the fast path takes a directory's container when it has one.
  const std::string container_path = JoinPath(dir, kContainerFileName);
  if (!reference && PathExists(container_path)) {
    GLINT_CHECK(pool != nullptr) << "the fast tower needs a worker pool";
    return LoadContainerImageEncoder(container_path, config.vision, *pool);
  }
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir);
  if (!checkpoint.ok()) {
    return FailedPrecondition(
        "the fp32 reference tower loads from the checkpoint's safetensors, which ", dir,
        " does not hold (a `glint convert` container holds the fast tower only): ", checkpoint.status().message());
  }
  GLINT_ASSIGN_OR_RETURN(VisionWeights weights, LoadVisionWeights(*checkpoint, config.vision));
  if (reference) return MakeReferenceImageEncoder(std::move(weights), config.vision);
  GLINT_CHECK(pool != nullptr) << "the fast tower needs a worker pool";
  return MakeFastImageEncoder(weights, config.vision, *pool);
}

}  // namespace glint
