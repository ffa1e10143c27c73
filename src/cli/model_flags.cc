#include "cli/model_flags.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"
#include "model/fast_model.h"
#include "modelgen/make_tiny.h"

namespace glint::cli {

void AddModelFlag(CLI::App& command, ModelFlag& flag) {
  command.add_option("--model", flag.dir,
                     "checkpoint directory (config.json + safetensors); default: $GLINT_DEFAULT_MODEL, else the "
                     "trained tiny model glint-tiny shipped in the source tree (models/glint-tiny)");
}

Result<std::string> ResolveModelDir(const ModelFlag& flag) {
  if (!flag.dir.empty()) return flag.dir;
  if (const char* chosen = std::getenv("GLINT_DEFAULT_MODEL"); chosen != nullptr && *chosen != '\0') {
    return std::string(chosen);
  }
  // The trained tiny model (docs/training.md) ships with the sources; its path is fixed at build time.
  const std::string shipped = std::string(GLINT_SOURCE_DIR) + "/models/glint-tiny";
  if (IsDirectory(shipped)) return shipped;
  // A binary moved away from its source tree: say so, and use the generated random tiny model instead.
  LogWarning("the trained default model is not at ", shipped, "; using the random tiny model (its text is noise). ",
             "Pass --model DIR or set GLINT_DEFAULT_MODEL.");
  return EnsureDefaultModel();
}

Result<std::unique_ptr<ReferenceModel>> LoadReferenceModel(const ModelFlag& flag) {
  GLINT_ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flag));
  Stopwatch watch;
  auto model = ReferenceModel::Load(dir);
  if (!model.ok()) return model.status();
  const ModelConfig& c = (*model)->config();
  LogInfo("loaded ", dir, " (", c.num_hidden_layers, " layers, hidden ", c.hidden_size, ", vocab ", c.vocab_size,
          ") as fp32 in ", watch.Seconds(), " s");
  return model;
}

void AddExpertsFlag(CLI::App& command, std::string& experts) {
  command.add_option("--experts", experts,
                     "fast path: routed experts' weights, int8 (W8A8) or int4 (W4A8, half the bytes); a checkpoint is "
                     "converted to it, a glint convert container must hold it (default: as stored, int8 when "
                     "converting)")
      ->check(CLI::IsMember({"int8", "int4"}));
}

Result<std::unique_ptr<Model>> LoadFastModel(const ModelFlag& flag, WorkerPool& pool, const std::string& experts) {
  GLINT_ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flag));
  FastModelOptions options;
  if (!experts.empty()) {
    GLINT_ASSIGN_OR_RETURN(options.experts, ParseExpertWeights(experts));
  }
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<FastModel> model, FastModel::Load(dir, pool, options));
  const FastLoadReport& load = model->load_report();
  LogInfo("loaded ", dir, " as int8/bf16 (", load.from_container ? "container" : "converted at load", ", ",
          ExpertWeightsName(model->weights().experts), " routed experts, ",
          load.weight_bytes / 1e9, " GB, ", IsaName(model->isa()), " kernels, ", pool.size(), " threads) in ",
          load.seconds, " s");
  return std::unique_ptr<Model>(std::move(model));
}

void AddForwardPathFlags(CLI::App& command, ForwardPathFlags& flags) {
  command.add_option("--path", flags.path,
                     "forward pass: fast (int8/bf16 kernels) or reference (fp32, exact to the golden outputs, slow)")
      ->check(CLI::IsMember({"fast", "reference"}))
      ->capture_default_str();
  command.add_option("--threads", flags.threads, "fast path worker threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  AddExpertsFlag(command, flags.experts);
}

Result<LoadedModel> LoadModel(const ModelFlag& flag, const ForwardPathFlags& path) {
  LoadedModel loaded;
  if (path.path == "reference") {
    if (!path.experts.empty()) return InvalidArgument("--experts applies to the fast path, not --path reference");
    GLINT_ASSIGN_OR_RETURN(std::unique_ptr<ReferenceModel> model, LoadReferenceModel(flag));
    loaded.model = std::move(model);
    loaded.description = "fp32 reference";
    return loaded;
  }
  const int threads = path.threads > 0 ? path.threads : static_cast<int>(std::thread::hardware_concurrency());
  loaded.pool = std::make_unique<WorkerPool>(std::max(1, threads));
  GLINT_ASSIGN_OR_RETURN(loaded.model, LoadFastModel(flag, *loaded.pool, path.experts));
  const auto& fast = static_cast<const FastModel&>(*loaded.model);
  loaded.description = StrCat("int8/bf16 fast path, ", ExpertWeightsName(fast.weights().experts), " experts, ",
                              IsaName(fast.isa()), " kernels, ", loaded.pool->size(), " threads");
  return loaded;
}

}  // namespace glint::cli
