// The --model flag shared by every command that loads a model: a checkpoint directory, or the embedded tiny
// default model (generated once into the cache directory) when none is given.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "base/worker_pool.h"
#include "model/model.h"

namespace glint::cli {

struct ModelFlag {
  std::string dir;  // empty: the embedded default model
};

void AddModelFlag(CLI::App& command, ModelFlag& flag);
// The directory to load: flag.dir, or the default model's cache directory (generated on first use).
Result<std::string> ResolveModelDir(const ModelFlag& flag);
// Loads the fp32 reference model (FP8 weights dequantized in memory) and logs what and how long it took.
Result<std::unique_ptr<ReferenceModel>> LoadReferenceModel(const ModelFlag& flag);
// Loads the fast int8/bf16 model (a `glint convert` container, or a checkpoint converted in memory) on `pool`.
Result<std::unique_ptr<Model>> LoadFastModel(const ModelFlag& flag, WorkerPool& pool);

}  // namespace glint::cli
