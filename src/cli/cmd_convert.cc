// glint convert: converts a checkpoint once into the fast path's packed weights (int8 W8A8 and exact bf16, see
// docs/fast-path.md) in a container that `FastModel::Load` maps with no conversion. The output directory is a
// complete model directory: model.glint plus copies of config.json, generation_config.json and tokenizer files.
#include <sys/stat.h>

#include <cstdio>
#include <thread>

#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"
#include "base/worker_pool.h"
#include "cli/command.h"
#include "cli/convert_vision.h"
#include "cli/progress_bar.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "packed/fast_convert.h"

namespace glint::cli {
namespace {

struct ConvertFlags {
  std::string model;
  std::string out;
  int64_t group = 128;
  std::string experts = "int8";
  int64_t int4_group = kDefaultInt4Group;
  int threads = 0;
  bool no_mtp = false;
  bool force = false;
  std::string vision_weights = "bf16";
};

constexpr const char* kCopiedFiles[] = {"config.json",           "generation_config.json", "tokenizer.json",
                                        "tokenizer_config.json", "chat_template.jinja",    "special_tokens_map.json"};

Status PrepareOutput(const ConvertFlags& flags) {
  if (PathExists(flags.out) && !IsDirectory(flags.out)) {
    return InvalidArgument("--out '", flags.out, "' exists and is not a directory");
  }
  if (PathExists(JoinPath(flags.out, kContainerFileName)) && !flags.force) {
    return InvalidArgument("'", JoinPath(flags.out, kContainerFileName), "' exists; pass --force to replace it");
  }
  if (!PathExists(flags.out) && ::mkdir(flags.out.c_str(), 0755) != 0) {
    return IoError("cannot create directory '", flags.out, "'");
  }
  return Status::Ok();
}

Status RunConvert(const ConvertFlags& flags) {
  if (flags.model == flags.out) return InvalidArgument("--out must differ from --model");
  GLINT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(flags.model));
  GLINT_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(flags.model));
  FastConvertOptions options;
  options.group = flags.group;
  options.with_mtp = !flags.no_mtp;
  GLINT_ASSIGN_OR_RETURN(options.experts, ParseExpertWeights(flags.experts));
  options.int4_group = flags.int4_group;
  GLINT_ASSIGN_OR_RETURN(auto plan, PlanFastWeights(checkpoint, config, options));
  GLINT_ASSIGN_OR_RETURN(const VisionWeightFormat vision_format, ParseVisionWeightFormat(flags.vision_weights));
  GLINT_ASSIGN_OR_RETURN(const VisionConversion vision,
                         PlanVisionTower(checkpoint, config, vision_format, flags.group, plan));
  GLINT_RETURN_IF_ERROR(PrepareOutput(flags));
  WorkerPool pool(flags.threads > 0 ? flags.threads : static_cast<int>(std::thread::hardware_concurrency()));
  ProgressBar bar("convert");
  Stopwatch watch;
  const std::string path = JoinPath(flags.out, kContainerFileName);
  GLINT_RETURN_IF_ERROR(WriteFastContainer(
      plan, pool, path,
      {{"source", flags.model},
       {"int8_group", std::to_string(flags.group)},
       {"experts", flags.experts},
       {"int4_group", options.experts == ExpertWeights::kInt4 ? std::to_string(flags.int4_group) : "-"},
       {std::string(kContainerVisionKey), vision.metadata},
       {"writer", "glint convert 0.1.0"}},
      [&bar](const ConvertProgress& p) { bar.Update(p.done_bytes, p.total_bytes, p.tensor); }));
  const double seconds = watch.Seconds();
  for (const char* name : kCopiedFiles) {
    const std::string source = JoinPath(flags.model, name);
    if (!PathExists(source)) continue;
    GLINT_ASSIGN_OR_RETURN(std::string contents, ReadFile(source));
    GLINT_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(flags.out, name), contents));
  }
  GLINT_ASSIGN_OR_RETURN(MappedFile written, MappedFile::Open(path));
  std::printf(
      "wrote %s: %zu tensors, %.3f GB in %.1f s (int8 group %lld, %s routed experts%s, vision tower %s, %d threads)\n",
      path.c_str(), plan.size(), written.size() / 1e9, seconds, static_cast<long long>(flags.group),
      flags.experts.c_str(),
      options.experts == ExpertWeights::kInt4 ? StrCat(" in groups of ", flags.int4_group).c_str() : "",
      vision.metadata.c_str(), pool.size());
  return Status::Ok();
}

GLINT_REGISTER_COMMAND(
    "convert", "Convert a checkpoint once into packed int8/bf16 weights that load by mmap", 80,
    [](CLI::App& command) -> std::function<Status()> {
      auto flags = std::make_shared<ConvertFlags>();
      command.add_option("--model", flags->model, "checkpoint directory to convert")
          ->required()
          ->check(CLI::ExistingDirectory);
      command.add_option("--out", flags->out, "output model directory (created if absent)")->required();
      command.add_option("--group", flags->group, "int8 K-group size, a multiple of 16")->capture_default_str();
      command
          .add_option("--experts", flags->experts,
                      "routed experts' weights: int8 (W8A8) or int4 (W4A8: half the bytes, "
                      "~16x the rounding error; docs/fast-path.md)")
          ->check(CLI::IsMember({"int8", "int4"}))
          ->capture_default_str();
      command.add_option("--int4-group", flags->int4_group, "K-group of int4 experts, a multiple of 16")
          ->capture_default_str();
      command.add_option("--threads", flags->threads, "conversion threads (default: all cores)");
      command.add_flag("--no-mtp", flags->no_mtp, "leave out the MTP layer");
      command
          .add_option("--vision-weights", flags->vision_weights,
                      "the vision tower's linear layers: bf16 (as released, bit-exact) or int8 (W8A8, --group)")
          ->check(CLI::IsMember({"bf16", "int8"}))
          ->capture_default_str();
      command.add_flag("--force", flags->force, "replace an existing model.glint in --out");
      return [flags] { return RunConvert(*flags); };
    });

}  // namespace
}  // namespace glint::cli
