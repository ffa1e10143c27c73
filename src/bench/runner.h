// The concurrency sweep: for each level, build its prompts, run the warm-up requests, run the measured sessions
// with `concurrency` of them in flight, and compute the level's metrics. One thread per session in flight (the
// requests are blocking streams); the calling thread is the watchdog: it enforces --request-timeout, abandons the
// requests in flight on Ctrl-C, and feeds the progress bar.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/config.h"
#include "bench/metrics.h"
#include "bench/progress.h"

namespace glint::bench {

struct BenchRun {
  BenchConfig config;      // as run: the model and seed resolved
  std::string started_at;  // ISO 8601 UTC
  std::string finished_at;
  bool interrupted = false;      // Ctrl-C: the last level is partial and later levels were not run
  std::string stopped_by_error;  // a setup failure that ended the sweep early (the levels before it are valid)
  std::vector<LevelResult> levels;
  std::vector<std::vector<RequestRecord>> level_requests;  // (levels) the measured requests of each level
};

struct RunHooks {
  ProgressSink* progress = nullptr;
  // Called after each level (and after an interruption) with the run so far, e.g. to write partial results.
  std::function<void(const BenchRun&)> level_done;
  double watchdog_interval_s = 0.02;  // how often timeouts and Ctrl-C are checked
};

// Runs the sweep into `run`. Returns an error when the server cannot be used at all (unreachable, no model); a
// failure after some levels finished is recorded in run.stopped_by_error and returned too, with `run` holding the
// finished levels. Request-level failures are never errors: they are counted per level.
Status RunBenchmark(const BenchConfig& config, const std::atomic<bool>& stop, const RunHooks& hooks, BenchRun& run);

// UTC time as 2026-01-31T12:34:56Z.
std::string UtcTimestamp();

}  // namespace glint::bench
