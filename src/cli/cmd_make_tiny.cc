// glint make-tiny: writes a deterministic tiny checkpoint of the real architecture (docs/models.md, "Tiny models").
#include <cstdio>

#include "base/log.h"
#include "cli/command.h"
#include "modelgen/make_tiny.h"
#include "modelgen/presets.h"

namespace glint::cli {
namespace {

struct MakeTinyFlags {
  std::string out;
  uint64_t seed = 0;
  std::string preset = "default";
  bool force = false;
};

std::string Megabytes(uint64_t bytes) { return StrCat(static_cast<double>(bytes / 100000) / 10.0, " MB"); }

Status RunMakeTiny(const MakeTinyFlags& flags) {
  MakeTinyOptions options;
  options.out_dir = flags.out;
  options.seed = flags.seed;
  options.preset = flags.preset;
  options.force = flags.force;
  int last_tenth = -1;
  options.progress = [&last_tenth](const MakeTinyProgress& progress) {
    // One line per 10 % of model.safetensors, and only for files big enough to be worth watching.
    if (progress.bytes_total < (uint64_t{256} << 20)) return;
    const int tenth = static_cast<int>(10 * progress.bytes_done / progress.bytes_total);
    if (tenth == last_tenth) return;
    last_tenth = tenth;
    LogInfo("make-tiny: ", tenth * 10, "% (", Megabytes(progress.bytes_done), " of ", Megabytes(progress.bytes_total),
            "), writing ", progress.tensor);
  };
  GLINT_ASSIGN_OR_RETURN(MakeTinyReport report, MakeTinyModel(options));
  std::printf(
      "wrote %s: preset %s, seed %llu, %lld tensors, %lld parameters, model.safetensors %s, "
      "tokenizer with %lld merges\n",
      report.out_dir.c_str(), flags.preset.c_str(), static_cast<unsigned long long>(flags.seed),
      static_cast<long long>(report.num_tensors), static_cast<long long>(report.num_parameters),
      Megabytes(report.safetensors_bytes).c_str(), static_cast<long long>(report.tokenizer_merges));
  return Status::Ok();
}

GLINT_REGISTER_COMMAND("make-tiny", "Write a deterministic tiny random checkpoint of the GLM-5.3-Flash architecture",
                       90, [](CLI::App& command) -> std::function<Status()> {
                         auto flags = std::make_shared<MakeTinyFlags>();
                         command
                             .add_option("--out", flags->out,
                                         "Directory to create (must not exist, or be empty, unless --force)")
                             ->required();
                         command.add_option("--seed", flags->seed, "Seed of the random weights")->capture_default_str();
                         std::string presets;
                         for (const auto& name : TinyPresetNames()) presets += (presets.empty() ? "" : ", ") + name;
                         command.add_option("--preset", flags->preset, "Model size: " + presets)->capture_default_str();
                         command.add_flag("--force", flags->force, "Replace an existing non-empty model directory");
                         return [flags] { return RunMakeTiny(*flags); };
                       });

}  // namespace
}  // namespace glint::cli
