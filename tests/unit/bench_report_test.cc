// Result files, the summary table and the gnuplot Pareto plot of glint bench, on a hand-made run.
#include <cmath>
#include <fstream>

#include "base/file.h"
#include "bench/plot.h"
#include "bench/progress.h"
#include "bench/report.h"
#include "test_util.h"

namespace glint::bench {
namespace {

BenchRun SampleRun(WorkloadKind workload) {
  BenchRun run;
  run.config.base_url = "http://127.0.0.1:9";
  run.config.model = "m";
  run.config.label = "run, \"quoted\"";
  run.config.workload = workload;
  run.config.seed = 3;
  run.started_at = "2026-01-01T00:00:00Z";
  for (int concurrency : {1, 2, 4}) {
    LevelResult level;
    level.concurrency = concurrency;
    RequestRecord record;
    record.start_s = 0;
    record.content_times_s = {0.1, 0.1 + 0.01 * concurrency, 0.1 + 0.02 * concurrency};
    record.end_s = 0.1 + 0.02 * concurrency;
    record.usage_prompt_tokens = 100;
    record.usage_completion_tokens = 3;
    record.max_tokens = 3;
    RequestRecord failed;
    failed.outcome = Outcome::kHttpError;
    failed.http_status = 503;
    failed.error = "HTTP 503: full, try later";
    failed.start_s = 0.01;
    failed.end_s = 0.02;
    ComputeLevelMetrics({record, failed}, CostModel{1, std::nullopt}, level);
    run.levels.push_back(level);
    run.level_requests.push_back({record, failed});
  }
  return run;
}

TEST(BenchReport, JsonHasConfigLevelsAxesAndNullsForUndefinedFigures) {
  const nlohmann::json json = RunToJson(SampleRun(WorkloadKind::kRandom));
  EXPECT_EQ(json["format"], "glint-bench-results");
  EXPECT_EQ(json["config"]["label"], "run, \"quoted\"");
  EXPECT_EQ(json["pareto"]["x"], "interactivity_median");
  EXPECT_EQ(json["pareto"]["y"], "total_throughput_per_chip");
  ASSERT_EQ(json["levels"].size(), 3u);
  const auto& level = json["levels"][1];
  EXPECT_EQ(level["concurrency"], 2);
  EXPECT_EQ(level["completed"], 1);
  EXPECT_EQ(level["errors"]["http_503"], 1);
  EXPECT_TRUE(level["cost_per_million_output_tokens"].is_null());  // no price given
  EXPECT_TRUE(level["spec_decode"].is_null());
  EXPECT_NEAR(level["tpot_ms"]["median"].get<double>(), 20, 1e-9);  // (0.14 − 0.10) / 2 s
  EXPECT_NEAR(level["interactivity_median"].get<double>(), 50, 1e-9);

  const nlohmann::json multi = RunToJson(SampleRun(WorkloadKind::kMultiTurn));
  EXPECT_EQ(multi["pareto"]["x"], "e2e_interactivity_p90");
  EXPECT_EQ(multi["pareto"]["y"], "output_throughput_per_chip");
}

TEST(BenchReport, CsvRowsCarryTheConfigurationAndQuoteText) {
  const BenchRun run = SampleRun(WorkloadKind::kRandom);
  const std::string levels = LevelsCsv(run);
  EXPECT_EQ(std::count(levels.begin(), levels.end(), '\n'), 4);  // header + 3 levels
  const std::string header = levels.substr(0, levels.find('\n'));
  EXPECT_NE(header.find("concurrency,interrupted,"), std::string::npos);
  EXPECT_NE(header.find(",ttft_ms_p99,"), std::string::npos);
  EXPECT_NE(header.find(",config_range_convention,"), std::string::npos);
  EXPECT_NE(levels.find("\"run, \"\"quoted\"\"\""), std::string::npos);  // RFC 4180 quoting
  const std::string requests = RequestsCsv(run);
  EXPECT_EQ(std::count(requests.begin(), requests.end(), '\n'), 7);  // header + 2 per level
  EXPECT_NE(requests.find(",http_error,503,"), std::string::npos);
  EXPECT_NE(requests.find("\"HTTP 503: full, try later\""), std::string::npos);
  const std::string table = SummaryTable(run);
  EXPECT_NE(table.find("http_503=1"), std::string::npos);
  EXPECT_NE(table.find("TPOT p50"), std::string::npos);
}

TEST(BenchReport, TheTableQuotesEachLevelsFirstErrorOnOneShortLine) {
  BenchRun run = SampleRun(WorkloadKind::kRandom);
  EXPECT_NE(SummaryTable(run).find("  c=1: http_503=1\n    first error: http_503: HTTP 503: full, try later\n"),
            std::string::npos)
      << SummaryTable(run);
  // A long multi-line body: one line, cut after 400 bytes at a character boundary ("é" is 2 bytes at 399-400).
  run.levels[0].error_examples = {"line one\nline two " + std::string(381, 'x') + "\xC3\xA9" + std::string(50, 'y')};
  const std::string table = SummaryTable(run);
  EXPECT_NE(table.find("    first error: line one line two " + std::string(381, 'x') + "...\n"), std::string::npos)
      << table;
}

TEST(BenchReport, ParetoSeriesFromResults) {
  ASSERT_OK_AND_ASSIGN(ParetoSeries series, ParetoFromResults(RunToJson(SampleRun(WorkloadKind::kRandom))));
  ASSERT_EQ(series.points.size(), 3u);
  EXPECT_EQ(series.points[2].concurrency, 4);
  EXPECT_NEAR(series.points[0].x, 100, 1e-9);  // 1000 / 10 ms
  EXPECT_EQ(series.label, "run, \"quoted\"");
  BenchRun interrupted = SampleRun(WorkloadKind::kRandom);
  interrupted.levels[2].interrupted = true;
  ASSERT_OK_AND_ASSIGN(ParetoSeries partial, ParetoFromResults(RunToJson(interrupted)));
  EXPECT_EQ(partial.points.size(), 2u);  // the figures of a level cut short are not plotted
  EXPECT_ERROR_CONTAINS(ParetoFromResults(nlohmann::json{{"levels", nlohmann::json::array()}}),
                        "not a glint bench results file");
  const std::string dir = testing::MakeTempDir("bench_report");
  const std::string bad = JoinPath(dir, "bad.json");
  ASSERT_OK(WriteFileAtomic(bad, "{ nope"));
  EXPECT_ERROR_CONTAINS(ReadParetoSeries(bad), "is not valid JSON");
  EXPECT_ERROR_CONTAINS(ReadParetoSeries(JoinPath(dir, "missing.json")), "missing.json");
}

TEST(BenchPlot, ScriptPicksAPngTerminalAndQuotesLabels) {
  ParetoSeries series;
  series.label = "it's glint";
  series.x_label = "x";
  series.y_label = "y";
  series.points = {{1, 10, 100}};
  const std::string script = ParetoScript({series}, "/tmp/p.dat", "/tmp/p.png", "title");
  EXPECT_NE(script.find("strstrt(GPVAL_TERMINALS, 'pngcairo')"), std::string::npos);
  EXPECT_NE(script.find("set terminal png size"), std::string::npos);
  EXPECT_NE(script.find("title 'it''s glint'"), std::string::npos);
}

bool IsPng(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  char magic[8] = {};
  file.read(magic, 8);
  return file.gcount() == 8 && std::string(magic, 8) == std::string("\x89PNG\r\n\x1a\n", 8);
}

TEST(BenchPlot, GnuplotDrawsOverlaidSeriesAndRefusesMixedAxes) {
  const std::string dir = testing::MakeTempDir("bench_plot");
  ASSERT_OK_AND_ASSIGN(ParetoSeries a, ParetoFromResults(RunToJson(SampleRun(WorkloadKind::kRandom))));
  ParetoSeries b = a;
  b.label = "other";
  for (ParetoPoint& p : b.points) p.y *= 2;
  const std::string png = JoinPath(dir, "pareto.png");
  ASSERT_OK(PlotPareto({a, b}, png, "two runs"));
  EXPECT_TRUE(IsPng(png));
  EXPECT_TRUE(PathExists(JoinPath(dir, "pareto.gp")));
  ASSERT_OK_AND_ASSIGN(std::string data, ReadFile(JoinPath(dir, "pareto.dat")));
  EXPECT_NE(data.find("# other"), std::string::npos);

  ASSERT_OK_AND_ASSIGN(ParetoSeries multi, ParetoFromResults(RunToJson(SampleRun(WorkloadKind::kMultiTurn))));
  EXPECT_ERROR_CONTAINS(PlotPareto({a, multi}, JoinPath(dir, "mixed.png"), "t"), "Pareto axes differ");
  ParetoSeries empty = a;
  empty.points.clear();
  EXPECT_ERROR_CONTAINS(PlotPareto({empty}, JoinPath(dir, "empty.png"), "t"), "nothing to plot");
}

TEST(BenchProgress, LinesShowTheLevelPhaseAndCounts) {
  ProgressSnapshot snapshot;
  snapshot.concurrency = 4;
  snapshot.phase = "measure";
  snapshot.total = 40;
  snapshot.done = 10;
  snapshot.failed = 1;
  snapshot.in_flight = 4;
  snapshot.elapsed_s = 12.34;
  EXPECT_EQ(TerminalProgress::FormatLine(snapshot, 8),
            "[c=4 measure] [##------] 10/40  ok 9  err 1  in flight 4  12.3 s");
  snapshot.phase = "prompts";
  snapshot.done = 40;
  EXPECT_EQ(TerminalProgress::FormatLine(snapshot, 4), "[c=4 prompts] [####] 40/40  12.3 s");
}

}  // namespace
}  // namespace glint::bench
