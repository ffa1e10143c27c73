#include "cli/collective_report.h"

#include <algorithm>
#include <cmath>

#include "base/table.h"

namespace glint::cli {
namespace {

// A count per step: whole when every step had the same, else with one decimal (a mean).
std::string PerStep(double count) { return FormatFixed(count, count == std::floor(count) ? 0 : 1); }

std::string KindCounts(double broadcasts, double all_reduces, double all_gathers, double gathers, double all_to_alls) {
  std::string text;
  auto add = [&](double count, const char* one, const char* many) {
    if (count == 0) return;
    text += StrCat(text.empty() ? "" : ", ", PerStep(count), " ", count == 1 ? one : many);
  };
  add(broadcasts, "broadcast", "broadcasts");
  add(all_reduces, "all-reduce", "all-reduces");
  add(all_gathers, "all-gather", "all-gathers");
  add(gathers, "gather", "gathers");
  add(all_to_alls, "all-to-all", "all-to-alls");
  return text.empty() ? "none" : text;
}

}  // namespace

std::string DescribeStepCollectives(const CollectiveStats& measured, int64_t steps, double step_seconds,
                                    const ModelConfig& config, const ShardPlan& shard,
                                    const std::optional<plan::StepShape>& planned) {
  const double n = static_cast<double>(std::max<int64_t>(1, steps));
  const auto per_step = [&](int64_t value) { return static_cast<double>(value) / n; };
  const double seconds = measured.seconds / n;
  std::string text =
      StrCat("collectives per step (rank 0): ", PerStep(per_step(measured.calls)), " (",
             KindCounts(per_step(measured.of(CollectiveKind::kBroadcast).calls),
                        per_step(measured.of(CollectiveKind::kAllReduce).calls),
                        per_step(measured.of(CollectiveKind::kAllGather).calls),
                        per_step(measured.of(CollectiveKind::kGather).calls),
                        per_step(measured.of(CollectiveKind::kAllToAll).calls)),
             "), ", FormatBytes(measured.bytes_sent / n), " sent, ", FormatBytes(measured.bytes_received / n),
             " received, ", FormatSeconds(seconds),
             " in collectives = ", FormatPercent(step_seconds > 0 ? seconds / step_seconds : 0), " of the step");
  if (!planned) return text;
  const plan::ParallelLayout layout{shard.ranks, shard.tp, shard.head_split() ? shard.head_split_rows : 0,
                                    shard.dp_attention};
  const std::vector<plan::CollectiveLine> lines = plan::CollectivesPerStep(config, layout, *planned);
  const plan::CollectiveTotals totals = plan::SumCollectives(lines, plan::Network{});
  const bool same = static_cast<double>(totals.calls) == per_step(measured.calls);
  // Under --dp-attention the bytes are the plan's expectation under uniform routing, not this run's routing.
  const char* about = shard.dp_attention ? "≈ " : "";
  return StrCat(text, "; glint plan: ", totals.calls, " (", same ? "equal" : "DIFFERENT", "), ", about,
                FormatBytes(static_cast<double>(totals.bytes_sent)), " sent, ", about,
                FormatBytes(static_cast<double>(totals.bytes_received)), " received");
}

}  // namespace glint::cli
