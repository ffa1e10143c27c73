// Result files of a run (docs/bench.md "Output"): results.json (configuration + every level's metrics),
// results.csv (one row per level, configuration repeated in config_* columns), requests.csv (one row per measured
// request), and the summary table printed at the end. Also reads result files back for the comparison plot.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/runner.h"

namespace glint::bench {

inline constexpr int kResultsFormatVersion = 1;

nlohmann::json LevelToJson(const LevelResult& level);
nlohmann::json RunToJson(const BenchRun& run);
std::string LevelsCsv(const BenchRun& run);
std::string RequestsCsv(const BenchRun& run);
std::string SummaryTable(const BenchRun& run);

// Writes results.json, results.csv and requests.csv into `dir` (created if missing), each atomically.
Status WriteRunFiles(const BenchRun& run, const std::string& dir);

// One curve of the Pareto plot: a point per concurrency level. The axes depend on the workload:
//   random:    x = interactivity_median (1000 / median TPOT, tok/s/user), y = total_throughput_per_chip
//              (InferenceX's "tput_per_gpu": input + output tokens/s per chip)
//   multiturn: x = e2e_interactivity_p90 (1 / p90 of E2E/output tokens), y = output_throughput_per_chip
//              (InferenceX AgentX's chart axes)
struct ParetoPoint {
  int concurrency = 0;
  double x = 0;
  double y = 0;
};
struct ParetoSeries {
  std::string label;
  std::string x_key, x_label, y_key, y_label;
  std::vector<ParetoPoint> points;  // levels whose x and y are defined, in sweep order
};

// From a results.json document (as written by RunToJson); errors name the missing or mistyped field.
Result<ParetoSeries> ParetoFromResults(const nlohmann::json& results);
Result<ParetoSeries> ReadParetoSeries(const std::string& results_path);

}  // namespace glint::bench
