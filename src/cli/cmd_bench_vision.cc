// glint bench-vision: the fast vision tower (docs/vision.md) on square images of the given sides, with synthetic
// pixel values (a deterministic pattern in the CLIP-normalised range: the tower's cost does not depend on them).
// For each side: wall time (median of --repetitions runs), patches and image tokens, the shares of the time spent
// in the linear layers (GEMMs) and in attention, and the GEMMs' rate against the int8 peak measured in the same
// run (VNNI, or AMX at --isa amx). It prints figures and never fails on a time.
#include <algorithm>
#include <cstdio>
#include <thread>

#include "base/worker_pool.h"
#include "bench/stats.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "kernels/machine_limits.h"
#include "modelgen/random_weights.h"
#include "vision/tower_fast.h"

namespace glint::cli {
namespace {

struct BenchVisionFlags {
  ModelFlag model;
  int threads = 0;
  std::string isa;
  std::string weights = "bf16";
  std::vector<int64_t> sides = {448, 1344};
  int repetitions = 3;
  double peak_seconds = 0.2;
};

// One image (grid_t = 1) of side × side pixels: (side/14)² patches of deterministic values in [−1.8, 1.8].
Result<VisionInput> SyntheticImage(const VisionConfig& c, int64_t side) {
  const int64_t unit = c.patch_size * c.spatial_merge_size;
  if (side <= 0 || side % unit != 0 || side > 16384) {
    return InvalidArgument("--sides: ", side, " is not a positive multiple of patch × merge = ", unit,
                           " up to 16384 (the processor's canvas rule makes every side one)");
  }
  VisionInput input{1, static_cast<int>(side / c.patch_size), static_cast<int>(side / c.patch_size), {}};
  input.patches.resize(input.NumPatches() * c.PatchValues());
  for (size_t i = 0; i < input.patches.size(); ++i) {
    input.patches[i] = 1.04f * UnitBellFromBits(SplitMix64At(1344, i));  // ±1.8
  }
  return input;
}

using bench::Median;

Status RunBenchVision(const BenchVisionFlags& flags) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int threads = flags.threads > 0 ? flags.threads : static_cast<int>(std::thread::hardware_concurrency());
  WorkerPool pool(threads);
  FastVisionOptions options;
  if (!flags.isa.empty()) {
    GLINT_ASSIGN_OR_RETURN(options.isa, ParseIsa(flags.isa));
  }
  GLINT_ASSIGN_OR_RETURN(options.format, ParseVisionWeightFormat(flags.weights));
  GLINT_ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flags.model));
  GLINT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  GLINT_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir));
  Result<VisionWeights> weights = LoadVisionWeights(checkpoint, config.vision);
  if (!weights.ok()) {
    return Status(weights.status().code(), StrCat(weights.status().message(), " (", dir, "; `glint make-tiny --out ",
                                                  "DIR [--preset bench]` writes a model with a tower)"));
  }
  GLINT_ASSIGN_OR_RETURN(FastVisionTower tower, FastVisionTower::Create(*weights, config.vision, options));
  const VisionConfig& v = config.vision;
  std::printf(
      "== vision tower of %s: depth %lld, hidden %lld, %lld heads, MLP %lld, out %lld, merger %lld; "
      "weights %s (%.1f MB packed)\n",
      dir.c_str(), static_cast<long long>(v.depth), static_cast<long long>(v.hidden_size),
      static_cast<long long>(v.num_heads), static_cast<long long>(v.intermediate_size),
      static_cast<long long>(v.out_hidden_size), static_cast<long long>(v.projection_intermediate_size),
      std::string(VisionWeightFormatName(options.format)).c_str(), tower.WeightBytes() / 1e6);
  const double peak = options.isa == Isa::kAmx ? MeasureAmxInt8Gops(pool, threads, flags.peak_seconds)
                                               : MeasureInt8Gops(pool, threads, flags.peak_seconds);
  std::printf("   %d threads, kernels %s; int8 %s peak %.0f GOPS (all threads, measured now)%s\n", threads,
              std::string(IsaName(options.isa)).c_str(), options.isa == Isa::kAmx ? "AMX" : "VNNI", peak,
              options.format == VisionWeightFormat::kBf16
                  ? "; bf16 weights: glint measures no bf16 peak, the int8 share is given for scale"
                  : "");
  std::printf("   pixel values are synthetic (a fixed pattern; the cost does not depend on them)\n");
  for (int64_t side : flags.sides) {
    GLINT_ASSIGN_OR_RETURN(VisionInput input, SyntheticImage(v, side));
    std::vector<double> seconds;
    VisionRunProfile profile;
    for (int r = 0; r < std::max(1, flags.repetitions); ++r) {
      GLINT_RETURN_IF_ERROR(tower.Run(pool, input, nullptr, &profile).status());
      seconds.push_back(profile.total_seconds);
    }
    const double gemm_gops = 2 * profile.linear_macs / std::max(profile.linear_seconds, 1e-12) / 1e9;
    const double attention_gops = 2 * profile.attention_macs / std::max(profile.attention_seconds, 1e-12) / 1e9;
    std::printf(
        "%lldx%lld: %lld patches -> %lld image tokens, %.3f s (median of %zu; %.0f tokens/s); GEMMs %.0f%% "
        "of the time at %.0f GOPS = %.0f%% of the int8 peak; attention %.0f%% at %.0f GOPS\n",
        static_cast<long long>(side), static_cast<long long>(side), static_cast<long long>(input.NumPatches()),
        static_cast<long long>(VisionTokenCount(v, input)), Median(seconds), seconds.size(),
        VisionTokenCount(v, input) / std::max(Median(seconds), 1e-12),
        100 * profile.linear_seconds / profile.total_seconds, gemm_gops, 100 * gemm_gops / std::max(peak, 1e-9),
        100 * profile.attention_seconds / profile.total_seconds, attention_gops);
  }
  return Status::Ok();
}

GLINT_REGISTER_COMMAND(
    "bench-vision", "Benchmark the vision tower on synthetic images (time, image tokens, GEMM share of peak)", 86,
    [](CLI::App& command) -> std::function<Status()> {
      auto flags = std::make_shared<BenchVisionFlags>();
      AddModelFlag(command, flags->model);
      command.add_option("--threads", flags->threads, "worker threads (default: all cores)");
      command.add_option("--isa", flags->isa, "kernel level: " + std::string(kIsaNames) + " (default: the best)");
      command.add_option("--vision-weights", flags->weights, "linear-layer weights: bf16 (as released) or int8 (W8A8)")
          ->capture_default_str();
      command.add_option("--sides", flags->sides, "image sides in pixels (multiples of 28)")
          ->delimiter(',')
          ->capture_default_str();
      command.add_option("--repetitions", flags->repetitions, "runs per side (the median is reported)")
          ->capture_default_str()
          ->check(CLI::Range(1, 1000));
      command.add_option("--peak-seconds", flags->peak_seconds, "duration of the int8 peak probe")
          ->capture_default_str()
          ->check(CLI::Range(0.01, 10.0));
      return [flags] { return RunBenchVision(*flags); };
    });

}  // namespace
}  // namespace glint::cli
