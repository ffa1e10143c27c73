// `glint plan`: on which hardware the model fits, in which quantisation, with how much room for cache, how fast
// decode and prefill can be at best, and what dominates at long context — with every assumption printed.
// See docs/plan.md.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <thread>

#include "base/worker_pool.h"
#include "cli/command.h"
#include "cli/host_info.h"
#include "kernels/linear_probe.h"
#include "kernels/machine_limits.h"
#include "plan/collectives.h"
#include "plan/planner.h"
#include "plan/report.h"
#include "quant/kv_rows.h"

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
  // --hardware host
  int threads = 0;  // 0: every CPU
  std::string isa;  // empty: the best level
  std::optional<int> host_cores;
  int host_sockets = 1;
  int64_t probe_mib = 256;  // triad array size; the decode product streams twice this
  std::optional<double> host_memory_gb, socket_bandwidth_gbps, socket_link_gbps;
  // glint's own multi-process run (plan/collectives.h): ranks, --tp, the network between them
  int ranks = 1;
  int tp = 1;
  double link_bandwidth_gbps = 1.25;  // 10 GbE
  double link_latency_us = 30;        // TCP over Ethernet through Open MPI's tcp transport
  int64_t lm_head_split_rows = 4;     // as the run's --lm-head-split-rows (cli/distributed.h)
  bool dp_attention = false;
};

// The tables of glint's collectives per step when --ranks > 1 (the other flags alone are refused: they describe
// those ranks).
Result<std::vector<Table>> CollectiveTablesFromFlags(const PlanFlags& flags, const ModelConfig& config) {
  const bool network_flags =
      flags.tp != 1 || flags.link_bandwidth_gbps != 1.25 || flags.link_latency_us != 30 || flags.dp_attention;
  if (flags.ranks == 1) {
    if (network_flags) {
      return InvalidArgument("--tp, --dp-attention, --link-bandwidth and --link-latency describe --ranks N > 1");
    }
    return std::vector<Table>{};
  }
  const plan::ParallelLayout layout{flags.ranks, flags.tp, flags.dp_attention ? 0 : flags.lm_head_split_rows,
                                    flags.dp_attention};
  GLINT_RETURN_IF_ERROR(plan::ValidateLayout(layout));
  if (!(flags.link_bandwidth_gbps > 0)) return InvalidArgument("--link-bandwidth must be positive (GB/s)");
  if (!(flags.link_latency_us >= 0)) return InvalidArgument("--link-latency must be ≥ 0 (µs)");
  const plan::Network network{flags.link_latency_us * 1e-6, flags.link_bandwidth_gbps * 1e9};
  return plan::CollectiveTables(config, layout, network, flags.concurrency);
}

bool AsksForHost(const PlanFlags& flags) {
  return std::find(flags.hardware.begin(), flags.hardware.end(), "host") != flags.hardware.end();
}

// This machine's limits and the rates of glint's own products, measured now (≈ 5 s). The shapes: a decode product
// is one token through a routed expert's down projection [4096 × 2048] streamed from 512 MiB of copies (far past
// any last-level cache at the default --probe-mib); a prefill product is 512 tokens through a [4096 × 4096] matrix (the
// bench's prefill length, weights reused from cache).
Result<plan::HostMeasurement> MeasureHost(const PlanFlags& flags) {
  const int threads = flags.threads > 0 ? flags.threads : static_cast<int>(std::thread::hardware_concurrency());
  if (threads < 1 || threads > 4096) return InvalidArgument("--threads ", threads, " must be in [1, 4096]");
  Isa isa = BestIsa();
  if (!flags.isa.empty()) {
    GLINT_ASSIGN_OR_RETURN(isa, ParseIsa(flags.isa));
    if (!IsaSupported(isa)) return InvalidArgument("--isa ", flags.isa, " is not supported by this CPU");
  }
  std::fprintf(stderr, "glint plan: measuring this machine on %d threads at %s (load average %s; ≈ 5 s) ...\n", threads,
               std::string(IsaName(isa)).c_str(), LoadAverageText().c_str());
  WorkerPool pool(threads);
  if (flags.probe_mib < 16 || flags.probe_mib > 16384) {
    return InvalidArgument("--probe-mib ", flags.probe_mib, " must be in [16, 16384]");
  }
  MachineProbeOptions probe;
  probe.array_bytes = flags.probe_mib << 20;
  const MachineLimits limits = MeasureMachineLimits(pool, probe);
  plan::HostMeasurement m;
  m.threads = threads;
  m.isa = std::string(IsaName(isa));
  m.triad_one_thread = limits.triad_gbps_one_thread * 1e9;
  m.triad_all_threads = limits.triad_gbps_all_threads * 1e9;
  m.int8_loop_peak = Int8PeakFor(limits, isa, /*one_thread=*/false) * 1e9;
  if (isa != Isa::kAmx && isa != Isa::kAvx512) m.int8_loop_peak = 0;  // the VNNI loop does not describe AVX2
  const LinearShape decode{4096, 2048, 1, 128}, prefill{4096, 4096, 512, 128};
  m.int8_decode_rate = MeasureLinearI8(pool, isa, decode, 2 * probe.array_bytes, 1.0).weight_gbps * 1e9;
  m.int8_prefill_rate = MeasureLinearI8(pool, isa, prefill, 0, 1.0).gops * 1e9;
  m.bf16_prefill_rate = MeasureLinearBf16(pool, isa, prefill, 0, 1.0).gops * 1e9;
  m.memory_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  return m;
}

