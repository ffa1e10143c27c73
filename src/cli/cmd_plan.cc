// `glint plan`: on which hardware the model fits, in which quantisation, with how much room for cache, how fast
// decode and prefill can be at best, and what dominates at long context — with every assumption printed.
// See docs/plan.md.
#include <cstdio>
#include <optional>

#include "cli/command.h"
#include "plan/planner.h"
#include "quant/kv_rows.h"
#include "plan/report.h"

namespace glint::cli {
namespace {

struct PlanFlags {
  std::string model;
  std::vector<std::string> hardware;
  int64_t context = 32768;
  int concurrency = 32;
  std::string scheme;
  std::string format = "table";
  std::optional<double> memory_gb, bandwidth_gbps, cpu_bf16_tflops, cpu_int8_tops, threshold;
  std::vector<std::string> assume;
  std::string kv_cache_dtype;  // empty: the assumptions' defaults (bf16 latent and keys, as the reference)
  std::string catalogue;
  std::vector<double> expert_ram_gb = {64, 128, 256}, disk_gbps = {3, 7};
  std::optional<double> expert_hit_rate;
};

// --kv-cache-dtype as the engine stores it (quant/kv_rows.h): bytes per latent and pooled-key value, and for fp8 and
// int8 one fp32 scale per row (a group as wide as any latent row; the plan's fp8 latent row counts the same way).
Status ApplyKvCacheDtype(const std::string& name, plan::Assumptions& a) {
  if (name.empty()) return Status::Ok();
  const Result<KvCacheDtype> dtype = ParseKvCacheDtype(name);
  if (!dtype.ok()) return InvalidArgument("--kv-cache-dtype is '", name, "'; expected ", kKvCacheDtypeNames);
  const double value_bytes = static_cast<double>(KvValueBytes(dtype.value()));
  GLINT_RETURN_IF_ERROR(a.Set("cache_latent_bytes", value_bytes));
  GLINT_RETURN_IF_ERROR(a.Set("cache_index_key_bytes", value_bytes));
  if (KvCacheDtypeHasScale(dtype.value())) {
    GLINT_RETURN_IF_ERROR(a.Set("cache_fp8_group_size", 1 << 16));
    GLINT_RETURN_IF_ERROR(a.Set("cache_fp8_scale_bytes", 4));
    GLINT_RETURN_IF_ERROR(a.Set("cache_index_key_scale_bytes", 4));
  }
  return Status::Ok();
}

Result<plan::PlanRequest> ToRequest(const PlanFlags& flags) {
  plan::PlanRequest request;
  request.model = flags.model;
  request.hardware = flags.hardware;
  request.context = flags.context;
  request.concurrency = flags.concurrency;
  request.catalogue_path = flags.catalogue;
  request.expert_ram_gb = flags.expert_ram_gb;
  request.disk_gbps = flags.disk_gbps;
  request.expert_hit_rate = flags.expert_hit_rate;
  if (!flags.scheme.empty()) {
    GLINT_ASSIGN_OR_RETURN(plan::Scheme scheme, plan::ParseScheme(flags.scheme));
    request.scheme = scheme;
  }
  if (flags.memory_gb.has_value() != flags.bandwidth_gbps.has_value()) {
    return InvalidArgument("a CPU server needs both --memory GB and --bandwidth GB/s");
  }
  if ((flags.cpu_bf16_tflops || flags.cpu_int8_tops) && !flags.memory_gb) {
    return InvalidArgument("--cpu-bf16-tflops / --cpu-int8-tops describe the CPU server of --memory and --bandwidth");
  }
  if (flags.memory_gb) {
    plan::CpuServer cpu;
    cpu.memory_bytes = *flags.memory_gb * 1e9;
    cpu.bandwidth = *flags.bandwidth_gbps * 1e9;
    if (flags.cpu_bf16_tflops) cpu.bf16_peak = *flags.cpu_bf16_tflops * 1e12;
    if (flags.cpu_int8_tops) cpu.int8_peak = *flags.cpu_int8_tops * 1e12;
    if (cpu.bf16_peak && !(*cpu.bf16_peak > 0)) return InvalidArgument("--cpu-bf16-tflops must be positive");
    if (cpu.int8_peak && !(*cpu.int8_peak > 0)) return InvalidArgument("--cpu-int8-tops must be positive");
    request.cpu = cpu;
  }
  if (flags.threshold) GLINT_RETURN_IF_ERROR(request.assumptions.Set("memory_threshold", *flags.threshold));
  GLINT_RETURN_IF_ERROR(ApplyKvCacheDtype(flags.kv_cache_dtype, request.assumptions));
  for (const std::string& text : flags.assume) GLINT_RETURN_IF_ERROR(request.assumptions.Override(text));
  return request;
}

CommandSetup PlanSetup() {
  return [](CLI::App& command) -> std::function<Status()> {
    auto flags = std::make_shared<PlanFlags>();
    command.add_option("--model", flags->model,
                       "model directory (config.json, + safetensors headers when present) or a config.json; "
                       "default: the released GLM-5.3-Flash config, built in");
    command
        .add_option("--hardware", flags->hardware,
                    "topologies, comma-separated (default: all; 'cpu' with "
                    "--memory/--bandwidth)")
        ->delimiter(',');
    command.add_option("--context", flags->context, "tokens per sequence")->capture_default_str();
    command.add_option("--concurrency", flags->concurrency, "sequences decoded together")->capture_default_str();
    command.add_option("--scheme", flags->scheme, "R (as released), A, B, C, D or E (routed experts int4, glint --experts int4) (default: all)");
    command.add_option("--format", flags->format, "table, markdown or json")->capture_default_str();
    command.add_option("--memory", flags->memory_gb, "CPU server: memory in GB");
    command.add_option("--bandwidth", flags->bandwidth_gbps, "CPU server: memory bandwidth in GB/s");
    command.add_option("--cpu-bf16-tflops", flags->cpu_bf16_tflops, "CPU server: bf16 matmul peak (for prefill)");
    command.add_option("--cpu-int8-tops", flags->cpu_int8_tops, "CPU server: int8 matmul peak (for prefill)");
    command.add_option("--threshold", flags->threshold, "flag memory usage above this fraction (default 0.8)");
    command.add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                       "cache storage as glint's --kv-cache-dtype: fp32, bf16, fp8 or int8 (fp8/int8: an fp32 scale "
                       "per row); sets the cache_* assumptions (default: bf16 as the reference)");
    command.add_option("--assume", flags->assume, "override an assumption: NAME=VALUE (repeatable)");
    command.add_option("--catalogue", flags->catalogue, "hardware catalogue JSON instead of the built-in one");
    command
        .add_option("--expert-ram", flags->expert_ram_gb,
                    "routed experts from disk (--expert-memory): machines' RAM in GB, comma-separated")
        ->delimiter(',')
        ->capture_default_str();
    command.add_option("--disk-bandwidth", flags->disk_gbps, "drives' random-read bandwidth in GB/s, comma-separated")
        ->delimiter(',')
        ->capture_default_str();
    command.add_option("--expert-hit-rate", flags->expert_hit_rate,
                       "expert cache hit rate (default: the cache's share of the experts, uniform routing)");
    return [flags]() -> Status {
      GLINT_ASSIGN_OR_RETURN(plan::OutputFormat format, plan::ParseOutputFormat(flags->format));
      GLINT_ASSIGN_OR_RETURN(plan::PlanRequest request, ToRequest(*flags));
      GLINT_ASSIGN_OR_RETURN(plan::PlanInputs inputs, plan::ResolvePlan(request));
      const std::string text = plan::Render(plan::BuildPlanReport(inputs), format);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return Status::Ok();
    };
  };
}

GLINT_REGISTER_COMMAND("plan", "Memory, cache room and roofline speed of the model per hardware and quantisation", 30,
                       PlanSetup());

}  // namespace
}  // namespace glint::cli
