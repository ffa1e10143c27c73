// The collectives of a benchmark's step under mpirun (docs/distributed.md "Collectives per step"): what rank 0's
// communicator counted (dist/communicator.h CollectiveStats: calls, bytes and wall time per kind) beside what
// `glint plan` models for the same step (plan/collectives.h), so that the benchmark checks the plan.
#pragma once

#include <optional>
#include <string>

#include "dist/communicator.h"
#include "dist/sharding.h"
#include "io/config.h"
#include "plan/collectives.h"

namespace glint::cli {

// "collectives per step (rank 0): 43 (1 broadcast, 42 all-reduces), 672.1 KB sent, 672.0 KB received, 1.23 ms =
// 4.5% of the step; glint plan: 43 (same), 672.1 KB sent" — `measured` over `steps` steps of `step_seconds` each
// (median or mean), `planned` one step's shape (none: no comparison, e.g. the engine's mixed steps).
std::string DescribeStepCollectives(const CollectiveStats& measured, int64_t steps, double step_seconds,
                                    const ModelConfig& config, const ShardPlan& shard,
                                    const std::optional<plan::StepShape>& planned);

}  // namespace glint::cli
