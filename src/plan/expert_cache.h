// The routed-expert cache of `--expert-memory` (docs/expert-cache.md) as a model: given the RAM left for cached
// experts, the drive's and the memory's bandwidth and a hit rate, the bytes a decode step reads from each and the
// tokens/s it can reach at one sequence. `glint plan` prints it for the released model; the capacity report at
// start-up prints it for the model being run (before the first token: honest about what it will reach).
#pragma once

#include <optional>
#include <vector>

#include "plan/report.h"

namespace glint::plan {

struct PlanInputs;

struct ExpertCacheModelInputs {
  double routed_bytes = 0;             // every routed expert, as stored (the cache's universe)
  double routed_bytes_per_token = 0;   // the routed experts one token's decode step uses: top-k × layers × expert
  double resident_bytes = 0;           // everything else, held in RAM
  double resident_read_per_token = 0;  // of which read by one decode step (dense layers, shared experts, lm_head…)
  double cache_bytes = 0;              // RAM given to cached experts
  double disk_bandwidth = 0;           // bytes/s of random whole-expert O_DIRECT reads
  double memory_bandwidth = 0;         // bytes/s
  // Fraction of the used experts found in the cache; unset: the cache's share of every expert (uniform routing,
  // the worst case for a cache of a trained, skewed router).
  std::optional<double> hit_rate;
};

struct ExpertCacheEstimate {
  double cache_fraction = 0;  // cache bytes ÷ routed bytes (≤ 1)
  double hit_rate = 0;
  double disk_bytes_per_token = 0;    // misses
  double memory_bytes_per_token = 0;  // resident reads + hits
  double tokens_per_second = 0;       // 1 / (disk bytes ÷ disk bandwidth + memory bytes ÷ memory bandwidth)
  double disk_share = 0;              // of the step's time, reading from the drive
};

ExpertCacheEstimate EstimateExpertCache(const ExpertCacheModelInputs& in);

// `glint plan`'s table: the released model's int8 (scheme C) and int4-expert (scheme E) footprints on machines of
// `ram_gb` GB with drives of `disk_gbps` GB/s.
Table ExpertCacheTable(const PlanInputs& inputs, const std::vector<double>& ram_gb,
                       const std::vector<double>& disk_gbps, double memory_gbps, std::optional<double> hit_rate);

}  // namespace glint::plan
