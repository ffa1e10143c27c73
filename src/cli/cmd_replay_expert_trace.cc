// glint replay-expert-trace: the hit rates of the expert cache's candidate eviction policies (LRU, LFU with ageing,
// frequency-weighted) replayed over routing traces written by `--expert-trace`, at several cache sizes
// (docs/expert-cache.md "Policy").
#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/file.h"
#include "cli/command.h"
#include "experts/expert_trace.h"

namespace glint::cli {
namespace {

struct ReplayFlags {
  std::vector<std::string> traces;
  std::vector<int64_t> slots;  // empty: top_k, 3 × top_k, 1/8, 1/4 and 1/2 of every routed expert
  std::string profile;         // --profile: a trace whose hottest experts are kept, as --expert-profile keeps them
};

Status ReplayOne(const std::string& path, const ReplayFlags& flags) {
  GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  GLINT_ASSIGN_OR_RETURN(ExpertTrace trace, ParseExpertTrace(text));
  std::vector<std::pair<int64_t, int32_t>> kept;
  if (!flags.profile.empty()) {
    GLINT_ASSIGN_OR_RETURN(std::string profile_text, ReadFile(flags.profile));
    Result<ExpertTrace> profile = ParseExpertTrace(profile_text);
    if (!profile.ok()) return profile.status().WithContext(StrCat("--profile '", flags.profile, "'"));
    kept = HottestExperts(*profile);
  }
  const int64_t all = trace.moe_layers * trace.experts;
  std::vector<int64_t> slots = flags.slots;
  if (slots.empty()) slots = {trace.top_k, 3 * trace.top_k, all / 8, all / 4, all / 2};
  slots.erase(std::remove_if(slots.begin(), slots.end(), [&](int64_t s) { return s < trace.top_k || s > all; }),
              slots.end());
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  int64_t requests = 0;
  for (const ExpertTracePass& pass : trace.passes) requests += static_cast<int64_t>(pass.experts.size());
  std::printf("== %s: %zu passes, %lld expert requests; %lld MoE layers × %lld experts, top-%lld\n\n", path.c_str(),
              trace.passes.size(), static_cast<long long>(requests), static_cast<long long>(trace.moe_layers),
              static_cast<long long>(trace.experts), static_cast<long long>(trace.top_k));
  const ExpertPolicy policies[] = {ExpertPolicy::kLru, ExpertPolicy::kLfuAged, ExpertPolicy::kFrequencyWeighted};
  std::printf("| slots | %% of experts |");
  for (ExpertPolicy p : policies) std::printf(" %s hit rate |", std::string(ExpertPolicyName(p)).c_str());
  if (!kept.empty()) {
    for (ExpertPolicy p : policies) std::printf(" + profile, %s |", std::string(ExpertPolicyName(p)).c_str());
  }
  std::printf("\n|---:|---:|---:|---:|---:|%s\n", kept.empty() ? "" : "---:|---:|---:|");
  for (int64_t s : slots) {
    std::printf("| %lld | %.1f |", static_cast<long long>(s), 100.0 * s / all);
    for (ExpertPolicy p : policies) std::printf(" %.2f %% |", 100.0 * ReplayExpertPolicy(trace, s, p).hit_rate());
    for (ExpertPolicy p : kept.empty() ? std::span<const ExpertPolicy>() : std::span<const ExpertPolicy>(policies)) {
      std::printf(" %.2f %% |", 100.0 * ReplayExpertPolicy(trace, s, p, kept).hit_rate());
    }
    std::printf("\n");
  }
  std::printf("\n");
  return Status::Ok();
}

GLINT_REGISTER_COMMAND(
    "replay-expert-trace",
    "Replay routing traces (--expert-trace) against expert-cache policies (LRU, aged LFU, frequency-weighted)", 88,
    [](CLI::App& command) -> std::function<Status()> {
      auto flags = std::make_shared<ReplayFlags>();
      command.add_option("traces", flags->traces, "trace files written by --expert-trace")
          ->required()
          ->check(CLI::ExistingFile);
      command
          .add_option("--slots", flags->slots,
                      "cache sizes in experts (default: top-k, 3 × top-k, 1/8, 1/4 and 1/2 of every routed expert)")
          ->delimiter(',')
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
      command
          .add_option("--profile", flags->profile,
                      "also replay with this trace's hottest experts kept for good (at most half the slots), as "
                      "--expert-profile keeps them: the profile's hit rate against the policy alone")
          ->check(CLI::ExistingFile);
      return [flags]() -> Status {
        for (const std::string& path : flags->traces) GLINT_RETURN_IF_ERROR(ReplayOne(path, *flags));
        return Status::Ok();
      };
    });

}  // namespace
}  // namespace glint::cli
