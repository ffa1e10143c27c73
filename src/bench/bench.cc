#include "bench/bench.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "base/file.h"
#include "base/log.h"
#include "bench/plot.h"
#include "bench/report.h"
#include "bench/runner.h"

namespace glint::bench {
namespace {

Status MakeDirectory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return IoError("cannot create output directory ", dir, ": ", error.message());
  return Status::Ok();
}

bool HasParetoPoint(const ParetoSeries& series) { return !series.points.empty(); }

// The first error of a sweep in which no measured request completed; empty if one did (or none was sent).
std::string FirstErrorIfAllFailed(const BenchRun& run) {
  std::string first_error;
  for (const LevelResult& level : run.levels) {
    if (level.completed > 0) return "";
    if (first_error.empty() && !level.error_examples.empty()) first_error = level.error_examples.front();
  }
  return first_error.substr(0, 400);
}

}  // namespace

Status RunBenchCommand(const BenchConfig& config, const std::atomic<bool>& stop, std::FILE* table_out,
                       ProgressSink* progress) {
  GLINT_RETURN_IF_ERROR(ValidateConfig(config));
  Status write_status;  // the output directory is created with the first results, not before the server answers
  RunHooks hooks;
  hooks.progress = progress;
  hooks.level_done = [&](const BenchRun& run) {
    Status status = WriteRunFiles(run, config.out_dir);
    if (!status.ok()) {
      LogError("writing results: ", status.message());
      write_status = status;
    }
  };
  BenchRun run;
  Status run_status = RunBenchmark(config, stop, hooks, run);
  if (run.levels.empty() && !run.interrupted) return run_status;  // nothing was measured (e.g. unreachable server)

  GLINT_RETURN_IF_ERROR(WriteRunFiles(run, config.out_dir));
  GLINT_RETURN_IF_ERROR(write_status);
  std::fputs(SummaryTable(run).c_str(), table_out);
  std::fprintf(table_out, "results: %s/{results.json,results.csv,requests.csv}\n", config.out_dir.c_str());

  Status plot_status;
  auto series = ParetoFromResults(RunToJson(run));
  if (!series.ok()) {
    plot_status = series.status();
  } else if (HasParetoPoint(*series)) {
    const std::string png = JoinPath(config.out_dir, "pareto.png");
    const std::string workload =
        config.requests_file.empty()
            ? StrCat(WorkloadKindName(config.workload), " ", config.input_len, "/", config.output_len)
            : StrCat("requests of ", std::filesystem::path(config.requests_file).filename().string());
    plot_status = PlotPareto(
        {*series}, png, StrCat("glint bench: ", run.config.label, " (", workload, ", ", config.chips, " chip(s))"));
    if (plot_status.ok()) std::fprintf(table_out, "plot: %s\n", png.c_str());
  } else if (!run.interrupted) {
    plot_status = FailedPrecondition(
        "no level produced a Pareto point (with --output-len 1 there is no TPOT, so no interactivity)");
  }
  std::fflush(table_out);

  if (run.interrupted) {
    return FailedPrecondition("interrupted by Ctrl-C: partial results written to ", config.out_dir);
  }
  if (!run_status.ok()) {
    return run_status.WithContext(
        StrCat("sweep stopped early (results of the finished levels are in ", config.out_dir, ")"));
  }
  // Nothing was measured: the server's reason is the error, not the missing plot.
  if (const std::string first_error = FirstErrorIfAllFailed(run); !first_error.empty()) {
    return FailedPrecondition("every measured request failed (results written to ", config.out_dir,
                              "); the first: ", first_error);
  }
  return plot_status.WithContext(StrCat("results written to ", config.out_dir, ", but the Pareto plot failed"));
}

Status RunCompareCommand(const std::vector<std::string>& result_files, const std::string& out_dir,
                         std::FILE* table_out) {
  if (result_files.size() < 1) return InvalidArgument("--compare needs at least one results.json file");
  std::vector<ParetoSeries> series;
  std::set<std::string> labels;
  for (const std::string& path : result_files) {
    GLINT_ASSIGN_OR_RETURN(ParetoSeries one, ReadParetoSeries(path));
    if (!labels.insert(one.label).second) one.label += StrCat(" (", path, ")");  // two runs with one label
    labels.insert(one.label);
    series.push_back(std::move(one));
  }
  GLINT_RETURN_IF_ERROR(MakeDirectory(out_dir));
  const std::string png = JoinPath(out_dir, "compare.png");
  GLINT_RETURN_IF_ERROR(PlotPareto(series, png, "glint bench comparison"));

  std::fprintf(table_out, "%-40s %6s %14s %14s\n", "run", "conc", series.front().x_key.c_str(),
               series.front().y_key.c_str());
  for (const ParetoSeries& s : series) {
    for (const ParetoPoint& p : s.points) {
      std::fprintf(table_out, "%-40s %6d %14.2f %14.2f\n", s.label.substr(0, 40).c_str(), p.concurrency, p.x, p.y);
    }
  }
  std::fprintf(table_out, "plot: %s\n", png.c_str());
  return Status::Ok();
}

}  // namespace glint::bench
