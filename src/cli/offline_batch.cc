#include "cli/offline_batch.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"
#include "server/batch_jobs.h"

namespace glint::cli {
namespace {

constexpr size_t kMaxInputBytes = size_t{1} << 34;
constexpr size_t kMaxOutputBytes = size_t{1} << 40;

// The endpoint of the file: the url of its first line that names one (each line is then checked against it).
Result<std::string> FileEndpoint(std::string_view content) {
  for (size_t start = 0; start < content.size();) {
    const size_t end = std::min(content.find('\n', start), content.size());
    auto line = server::ParseJsonObject(content.substr(start, end - start));
    start = end + 1;
    if (!line.ok()) continue;
    const auto url = line.value().find("url");
    if (url == line.value().end() || !url->is_string()) continue;
    const std::string endpoint = url->get<std::string>();
    if (!server::IsBatchEndpoint(endpoint)) {
      return InvalidArgument("--input: url '", endpoint.substr(0, 128), "' is not one glint batch runs (",
                             server::BatchEndpointList(), ")");
    }
    return endpoint;
  }
  return InvalidArgument("--input: no line names its url (one of ", server::BatchEndpointList(), ")");
}

// What the output already answers: custom_ids, and how many error lines without one (lines of the input that had
// none, answered in file order). Cuts a torn last line a killed run left.
struct Answered {
  std::set<std::string> custom_ids;
  int64_t without_id = 0;
};
Result<Answered> ReadAnswered(server::AppendOnlyFile& output) {
  GLINT_ASSIGN_OR_RETURN(std::string text, output.ReadAll(kMaxOutputBytes));
  Answered answered;
  size_t whole = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t newline = text.find('\n', start);
    if (newline == std::string::npos) break;
    auto line = server::ParseJsonObject(std::string_view(text).substr(start, newline - start), 256);
    if (!line.ok()) break;
    start = whole = newline + 1;
    const auto id = line.value().find("custom_id");
    if (id != line.value().end() && id->is_string()) {
      answered.custom_ids.insert(id->get<std::string>());
    } else {
      ++answered.without_id;
    }
  }
  if (whole < text.size()) {
    LogInfo("--output: dropping ", text.size() - whole, " bytes of a torn last line");
    GLINT_RETURN_IF_ERROR(output.TruncateTo(static_cast<int64_t>(whole)));
  }
  return answered;
}

// "1h02m", "3m05s", "12s".
std::string Duration(double seconds) {
  const int64_t s = std::llround(seconds);
  if (s >= 3600) return StrCat(s / 3600, "h", (s % 3600) / 60 < 10 ? "0" : "", (s % 3600) / 60, "m");
  if (s >= 60) return StrCat(s / 60, "m", s % 60 < 10 ? "0" : "", s % 60, "s");
  return StrCat(s, "s");
}

// The usage of a result line: chat/completions' prompt_tokens and completion_tokens, or the Responses and Messages
// APIs' input_tokens and output_tokens (0 for an error line).
struct LineUsage {
  int64_t prompt = 0;
  int64_t generated = 0;
};
LineUsage UsageOf(const server::Json& result) {
  const auto response = result.find("response");
  if (response == result.end() || !response->is_object()) return {};
  const server::Json& usage = (*response).value("body", server::Json::object()).value("usage", server::Json::object());
  if (!usage.is_object()) return {};
  const auto count = [&usage](const char* name, const char* other) {
    const auto found = usage.find(name);
    if (found != usage.end() && found->is_number_integer()) return found->get<int64_t>();
    const auto second = usage.find(other);
    return second != usage.end() && second->is_number_integer() ? second->get<int64_t>() : int64_t{0};
  };
  return {count("prompt_tokens", "input_tokens"), count("completion_tokens", "output_tokens")};
}

// What this run did, for the last log line and --report: the tokens of the results it wrote, its wall time (from
// the first request, so the model's loading is not in it) and the prefix cache's work meanwhile.
struct RunSummary {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double seconds = 0;
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
};

server::Json SummaryJson(const RunSummary& run, int64_t total, const std::string& output) {
  const double seconds = std::max(run.seconds, 1e-9);
  return {{"output", output},
          {"requests_total", total},
          {"requests_this_run", run.requests},
          {"seconds", run.seconds},
          {"prompt_tokens", run.prompt_tokens},
          {"generated_tokens", run.generated_tokens},
          {"total_tokens_per_second", static_cast<double>(run.prompt_tokens + run.generated_tokens) / seconds},
          {"generated_tokens_per_second", static_cast<double>(run.generated_tokens) / seconds},
          {"prefix_cache_query_tokens", run.prefix_query_tokens},
          {"prefix_cache_hit_tokens", run.prefix_hit_tokens},
          {"prefix_cache_hit_rate", run.prefix_query_tokens > 0 ? static_cast<double>(run.prefix_hit_tokens) /
                                                                      static_cast<double>(run.prefix_query_tokens)
                                                                : 0.0}};
}

Status ReportRun(const RunSummary& run, int64_t total, const std::string& output, const std::string& report_path) {
  const server::Json summary = SummaryJson(run, total, output);
  LogInfo("glint batch: ", total, " requests answered in ", output, " (", run.requests, " in this run, ",
          Duration(run.seconds), "; ", run.prompt_tokens, " prompt + ", run.generated_tokens,
          " generated tokens: ", std::llround(summary["total_tokens_per_second"].get<double>()), " total tokens/s, ",
          std::llround(summary["generated_tokens_per_second"].get<double>()), " generated tokens/s; prefix cache hit ",
          run.prefix_hit_tokens, " of ", run.prefix_query_tokens, " prompt tokens looked up)");
  if (report_path.empty()) return Status::Ok();
  return WriteFileAtomic(report_path, summary.dump(2) + "\n").WithContext("--report");
}

}  // namespace

