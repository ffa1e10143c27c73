#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "base/file.h"

namespace glint::bench {
namespace {

using nlohmann::json;

json Number(double value) { return std::isfinite(value) ? json(value) : json(nullptr); }

json SummaryToJson(const Summary& summary) {
  return {{"count", summary.count},     {"mean", Number(summary.mean)}, {"median", Number(summary.median)},
          {"p90", Number(summary.p90)}, {"p99", Number(summary.p99)},   {"min", Number(summary.min)},
          {"max", Number(summary.max)}, {"std", Number(summary.stddev)}};
}

struct Axes {
  const char* x_key;
  const char* x_label;
  const char* y_key;
  const char* y_label;
};

Axes ParetoAxes(WorkloadKind workload) {
  if (workload == WorkloadKind::kMultiTurn) {
    return {"e2e_interactivity_p90", "Normalised E2E interactivity (tok/s = 1 / p90 of E2E per output token)",
            "output_throughput_per_chip", "Output throughput per chip (tok/s/chip)"};
  }
  return {"interactivity_median", "Interactivity (tok/s/user = 1000 / median TPOT ms)", "total_throughput_per_chip",
          "Total token throughput per chip (tok/s/chip)"};
}

std::string CsvNumber(double value) {
  if (!std::isfinite(value)) return "";
  char text[40];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

std::string CsvText(const std::string& value) {
  if (value.find_first_of(",\"\n\r") == std::string::npos) return value;
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"') quoted.push_back('"');
    quoted.push_back(c);
  }
  return quoted + "\"";
}

std::string CsvJson(const json& value) {
  if (value.is_string()) return CsvText(value.get<std::string>());
  if (value.is_null()) return "";
  return CsvText(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

using LevelColumn = std::pair<std::string, std::function<std::string(const LevelResult&)>>;

void AddSummaryColumns(std::vector<LevelColumn>& columns, const std::string& name, Summary LevelResult::*field) {
  columns.push_back({name + "_mean", [field](const LevelResult& l) { return CsvNumber((l.*field).mean); }});
  columns.push_back({name + "_median", [field](const LevelResult& l) { return CsvNumber((l.*field).median); }});
  columns.push_back({name + "_p90", [field](const LevelResult& l) { return CsvNumber((l.*field).p90); }});
  columns.push_back({name + "_p99", [field](const LevelResult& l) { return CsvNumber((l.*field).p99); }});
}

std::vector<LevelColumn> LevelColumns() {
  auto count = [](int64_t LevelResult::*field) {
    return [field](const LevelResult& l) { return std::to_string(l.*field); };
  };
  auto number = [](double LevelResult::*field) {
    return [field](const LevelResult& l) { return CsvNumber(l.*field); };
  };
  std::vector<LevelColumn> columns = {
      {"concurrency", [](const LevelResult& l) { return std::to_string(l.concurrency); }},
      {"interrupted", [](const LevelResult& l) { return std::string(l.interrupted ? "true" : "false"); }},
      {"sessions_planned", count(&LevelResult::sessions_planned)},
      {"requests_planned", count(&LevelResult::requests_planned)},
      {"requests_sent", count(&LevelResult::requests_sent)},
      {"completed", count(&LevelResult::completed)},
      {"failed", count(&LevelResult::failed)},
      {"cancelled", count(&LevelResult::cancelled)},
      {"skipped", count(&LevelResult::skipped)},
      {"errors",
       [](const LevelResult& l) {
         std::string text;
         for (const auto& [kind, n] : l.errors) text += StrCat(text.empty() ? "" : ";", kind, "=", n);
         return CsvText(text);
       }},
      {"warmup_requests", count(&LevelResult::warmup_requests)},
      {"warmup_failed", count(&LevelResult::warmup_failed)},
      {"duration_s", number(&LevelResult::duration_s)},
      {"input_tokens", count(&LevelResult::input_tokens)},
      {"output_tokens", count(&LevelResult::output_tokens)},
      {"request_throughput", number(&LevelResult::request_throughput)},
      {"output_throughput", number(&LevelResult::output_throughput)},
      {"total_throughput", number(&LevelResult::total_throughput)},
      {"output_throughput_per_chip", number(&LevelResult::output_throughput_per_chip)},
      {"total_throughput_per_chip", number(&LevelResult::total_throughput_per_chip)},
  };
  AddSummaryColumns(columns, "ttft_ms", &LevelResult::ttft_ms);
  AddSummaryColumns(columns, "tpot_ms", &LevelResult::tpot_ms);
  AddSummaryColumns(columns, "itl_ms", &LevelResult::itl_ms);
  AddSummaryColumns(columns, "e2e_ms", &LevelResult::e2e_ms);
  AddSummaryColumns(columns, "e2e_per_output_token_ms", &LevelResult::e2e_per_output_token_ms);
  std::vector<LevelColumn> tail = {
      {"interactivity_median", number(&LevelResult::interactivity_median)},
      {"interactivity_mean", number(&LevelResult::interactivity_mean)},
      {"e2e_interactivity_p90", number(&LevelResult::e2e_interactivity_p90)},
      {"cost_per_million_output_tokens", number(&LevelResult::cost_per_million_output_tokens)},
      {"cost_per_million_total_tokens", number(&LevelResult::cost_per_million_total_tokens)},
      {"usage_requests_without_usage",
       [](const LevelResult& l) { return std::to_string(l.usage.requests_without_usage); }},
      {"usage_completion_tokens", [](const LevelResult& l) { return std::to_string(l.usage.usage_completion_tokens); }},
      {"usage_content_chunks", [](const LevelResult& l) { return std::to_string(l.usage.content_chunks); }},
      {"usage_completion_vs_chunks_mismatches",
       [](const LevelResult& l) { return std::to_string(l.usage.completion_vs_chunks_mismatches); }},
      {"usage_prompt_mismatches", [](const LevelResult& l) { return std::to_string(l.usage.prompt_mismatches); }},
      {"usage_output_length_mismatches",
       [](const LevelResult& l) { return std::to_string(l.usage.output_length_mismatches); }},
      {"spec_acceptance_rate",
       [](const LevelResult& l) { return l.spec_decode ? CsvNumber(l.spec_decode->acceptance_rate) : std::string(); }},
      {"spec_acceptance_length",
       [](const LevelResult& l) {
         return l.spec_decode ? CsvNumber(l.spec_decode->acceptance_length) : std::string();
       }},
  };
  columns.insert(columns.end(), tail.begin(), tail.end());
  return columns;
}

// The run-wide fields repeated on every CSV row, so CSVs of several runs can be concatenated.
std::vector<std::pair<std::string, json>> ConfigColumns(const BenchRun& run) {
  std::vector<std::pair<std::string, json>> columns;
  const json config = ConfigToJson(run.config);
  for (const auto& [key, value] : config.items()) columns.emplace_back("config_" + key, value);
  columns.emplace_back("run_started_at", run.started_at);
  columns.emplace_back("run_interrupted", run.interrupted);
  return columns;
}

// The first `max_bytes` of `text` (cut at a UTF-8 character boundary) and "..." when longer; newlines become
// spaces, so a server's multi-line error stays on one table line.
std::string Shorten(std::string text, size_t max_bytes) {
  if (text.size() > max_bytes) {
    size_t cut = max_bytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
    text = text.substr(0, cut) + "...";
  }
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  return text;
}

std::string Fixed(double value, int decimals) {
  if (!std::isfinite(value)) return "-";
  char text[40];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

}  // namespace

json LevelToJson(const LevelResult& level) {
  json errors = json::object();
  for (const auto& [kind, n] : level.errors) errors[kind] = n;
  json spec = nullptr;
  if (level.spec_decode) {
    spec = {{"drafts", level.spec_decode->drafts},
            {"draft_tokens", level.spec_decode->draft_tokens},
            {"accepted_tokens", level.spec_decode->accepted_tokens},
            {"acceptance_rate", Number(level.spec_decode->acceptance_rate)},
            {"acceptance_length", Number(level.spec_decode->acceptance_length)},
            {"per_position_acceptance_rate", level.spec_decode->per_position_acceptance_rate}};
  }
  return {
      {"concurrency", level.concurrency},
      {"interrupted", level.interrupted},
      {"sessions_planned", level.sessions_planned},
      {"requests_planned", level.requests_planned},
      {"requests_sent", level.requests_sent},
      {"completed", level.completed},
      {"failed", level.failed},
      {"cancelled", level.cancelled},
      {"skipped", level.skipped},
      {"resent_on_fresh_connection", level.resent},
      {"errors", errors},
      {"error_examples", level.error_examples},
      {"warmup_requests", level.warmup_requests},
      {"warmup_failed", level.warmup_failed},
      {"duration_s", Number(level.duration_s)},
      {"input_tokens", level.input_tokens},
      {"output_tokens", level.output_tokens},
      {"request_throughput", Number(level.request_throughput)},
      {"output_throughput", Number(level.output_throughput)},
      {"total_throughput", Number(level.total_throughput)},
      {"output_throughput_per_chip", Number(level.output_throughput_per_chip)},
      {"total_throughput_per_chip", Number(level.total_throughput_per_chip)},
      {"ttft_ms", SummaryToJson(level.ttft_ms)},
      {"tpot_ms", SummaryToJson(level.tpot_ms)},
      {"itl_ms", SummaryToJson(level.itl_ms)},
      {"e2e_ms", SummaryToJson(level.e2e_ms)},
      {"e2e_per_output_token_ms", SummaryToJson(level.e2e_per_output_token_ms)},
      {"interactivity_median", Number(level.interactivity_median)},
      {"interactivity_mean", Number(level.interactivity_mean)},
      {"e2e_interactivity_p90", Number(level.e2e_interactivity_p90)},
      {"cost_per_million_output_tokens", Number(level.cost_per_million_output_tokens)},
      {"cost_per_million_total_tokens", Number(level.cost_per_million_total_tokens)},
      {"usage_check",
       {{"requests_without_usage", level.usage.requests_without_usage},
        {"usage_completion_tokens", level.usage.usage_completion_tokens},
        {"content_chunks", level.usage.content_chunks},
        {"completion_vs_chunks_mismatches", level.usage.completion_vs_chunks_mismatches},
        {"prompt_mismatches", level.usage.prompt_mismatches},
        {"output_length_mismatches", level.usage.output_length_mismatches}}},
      {"spec_decode", spec},
      {"spec_decode_note", level.spec_decode_note},
  };
}

json RunToJson(const BenchRun& run) {
  const Axes axes = ParetoAxes(run.config.workload);
  json levels = json::array();
  for (const LevelResult& level : run.levels) levels.push_back(LevelToJson(level));
  return {{"format", "glint-bench-results"},
          {"format_version", kResultsFormatVersion},
          {"config", ConfigToJson(run.config)},
          {"started_at", run.started_at},
          {"finished_at", run.finished_at},
          {"interrupted", run.interrupted},
          {"stopped_by_error", run.stopped_by_error},
          {"pareto", {{"x", axes.x_key}, {"x_label", axes.x_label}, {"y", axes.y_key}, {"y_label", axes.y_label}}},
          {"levels", levels}};
}

std::string LevelsCsv(const BenchRun& run) {
  const std::vector<LevelColumn> columns = LevelColumns();
  const auto config = ConfigColumns(run);
  std::string csv;
  for (size_t i = 0; i < columns.size(); ++i) csv += (i ? "," : "") + columns[i].first;
  for (const auto& [name, value] : config) csv += "," + name;
  csv += "\n";
  for (const LevelResult& level : run.levels) {
    for (size_t i = 0; i < columns.size(); ++i) csv += (i ? "," : "") + columns[i].second(level);
    for (const auto& [name, value] : config) csv += "," + CsvJson(value);
    csv += "\n";
  }
  return csv;
}

std::string RequestsCsv(const BenchRun& run) {
  std::string csv =
      "concurrency,index,session,turn,subagent,outcome,http_status,start_s,end_s,ttft_ms,tpot_ms,e2e_ms,"
      "content_chunks,usage_prompt_tokens,usage_completion_tokens,expected_prompt_tokens,max_tokens,error\n";
  for (size_t level = 0; level < run.levels.size() && level < run.level_requests.size(); ++level) {
    for (const RequestRecord& r : run.level_requests[level]) {
      const RequestTiming timing = ComputeRequestTiming(r);
      csv += StrCat(run.levels[level].concurrency, ",", r.index, ",", r.session, ",", r.turn, ",",
                    r.subagent ? "true" : "false", ",", OutcomeName(r.outcome), ",", r.http_status, ",",
                    CsvNumber(r.start_s), ",", CsvNumber(r.end_s), ",", CsvNumber(timing.ttft_s * 1e3), ",",
                    CsvNumber(timing.tpot_s * 1e3), ",", CsvNumber(timing.e2e_s * 1e3), ",", r.content_times_s.size(),
                    ",", r.usage_prompt_tokens ? std::to_string(*r.usage_prompt_tokens) : "", ",",
                    r.usage_completion_tokens ? std::to_string(*r.usage_completion_tokens) : "", ",",
                    r.expected_prompt_tokens, ",", r.max_tokens, ",", CsvText(r.error), "\n");
    }
  }
  return csv;
}

std::string SummaryTable(const BenchRun& run) {
  const BenchConfig& c = run.config;
  const std::string workload =
      c.requests_file.empty()
          ? StrCat("workload ", WorkloadKindName(c.workload), ", input ", c.input_len, " / output ", c.output_len,
                   " tokens, range ratio ", RangeRatio(c), " (", RangeConventionName(c.range_convention), "), ",
                   PromptFormatName(c.prompt_format), " prompts, ", c.chips, " chip(s), seed ",
                   c.seed ? std::to_string(*c.seed) : "-")
          : StrCat("requests of ", c.requests_file, ", ", c.chips, " chip(s)");
  std::string out = StrCat("glint bench: ", c.label, "\n  ", workload,
                           c.request_rate > 0 ? StrCat(", ", c.request_rate, " requests/s") : std::string(), "\n");
  char line[512];
  std::snprintf(line, sizeof(line), "%6s %11s %5s %8s %10s %10s %10s %9s %9s %9s %9s %9s %9s %10s %10s %9s\n", "conc",
                "done/sent", "err", "dur s", "out tok/s", "tot tok/s", "tot/chip", "TTFT p50", "TTFT p99", "TPOT p50",
                "TPOT p99", "ITL p99", "E2E p50", "tok/s/user", "E2E tok/s", "$/M out");
  out += line;
  for (const LevelResult& l : run.levels) {
    std::snprintf(line, sizeof(line), "%6d %11s %5lld %8s %10s %10s %10s %9s %9s %9s %9s %9s %9s %10s %10s %9s%s\n",
                  l.concurrency, StrCat(l.completed, "/", l.requests_sent).c_str(), static_cast<long long>(l.failed),
                  Fixed(l.duration_s, 1).c_str(), Fixed(l.output_throughput, 1).c_str(),
                  Fixed(l.total_throughput, 1).c_str(), Fixed(l.total_throughput_per_chip, 1).c_str(),
                  Fixed(l.ttft_ms.median, 1).c_str(), Fixed(l.ttft_ms.p99, 1).c_str(),
                  Fixed(l.tpot_ms.median, 2).c_str(), Fixed(l.tpot_ms.p99, 2).c_str(), Fixed(l.itl_ms.p99, 2).c_str(),
                  Fixed(l.e2e_ms.median, 0).c_str(), Fixed(l.interactivity_median, 1).c_str(),
                  Fixed(l.e2e_interactivity_p90, 1).c_str(), Fixed(l.cost_per_million_output_tokens, 3).c_str(),
                  l.interrupted ? "  (interrupted)" : "");
    out += line;
  }
  out +=
      "  (latencies in ms; tok/s/user = 1000 / median TPOT; E2E tok/s = 1 / p90 of "
      "E2E per output token)\n";
  for (const LevelResult& l : run.levels) {
    std::string notes;
    for (const auto& [kind, n] : l.errors) notes += StrCat(" ", kind, "=", n);
    if (l.cancelled) notes += StrCat(" cancelled=", l.cancelled);
    if (l.skipped) notes += StrCat(" skipped=", l.skipped);
    if (l.resent) notes += StrCat(" resent=", l.resent, " (the server closed a kept-alive connection)");
    if (l.warmup_failed) notes += StrCat(" warm-up failures=", l.warmup_failed, "/", l.warmup_requests);
    if (l.usage.requests_without_usage) notes += StrCat(" no-usage=", l.usage.requests_without_usage);
    if (l.usage.prompt_mismatches) notes += StrCat(" prompt-length-mismatch=", l.usage.prompt_mismatches);
    if (l.usage.output_length_mismatches) notes += StrCat(" output-length-mismatch=", l.usage.output_length_mismatches);
    if (l.usage.completion_vs_chunks_mismatches) {
      notes += StrCat(" usage≠chunks=", l.usage.completion_vs_chunks_mismatches, " (", l.usage.usage_completion_tokens,
                      " tokens in ", l.usage.content_chunks, " chunks)");
    }
    if (l.spec_decode) {
      notes += StrCat(" spec-decode acceptance=", Fixed(l.spec_decode->acceptance_rate, 3),
                      " length=", Fixed(l.spec_decode->acceptance_length, 2));
    }
    if (!notes.empty()) out += StrCat("  c=", l.concurrency, ":", notes, "\n");
    // The server's own words on why requests failed (e.g. a 400 naming the bad field); all in results.json.
    if (!l.error_examples.empty()) out += StrCat("    first error: ", Shorten(l.error_examples.front(), 400), "\n");
  }
  if (run.interrupted) out += "  interrupted by Ctrl-C: the last level is partial, later levels were not run\n";
  if (!run.stopped_by_error.empty()) out += StrCat("  stopped early: ", run.stopped_by_error, "\n");
  return out;
}

Status WriteRunFiles(const BenchRun& run, const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return IoError("cannot create output directory ", dir, ": ", error.message());
  // Error messages quote server replies verbatim: invalid UTF-8 in them is replaced, not thrown on.
  const std::string results = RunToJson(run).dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  GLINT_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "results.json"), results));
  GLINT_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "results.csv"), LevelsCsv(run)));
  GLINT_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "requests.csv"), RequestsCsv(run)));
  return Status::Ok();
}

