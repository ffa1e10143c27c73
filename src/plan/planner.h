// `glint plan`: from a model (config.json, and the safetensors headers when present) and a hardware catalogue,
// the report of docs/plan.md — parameters, memory per chip per quantisation scheme and topology, per-sequence
// state, roofline decode/prefill, indexer cost by context — with every assumption printed beside the figures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/census.h"
#include "io/config.h"
#include "plan/assumptions.h"
#include "plan/hardware.h"
#include "plan/report.h"
#include "plan/weights.h"

namespace glint::plan {

struct PlanRequest {
  std::string model;                  // a model directory or a config.json; empty = the embedded release config
  std::vector<std::string> hardware;  // topology names; empty = every catalogue topology (+ "cpu" when given)
  int64_t context = 32768;            // tokens per sequence
  int concurrency = 32;               // sequences decoded together
  std::optional<Scheme> scheme;       // empty = all schemes
  std::optional<CpuServer> cpu;       // --memory / --bandwidth
  std::optional<HostServer> host;     // --hardware host: this machine's measured cores (hardware.h)
  std::string catalogue_path;         // empty = embedded data/hardware.json
  Assumptions assumptions = Assumptions::Defaults();
  // The expert-cache table (--expert-memory; plan/expert_cache.h): machines' RAM, drives' bandwidth, hit rate
  // (unset: uniform routing); memory bandwidth from --bandwidth, else 100 GB/s.
  std::vector<double> expert_ram_gb = {64, 128, 256};
  std::vector<double> disk_gbps = {3, 7};
  std::optional<double> expert_hit_rate;
};

// Everything the report is computed from, resolved and validated.
struct PlanInputs {
  ModelConfig config;
  std::string model_source;  // where the config came from, and whether headers were read
  Census census;             // from headers when a checkpoint is present, else from the config
  WeightSet weights;
  Catalogue catalogue;
  std::vector<Topology> topologies;  // in the order asked
  std::vector<Scheme> schemes;
  int64_t context = 0;
  int concurrency = 0;
  Assumptions assumptions = Assumptions::Defaults();
  std::vector<double> expert_ram_gb, disk_gbps;
  std::optional<double> expert_hit_rate;
  double expert_memory_gbps = 100;
  std::optional<HostServer> host;           // --hardware host
  std::optional<HostFigures> host_figures;  // derived from it
};

Result<PlanInputs> ResolvePlan(const PlanRequest& request);
// The same from an already parsed config (tests, and configs built in memory).
Result<PlanInputs> ResolvePlanForConfig(const ModelConfig& config, std::string model_source,
                                        const PlanRequest& request);

Report BuildPlanReport(const PlanInputs& inputs);

}  // namespace glint::plan