Result<plan::HostServer> HostServerFromFlags(const PlanFlags& flags) {
  plan::HostServer server;
  server.cores_per_socket = flags.host_cores.value_or(1);  // checked with placeholders first: no measuring for
  server.sockets = flags.host_sockets;                     // flags that cannot work
  server.socket_bandwidth = flags.socket_bandwidth_gbps.value_or(1) * 1e9;
  server.memory_bytes = flags.host_memory_gb.value_or(1) * 1e9;
  server.socket_link = flags.socket_link_gbps.value_or(0) * 1e9;
  GLINT_RETURN_IF_ERROR(plan::ValidateHostShape(server));
  GLINT_ASSIGN_OR_RETURN(server.measured, MeasureHost(flags));
  server.cores_per_socket = flags.host_cores.value_or(server.measured.threads);
  if (!flags.socket_bandwidth_gbps) server.socket_bandwidth = server.measured.triad_all_threads;
  if (!flags.host_memory_gb) server.memory_bytes = server.measured.memory_bytes;
  GLINT_RETURN_IF_ERROR(plan::DeriveHostFigures(server).status());
  return server;
}

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
  const bool host_flags = flags.host_cores || flags.host_sockets != 1 || flags.host_memory_gb ||
                          flags.socket_bandwidth_gbps || flags.socket_link_gbps || flags.threads != 0 ||
                          !flags.isa.empty() || flags.probe_mib != 256;
  if (host_flags && !AsksForHost(flags)) {
    return InvalidArgument(
        "--host-cores, --host-sockets, --host-memory, --socket-bandwidth, --socket-link, --threads, "
        "--isa and --probe-mib describe --hardware host");
  }
  if (AsksForHost(flags)) {
    if (flags.hardware.size() > 1) {
      return InvalidArgument(
          "--hardware host projects with fractions measured on this machine and cannot be "
          "combined with other hardware; run glint plan once per kind");
    }
    GLINT_ASSIGN_OR_RETURN(request.host, HostServerFromFlags(flags));
    // The measured fractions stand in for the defaults; --assume below still overrides them.
    GLINT_ASSIGN_OR_RETURN(const plan::HostFigures figures, plan::DeriveHostFigures(*request.host));
    GLINT_RETURN_IF_ERROR(request.assumptions.Set("bandwidth_efficiency", figures.bandwidth_efficiency));
    GLINT_RETURN_IF_ERROR(request.assumptions.Set("mfu", std::max(0.01, figures.mfu)));
  }
  if (flags.threshold) GLINT_RETURN_IF_ERROR(request.assumptions.Set("memory_threshold", *flags.threshold));
  GLINT_RETURN_IF_ERROR(ApplyKvCacheDtype(flags.kv_cache_dtype, request.assumptions));
  for (const std::string& text : flags.assume) GLINT_RETURN_IF_ERROR(request.assumptions.Override(text));
  return request;
}