Result<ParetoSeries> ParetoFromResults(const json& results) {
  if (!results.is_object() || results.value("format", "") != "glint-bench-results") {
    return InvalidArgument("not a glint bench results file (expected \"format\": \"glint-bench-results\")");
  }
  const json& pareto = results.contains("pareto") ? results["pareto"] : json();
  if (!pareto.is_object() || !pareto.contains("x") || !pareto.contains("y") || !pareto["x"].is_string() ||
      !pareto["y"].is_string()) {
    return InvalidArgument("results file has no \"pareto\" axes (x, y)");
  }
  ParetoSeries series;
  series.x_key = pareto["x"].get<std::string>();
  series.y_key = pareto["y"].get<std::string>();
  series.x_label = pareto.value("x_label", series.x_key);
  series.y_label = pareto.value("y_label", series.y_key);
  if (results.contains("config") && results["config"].is_object()) {
    series.label = results["config"].value("label", "");
  }
  if (!results.contains("levels") || !results["levels"].is_array()) {
    return InvalidArgument("results file has no \"levels\" array");
  }
  for (const json& level : results["levels"]) {
    if (!level.is_object() || !level.contains("concurrency") || !level["concurrency"].is_number_integer()) {
      return InvalidArgument("a level has no integer \"concurrency\"");
    }
    if (level.value("interrupted", false)) continue;  // partial figures of a level cut short by Ctrl-C
    const json x = level.value(series.x_key, json());
    const json y = level.value(series.y_key, json());
    if (!x.is_number() || !y.is_number()) continue;  // undefined at this level (e.g. every request failed)
    series.points.push_back({level["concurrency"].get<int>(), x.get<double>(), y.get<double>()});
  }
  return series;
}

Result<ParetoSeries> ReadParetoSeries(const std::string& results_path) {
  GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(results_path, size_t{256} << 20));
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return InvalidArgument(results_path, " is not valid JSON");
  auto series = ParetoFromResults(parsed);
  if (!series.ok()) return series.status().WithContext(results_path);
  if (series->label.empty()) series->label = results_path;
  return series;
}

}  // namespace glint::bench