void AddOfflineBatchFlags(CLI::App& command, OfflineBatchFlags& flags) {
  command.add_option("--input", flags.input, "the batch input: OpenAI batch JSONL, one request per line")->required();
  command
      .add_option("--output", flags.output,
                  "where result lines go (OpenAI's output format; failed requests carry their error), appended "
                  "and synced line by line")
      ->required();
  command.add_flag("--resume", flags.resume,
                   "skip the requests whose custom_id --output already holds (without it, a non-empty --output is "
                   "refused)");
  command
      .add_option("--concurrency", flags.concurrency,
                  "requests in flight at once (0: twice the sequences the engine runs at once, so a finished "
                  "one is replaced from the engine's queue at the next step)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}))
      ->capture_default_str();
  command.add_option("--report", flags.report,
                     "write a JSON summary of the run to this file at the end: requests, prompt and generated tokens, "
                     "seconds, tokens/s, prefix-cache tokens looked up and hit");
}

Result<OfflineBatch> PrepareOfflineBatch(const OfflineBatchFlags& flags) {
  OfflineBatch batch;
  GLINT_ASSIGN_OR_RETURN(batch.content, ReadFile(flags.input, kMaxInputBytes));
  GLINT_ASSIGN_OR_RETURN(batch.endpoint, FileEndpoint(batch.content));
  server::BatchInputLimits limits;
  limits.max_requests = size_t{1} << 24;  // offline: bounded by the file, not by a server's fairness
  limits.max_line_bytes = flags.max_line_bytes;
  server::BatchInput input = server::ValidateBatchInput(batch.content, batch.endpoint, limits);
  if (input.failure) return InvalidArgument("--input ", flags.input, ": ", input.failure->message);
  batch.total = static_cast<int64_t>(input.lines.size());
  server::FileDescriptor fd(::open(flags.output.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (fd.get() < 0) return FailedPrecondition("--output ", flags.output, ": ", std::strerror(errno));
  batch.output.emplace(std::move(fd), flags.output);
  batch.output_path = flags.output;
  batch.report_path = flags.report;
  GLINT_ASSIGN_OR_RETURN(Answered answered, ReadAnswered(*batch.output));
  const bool empty = answered.custom_ids.empty() && answered.without_id == 0;
  if (!empty && !flags.resume) {
    return FailedPrecondition("--output ", flags.output,
                              " already holds results: pass --resume to go on with the requests it lacks, or "
                              "choose another file");
  }
  int64_t skip_without_id = answered.without_id;
  for (server::BatchLine& line : input.lines) {
    if (line.custom_id.empty() ? skip_without_id-- > 0 : answered.custom_ids.count(line.custom_id) != 0) continue;
    batch.pending.push_back(std::move(line));
  }
  if (!empty) {
    LogInfo("--resume: ", batch.total - static_cast<int64_t>(batch.pending.size()), " of ", batch.total,
            " requests are in ", flags.output, "; ", batch.pending.size(), " to go");
  }
  return batch;
}

Status RunOfflineBatch(server::HttpServer& server, const server::GenerationBackend& backend, OfflineBatch batch,
                       int64_t concurrency) {
  const int64_t already = batch.total - static_cast<int64_t>(batch.pending.size());
  std::atomic<int64_t> done{0}, tokens{0}, prompt_tokens{0};
  std::string failure;
  const server::BackendMetrics cache_before = backend.Metrics();
  Stopwatch clock;
  std::atomic<bool> finished{false};
  // Progress on stderr once a second: requests done/total, generated tokens/s, ETA at the current rate.
  std::thread progress([&] {
    while (!finished.load()) {
      for (int i = 0; i < 10 && !finished.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const double seconds = clock.Seconds();
      const int64_t n = done.load();
      const double rate = seconds > 0 ? n / seconds : 0;
      const int64_t left = static_cast<int64_t>(batch.pending.size()) - n;
      std::fprintf(stderr, "glint batch: %lld/%lld requests, %.1f tokens/s, ETA %s\n",
                   static_cast<long long>(already) + n, static_cast<long long>(batch.total),
                   seconds > 0 ? tokens.load() / seconds : 0.0, rate > 0 ? Duration(left / rate).c_str() : "-");
    }
  });
  server::BatchRunOptions run;
  run.endpoint = batch.endpoint;
  run.concurrency = concurrency;
  run.keep_going = [] { return true; };
  server::RunBatchLines(
      batch.content, batch.pending, server::PrefixSharingOrder(batch.content, batch.pending),
      [&server](const std::string& url, std::string body, const std::function<bool()>& keep_going) {
        return server.ExecuteBatchRequest(url, std::move(body), keep_going);
      },
      run,
      [&](const server::BatchLine&, const server::Json& result) {
        Status saved = batch.output->Append(result.dump(-1, ' ', false, server::Json::error_handler_t::replace) + "\n");
        if (!saved.ok()) {
          failure = saved.message();
          return false;
        }
        const LineUsage usage = UsageOf(result);
        tokens += usage.generated;
        prompt_tokens += usage.prompt;
        ++done;
        return true;
      });
  finished = true;
  progress.join();
  if (!failure.empty()) {
    return FailedPrecondition(failure, " (", already + done.load(), " of ", batch.total,
                              " results are saved; run again with --resume once there is room)");
  }
  const server::BackendMetrics cache_after = backend.Metrics();
  RunSummary summary{done.load(),
                     prompt_tokens.load(),
                     tokens.load(),
                     clock.Seconds(),
                     cache_after.prefix_cache_query_tokens - cache_before.prefix_cache_query_tokens,
                     cache_after.prefix_cache_hit_tokens - cache_before.prefix_cache_hit_tokens};
  return ReportRun(summary, batch.total, batch.output_path, batch.report_path);
}

}  // namespace glint::cli