// --hardware host: the server projected from this machine's measured cores (docs/plan.md "host").
void AddHostFlags(CLI::App& command, PlanFlags& flags) {
  command.add_option("--host-cores", flags.host_cores,
                     "host: cores per socket of the projected server "
                     "(default: this machine's threads)");
  command.add_option("--host-sockets", flags.host_sockets, "host: sockets (one glint rank each)")
      ->capture_default_str();
  command.add_option("--host-memory", flags.host_memory_gb, "host: the server's RAM in GB (default: this machine's)");
  command.add_option("--socket-bandwidth", flags.socket_bandwidth_gbps,
                     "host: memory bandwidth per socket in GB/s (default: this machine's measured triad)");
  command.add_option("--socket-link", flags.socket_link_gbps,
                     "host: bandwidth between sockets in GB/s, both directions (needed with --host-sockets > 1)");
  command.add_option("--threads", flags.threads, "host: threads to measure on (default: every CPU)");
  command
      .add_option("--probe-mib", flags.probe_mib,
                  "host: MiB per bandwidth-probe array (≥ 8× the last-level cache; the decode product streams "
                  "twice this)")
      ->capture_default_str();
  command.add_option("--isa", flags.isa, "host: kernel level to measure (amx, avx512, avx2, scalar; default: best)");
}

// --ranks: glint's own collectives per step on a network of N machines (docs/plan.md).
void AddRanksFlags(CLI::App& command, PlanFlags& flags) {
  command
      .add_option("--ranks", flags.ranks,
                  "glint processes (mpirun -np N, one per machine or NUMA node): adds the tables of the "
                  "collectives per step and their time on the network below")
      ->capture_default_str();
  command
      .add_option("--tp", flags.tp,
                  "with --ranks: tensor-parallel degree (divides --ranks; 1: attention "
                  "replicated, experts split over every rank)")
      ->capture_default_str();
  command
      .add_option("--link-bandwidth", flags.link_bandwidth_gbps,
                  "with --ranks: network bandwidth per rank and direction in GB/s (1.25 = 10 GbE)")
      ->capture_default_str();
  command
      .add_option("--link-latency", flags.link_latency_us, "with --ranks: latency of one message between ranks in µs")
      ->capture_default_str();
  command
      .add_option("--lm-head-split-rows", flags.lm_head_split_rows,
                  "with --ranks and --tp 1: as the run's flag (passes of at most this many logit rows split "
                  "lm_head over all ranks and gather the logits to rank 0; 0: never)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  command.add_flag("--dp-attention", flags.dp_attention,
                   "with --ranks and --tp 1: attention data-parallel, as the run's flag (the MoE rows travel in two "
                   "all-to-alls per MoE layer; bytes expected under uniform routing)");
}

CommandSetup PlanSetup() {
  return [](CLI::App& command) -> std::function<Status()> {
    auto flags = std::make_shared<PlanFlags>();
    command.add_option("--model", flags->model,
                       "model directory (config.json, + safetensors headers when present) or a config.json; "
                       "default: the released GLM-5.3-Flash config, built in");
    command
        .add_option("--hardware", flags->hardware,
                    "topologies, comma-separated (default: all; 'cpu' with --memory/--bandwidth; 'host': a "
                    "server of this machine's cores, measured now)")
        ->delimiter(',');
    command.add_option("--context", flags->context, "tokens per sequence")->capture_default_str();
    command.add_option("--concurrency", flags->concurrency, "sequences decoded together")->capture_default_str();
    command.add_option("--scheme", flags->scheme,
                       "R (as released), A, B, C, D or E (routed experts int4, glint --experts int4) (default: all)");
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
    AddHostFlags(command, *flags);
    AddRanksFlags(command, *flags);
    return [flags]() -> Status {
      GLINT_ASSIGN_OR_RETURN(plan::OutputFormat format, plan::ParseOutputFormat(flags->format));
      GLINT_ASSIGN_OR_RETURN(plan::PlanRequest request, ToRequest(*flags));
      GLINT_ASSIGN_OR_RETURN(plan::PlanInputs inputs, plan::ResolvePlan(request));
      GLINT_ASSIGN_OR_RETURN(std::vector<Table> collectives, CollectiveTablesFromFlags(*flags, inputs.config));
      plan::Report report = plan::BuildPlanReport(inputs);
      for (Table& table : collectives) report.tables.push_back(std::move(table));
      const std::string text = plan::Render(report, format);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return Status::Ok();
    };
  };
}

GLINT_REGISTER_COMMAND("plan", "Memory, cache room and roofline speed of the model per hardware and quantisation", 30,
                       PlanSetup());

}  // namespace
}  // namespace glint::cli
