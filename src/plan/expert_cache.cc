#include "plan/expert_cache.h"

#include <algorithm>

#include "plan/planner.h"

namespace glint::plan {

ExpertCacheEstimate EstimateExpertCache(const ExpertCacheModelInputs& in) {
  ExpertCacheEstimate out;
  out.cache_fraction = in.routed_bytes > 0 ? std::clamp(in.cache_bytes / in.routed_bytes, 0.0, 1.0) : 1.0;
  out.hit_rate = out.cache_fraction >= 1.0 ? 1.0 : std::clamp(in.hit_rate.value_or(out.cache_fraction), 0.0, 1.0);
  out.disk_bytes_per_token = (1.0 - out.hit_rate) * in.routed_bytes_per_token;
  out.memory_bytes_per_token = in.resident_read_per_token + out.hit_rate * in.routed_bytes_per_token;
  const double disk_seconds = in.disk_bandwidth > 0 ? out.disk_bytes_per_token / in.disk_bandwidth : 0;
  const double memory_seconds = in.memory_bandwidth > 0 ? out.memory_bytes_per_token / in.memory_bandwidth : 0;
  const double seconds = disk_seconds + memory_seconds;  // reads and compute overlap; the two transfers add up
  out.tokens_per_second = seconds > 0 ? 1.0 / seconds : 0;
  out.disk_share = seconds > 0 ? disk_seconds / seconds : 0;
  return out;
}

Table ExpertCacheTable(const PlanInputs& inputs, const std::vector<double>& ram_gb,
                       const std::vector<double>& disk_gbps, double memory_gbps, std::optional<double> hit_rate) {
  const ModelConfig& c = inputs.config;
  Table table;
  table.id = "expert_cache";
  table.title = "Routed experts from disk (--expert-memory): one sequence, decode";
  table.columns = {{"scheme", "scheme", false},
                   {"ram", "RAM", true},
                   {"cache", "expert cache", true},
                   {"cache_share", "of experts", true},
                   {"hit_rate", "hit rate", true},
                   {"disk", "drive", true},
                   {"disk_per_token", "from drive / token", true},
                   {"tokens_per_second", "tokens/s", true},
                   {"disk_time", "drive share", true}};
  const double threshold = inputs.assumptions.Get("memory_threshold");
  const double k_over_e = static_cast<double>(c.num_experts_per_tok) / c.n_routed_experts;
  for (Scheme scheme : {Scheme::kC, Scheme::kE}) {
    const SchemeFootprint f = Footprint(scheme, inputs.weights, c, inputs.assumptions);
    for (double ram : ram_gb) {
      // RAM × threshold holds the resident weights first (KV/state of one sequence is small beside them).
      const double cache = ram * 1e9 * threshold - f.other_bytes - (f.routed_bytes - f.routed_trunk_bytes);
      for (double disk : disk_gbps) {
        std::vector<Cell> row{std::string(SchemeLetter(scheme)), Cell(FormatBytes(ram * 1e9), ram * 1e9)};
        if (cache <= 0) {
          row.insert(row.end(),
                     {"does not fit", "", "", Cell(StrCat(FormatFixed(disk, 1), " GB/s"), disk), "", "", ""});
          table.AddRow(std::move(row));
          continue;
        }
        const ExpertCacheEstimate e =
            EstimateExpertCache({f.routed_trunk_bytes, f.routed_trunk_bytes * k_over_e, f.other_bytes,
                                 f.decode_dense_bytes, cache, disk * 1e9, memory_gbps * 1e9, hit_rate});
        row.insert(row.end(),
                   {Cell(FormatBytes(std::min(cache, f.routed_trunk_bytes)), cache),
                    Cell(FormatPercent(e.cache_fraction), e.cache_fraction),
                    Cell(FormatPercent(e.hit_rate), e.hit_rate), Cell(StrCat(FormatFixed(disk, 1), " GB/s"), disk),
                    Cell(FormatBytes(e.disk_bytes_per_token), e.disk_bytes_per_token),
                    Cell(FormatFixed(e.tokens_per_second, 2), e.tokens_per_second),
                    Cell(FormatPercent(e.disk_share), e.disk_share)});
        table.AddRow(std::move(row));
      }
    }
  }
  table.notes = {
      StrCat("expert cache = RAM × memory_threshold (", FormatFixed(threshold, 2),
             ") − resident weights (everything but the trunk's routed experts, MTP experts included)"),
      hit_rate ? StrCat("hit rate given (--expert-hit-rate ", FormatFixed(*hit_rate, 2), ")")
               : "hit rate = the cache's share of the experts: uniform routing, the worst case for a cache (a trained "
                 "router's skew raises it; measure with --expert-trace and glint replay-expert-trace)",
      StrCat("tokens/s = 1 / (misses ÷ drive bandwidth + (resident reads + hits) ÷ memory bandwidth ",
             FormatFixed(memory_gbps, 0),
             " GB/s); drive bandwidth is random whole-expert O_DIRECT reads (glint bench-expert-io)"),
      "C: int8 experts; E: int4 routed experts (glint convert --experts int4)"};
  return table;
}

}  // namespace glint::plan
