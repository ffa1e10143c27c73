// `glint bench` as a library call: the sweep with its result files and plot, and the comparison of result files.
// src/cli/cmd_bench.cc only parses flags and installs the Ctrl-C handler.
#pragma once

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/config.h"
#include "bench/progress.h"

namespace glint::bench {

// Runs the sweep of `config`, rewriting <out>/results.json, results.csv and requests.csv after every level (so a
// crash or Ctrl-C keeps what was measured), then prints the summary table to `table_out` and draws
// <out>/pareto.png. Returns an error if the server could not be benchmarked at all, if the sweep stopped early
// (the message says where the partial results are), if it was interrupted by `stop`, or if the plot failed.
Status RunBenchCommand(const BenchConfig& config, const std::atomic<bool>& stop, std::FILE* table_out,
                       ProgressSink* progress);

// Overlays the Pareto curves of several results.json files on <out_dir>/compare.png and prints their points.
Status RunCompareCommand(const std::vector<std::string>& result_files, const std::string& out_dir,
                         std::FILE* table_out);

}  // namespace glint::bench
