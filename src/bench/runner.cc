#include "bench/runner.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "base/log.h"
#include "bench/http.h"
#include "bench/prompts.h"
#include "bench/workload.h"

namespace glint::bench {
namespace {

using nlohmann::json;

// Every client with a request that may be in flight, so the watchdog can end it.
class ClientRegistry {
 public:
  void Add(StreamingClient* client) {
    std::lock_guard<std::mutex> lock(mutex_);
    clients_.insert(client);
  }
  void Remove(StreamingClient* client) {
    std::lock_guard<std::mutex> lock(mutex_);
    clients_.erase(client);
  }
  void PollAll(Clock::time_point now, bool cancel) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (StreamingClient* client : clients_) client->Poll(now, cancel);
  }

 private:
  std::mutex mutex_;
  std::set<StreamingClient*> clients_;
};

// State shared by the threads of one phase (warm-up or measurement) of a level.
struct Phase {
  Phase(const BenchConfig& config, const HttpOptions& http, const std::atomic<bool>& stop, Clock::time_point epoch)
      : config(config), http(http), stop(stop), epoch(epoch) {}

  const BenchConfig& config;
  const HttpOptions& http;
  const std::atomic<bool>& stop;
  Clock::time_point epoch;
  ClientRegistry registry;
  std::mutex mutex;  // guards records and skipped
  std::vector<RequestRecord> records;
  int64_t skipped = 0;
  std::atomic<int64_t> next_index{0};
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> failed{0};
  std::atomic<int64_t> in_flight{0};
};

// The fields every generation request gets from the bench: the model, a stream with usage, and logprobs when
// tokens are counted by them (see TokenCounting: chat takes a boolean, completions the number of alternatives; 1,
// not 0, because llama-server reads "logprobs" as its n_probs and sends no probabilities at 0).
void SetMeasuredFields(const BenchConfig& config, bool chat, json& body) {
  body["model"] = config.model;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (config.token_counting == TokenCounting::kLogprobs) {
    if (chat) {
      body["logprobs"] = true;
    } else {
      body["logprobs"] = 1;
    }
  }
}

// A --requests body: the file's, with --extra-body over it and the measured fields set.
json ReplayBody(const BenchConfig& config, const ReplayRequest& request) {
  json body = request.body;
  for (const auto& [key, value] : config.extra_body.items()) body[key] = value;
  SetMeasuredFields(config, request.chat, body);
  return body;
}

json GenerationBody(const BenchConfig& config, const TurnPlan& turn, const json* messages) {
  json body = config.extra_body;
  if (messages != nullptr) {
    body["messages"] = *messages;
  } else if (const auto* text = std::get_if<std::string>(&turn.user_prompt)) {
    body["prompt"] = *text;
  } else {
    body["prompt"] = std::get<std::vector<int32_t>>(turn.user_prompt);
  }
  body["max_tokens"] = turn.max_tokens;
  body["ignore_eos"] = true;  // replies of exactly max_tokens tokens (vLLM's and glint's extension)
  SetMeasuredFields(config, messages != nullptr, body);
  return body;
}

class SessionRunner {
 public:
  explicit SessionRunner(Phase& phase) : phase_(phase) {}

  // Runs the turns of `session` in order on `client`. Returns the last reply, or nothing when a turn failed (the
  // rest of the session is skipped: its context would be wrong) or Ctrl-C stopped it.
  std::optional<std::string> Run(const SessionPlan& session, StreamingClient& client) {
    const bool multiturn = phase_.config.workload == WorkloadKind::kMultiTurn;
    json messages = json::array();
    std::string subagent_reports;  // replies of the last burst, passed into the next user message
    std::string reply;
    for (size_t index = 0; index < session.turns.size(); ++index) {
      const TurnPlan& turn = session.turns[index];
      if (phase_.stop.load()) {
        Skip(RemainingRequests(session, index));
        return std::nullopt;
      }
      json body;
      bool chat = multiturn;
      if (turn.replay != nullptr) {
        chat = turn.replay->chat;
        body = ReplayBody(phase_.config, *turn.replay);
      } else if (chat) {
        const std::string& text = std::get<std::string>(turn.user_prompt);
        messages.push_back(
            {{"role", "user"}, {"content", subagent_reports.empty() ? text : StrCat(subagent_reports, "\n\n", text)}});
        body = GenerationBody(phase_.config, turn, &messages);
      } else {
        body = GenerationBody(phase_.config, turn, nullptr);
      }
      RequestRecord record;
      record.index = phase_.next_index++;
      record.session = session.id;
      record.turn = static_cast<int>(index);
      record.subagent = session.subagent;
      record.expected_prompt_tokens = turn.expected_prompt_tokens;
      record.max_tokens = turn.max_tokens;
      reply.clear();
      ++phase_.in_flight;
      // Invalid UTF-8 (e.g. a --model given in another encoding) is replaced rather than thrown on.
      const std::string payload = body.dump(-1, ' ', false, json::error_handler_t::replace);
      client.Run(chat ? "/v1/chat/completions" : "/v1/completions", payload, phase_.config.request_timeout_s,
                 phase_.epoch, record, reply);
      --phase_.in_flight;
      const bool ok = record.outcome == Outcome::kOk;
      {
        std::lock_guard<std::mutex> lock(phase_.mutex);
        phase_.records.push_back(std::move(record));
      }
      ++phase_.done;
      if (!ok) {
        ++phase_.failed;
        Skip(RemainingRequests(session, index) - 1);  // this turn's burst and the later turns
        return std::nullopt;
      }
      if (multiturn) messages.push_back({{"role", "assistant"}, {"content", reply}});
      subagent_reports = turn.subagents_after.empty() ? std::string() : RunBurst(turn.subagents_after);
    }
    return reply;
  }

 private:
  // Sub-agents run in parallel, each on its own connection; returns their replies as one report.
  std::string RunBurst(const std::vector<SessionPlan>& agents) {
    std::vector<std::optional<std::string>> replies(agents.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < agents.size(); ++i) {
      threads.emplace_back([this, &agents, &replies, i] {
        StreamingClient client(phase_.http);
        phase_.registry.Add(&client);
        replies[i] = SessionRunner(phase_).Run(agents[i], client);
        phase_.registry.Remove(&client);
      });
    }
    for (std::thread& thread : threads) thread.join();
    std::string report;
    for (size_t i = 0; i < replies.size(); ++i) {
      if (!replies[i]) continue;
      report += StrCat("Sub-agent ", i + 1, " reported: ", *replies[i], "\n");
    }
    return report;
  }

  static int64_t SubagentRequests(const TurnPlan& turn) {
    int64_t count = 0;
    for (const SessionPlan& agent : turn.subagents_after) count += CountRequests(agent);
    return count;
  }

  // Requests of turns index.. of `session`, sub-agents included.
  static int64_t RemainingRequests(const SessionPlan& session, size_t index) {
    int64_t count = 0;
    for (size_t i = index; i < session.turns.size(); ++i) count += 1 + SubagentRequests(session.turns[i]);
    return count;
  }

  void Skip(int64_t requests) {
    std::lock_guard<std::mutex> lock(phase_.mutex);
    phase_.skipped += requests;
  }

  Phase& phase_;
};

struct PhaseResult {
  std::vector<RequestRecord> records;
  int64_t skipped = 0;
};

// --request-rate: session i may start at start + its arrival (--arrivals poisson, planned) or start + i / rate.
// Sleeps in short slices so Ctrl-C is not held up; false when the stop flag was raised meanwhile.
bool WaitForStartTime(Clock::time_point start, const SessionPlan& session, size_t index, double rate,
                      const std::atomic<bool>& stop) {
  if (rate <= 0) return true;
  const double offset_s = session.arrival_s >= 0 ? session.arrival_s : static_cast<double>(index) / rate;
  const Clock::time_point due =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(offset_s));
  constexpr auto kSlice = std::chrono::milliseconds(20);
  while (!stop.load()) {
    const Clock::time_point now = Clock::now();
    if (now >= due) return true;
    std::this_thread::sleep_until(std::min(due, now + kSlice));
  }
  return false;
}

// `rate` > 0 paces the session starts (--request-rate); 0 runs them closed-loop.
PhaseResult RunPhase(const BenchConfig& config, const HttpOptions& http, const std::atomic<bool>& stop,
                     const RunHooks& hooks, const std::vector<SessionPlan>& sessions, int concurrency, double rate,
                     int64_t total_requests, const std::string& phase_name, Clock::time_point epoch) {
  Phase phase(config, http, stop, epoch);
  std::atomic<size_t> next_session{0};
  const int workers = static_cast<int>(std::min<size_t>(static_cast<size_t>(concurrency), sessions.size()));
  int running = workers;
  std::mutex mutex;
  std::condition_variable finished;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      StreamingClient client(http);
      phase.registry.Add(&client);
      SessionRunner runner(phase);
      for (size_t i = next_session++; i < sessions.size(); i = next_session++) {
        if (!WaitForStartTime(epoch, sessions[i], i, rate, stop) || stop.load()) {
          std::lock_guard<std::mutex> lock(phase.mutex);
          phase.skipped += CountRequests(sessions[i]);
          continue;
        }
        runner.Run(sessions[i], client);
      }
      phase.registry.Remove(&client);
      {
        std::lock_guard<std::mutex> lock(mutex);
        --running;
      }
      finished.notify_all();
    });
  }

  const auto interval =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(hooks.watchdog_interval_s));
  const Clock::time_point phase_start = Clock::now();
  auto snapshot = [&] {
    ProgressSnapshot s;
    s.concurrency = concurrency;
    s.phase = phase_name;
    s.total = total_requests;
    s.done = phase.done.load();
    s.failed = phase.failed.load();
    s.in_flight = phase.in_flight.load();
    s.elapsed_s = std::chrono::duration<double>(Clock::now() - phase_start).count();
    return s;
  };
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      if (finished.wait_for(lock, interval, [&] { return running == 0; })) break;
    }
    phase.registry.PollAll(Clock::now(), stop.load());
    if (hooks.progress != nullptr) hooks.progress->Update(snapshot());
  }
  for (std::thread& thread : threads) thread.join();
  if (hooks.progress != nullptr) hooks.progress->Finished(snapshot());

  PhaseResult result;
  result.records = std::move(phase.records);
  result.skipped = phase.skipped;
  std::sort(result.records.begin(), result.records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  return result;
}

// A model as GET /v1/models lists it.
struct ServedModel {
  std::string id;
  std::optional<int64_t> max_model_len;  // vLLM's and glint's extension field; absent on other servers
};

// Resolves --model against GET /v1/models (the first listed model when --model is empty).
Result<ServedModel> ResolveModel(HttpClient& http, const BenchConfig& config) {
  const std::string& requested = config.model;
  auto reply = http.Get("/v1/models");
  if (!reply.ok()) {
    return reply.status().WithContext(StrCat("cannot reach the server at ", http.options().base.origin));
  }
  // Without the right key nothing else will work either: say so before guessing anything.
  if (reply->status == 401 || reply->status == 403) {
    return FailedPrecondition("GET /v1/models returned HTTP ", reply->status, " (", reply->body.substr(0, 300), "): ",
                              config.api_key.empty()
                                  ? "the server requires an API key: pass --api-key KEY or set OPENAI_API_KEY"
                                  : "the server refused the API key given by --api-key or OPENAI_API_KEY");
  }
  std::vector<ServedModel> served;
  if (reply->status == 200) {
    json parsed = json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object() && parsed.contains("data") && parsed["data"].is_array()) {
      for (const json& entry : parsed["data"]) {
        if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_string()) continue;
        ServedModel model{entry["id"].get<std::string>(), std::nullopt};
        if (entry.contains("max_model_len") && entry["max_model_len"].is_number_integer() &&
            entry["max_model_len"].get<int64_t>() > 0) {
          model.max_model_len = entry["max_model_len"].get<int64_t>();
        }
        served.push_back(std::move(model));
      }
    }
  }
  if (requested.empty()) {
    if (served.empty()) {
      return FailedPrecondition("GET /v1/models (HTTP ", reply->status, ") named no model; pass --model");
    }
    return served.front();
  }
  if (served.empty()) {
    LogWarning("GET /v1/models returned HTTP ", reply->status, " and no model; using --model ", requested);
    return ServedModel{requested, std::nullopt};
  }
  for (const ServedModel& model : served) {
    if (model.id == requested) return model;
  }
  std::string list;
  for (const ServedModel& model : served) list += (list.empty() ? "" : ", ") + model.id;
  return InvalidArgument("--model ", requested, " is not served; GET /v1/models lists: ", list);
}

Result<SpecDecodeCounters> ScrapeSpecDecode(HttpClient& http) {
  GLINT_ASSIGN_OR_RETURN(HttpReply reply, http.Get("/metrics"));
  if (reply.status != 200) return FailedPrecondition("GET /metrics returned HTTP ", reply.status);
  GLINT_ASSIGN_OR_RETURN(std::vector<PrometheusSample> samples, ParsePrometheusText(reply.body));
  return ExtractSpecDecodeCounters(samples);
}

void FillSpecDecode(const Result<SpecDecodeCounters>& before, const Result<SpecDecodeCounters>& after,
                    LevelResult& level) {
  if (!before.ok() || !after.ok()) {
    level.spec_decode_note = StrCat("not measured: ", (!before.ok() ? before : after).status().message());
  } else if (!before->present || !after->present) {
    level.spec_decode_note = "not measured: the server exports no vllm:spec_decode_* counters";
  } else {
    level.spec_decode = SpecDecodeDelta(*before, *after);
    if (!level.spec_decode) level.spec_decode_note = "no drafts were made during this level";
  }
}

uint64_t FreshSeed() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return MixSeed(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()),
                 static_cast<uint64_t>(getpid()));
}

// The level's sessions and prompts, with a progress line while they are built (tokenizing through the server).
Result<LevelPlan> PlanLevelShowingProgress(const BenchConfig& config, int concurrency, PromptFactory& prompts,
                                           const std::atomic<bool>& stop, const RunHooks& hooks) {
  const Clock::time_point prompt_start = Clock::now();
  ProgressSnapshot prompt_progress;
  prompt_progress.concurrency = concurrency;
  prompt_progress.phase = "prompts";
  auto plan = PlanLevel(config, *config.seed, concurrency, prompts, stop, [&](int64_t built, int64_t total) {
    prompt_progress.done = built;
    prompt_progress.total = total;
    prompt_progress.elapsed_s = std::chrono::duration<double>(Clock::now() - prompt_start).count();
    if (hooks.progress != nullptr) hooks.progress->Update(prompt_progress);
  });
  if (hooks.progress != nullptr) hooks.progress->Finished(prompt_progress);
  return plan;
}

// One planned level: the warm-up, then the measured phase between two scrapes of the speculative-decoding
// counters; fills `level` and returns the measured records.
std::vector<RequestRecord> RunLevel(const BenchConfig& config, const HttpOptions& http, HttpClient& setup,
                                    const std::atomic<bool>& stop, const RunHooks& hooks, const LevelPlan& plan,
                                    const CostModel& cost, LevelResult& level) {
  const int concurrency = level.concurrency;
  level.sessions_planned = static_cast<int64_t>(plan.sessions.size());
  level.requests_planned = plan.requests;
  if (!plan.warmup.empty()) {
    PhaseResult warmup = RunPhase(config, http, stop, hooks, plan.warmup, concurrency, /*rate=*/0,
                                  static_cast<int64_t>(plan.warmup.size()), "warm-up", Clock::now());
    level.warmup_requests = static_cast<int64_t>(warmup.records.size());
    for (const RequestRecord& record : warmup.records) level.warmup_failed += record.outcome != Outcome::kOk;
  }
  PhaseResult measured;
  Result<SpecDecodeCounters> before = ScrapeSpecDecode(setup);
  if (!stop.load()) {
    measured = RunPhase(config, http, stop, hooks, plan.sessions, concurrency, config.request_rate, plan.requests,
                        "measure", Clock::now());
  } else {
    for (const SessionPlan& session : plan.sessions) measured.skipped += CountRequests(session);
  }
  Result<SpecDecodeCounters> after = ScrapeSpecDecode(setup);
  ComputeLevelMetrics(measured.records, cost, level);
  level.skipped = measured.skipped;
  FillSpecDecode(before, after, level);
  level.interrupted = stop.load();
  return std::move(measured.records);
}

}  // namespace

std::string UtcTimestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

Status RunBenchmark(const BenchConfig& config_in, const std::atomic<bool>& stop, const RunHooks& hooks, BenchRun& run) {
  GLINT_RETURN_IF_ERROR(ValidateConfig(config_in));
  std::vector<ReplayRequest> replay;  // --requests, read before the server is asked anything
  if (!config_in.requests_file.empty()) {
    GLINT_ASSIGN_OR_RETURN(replay, LoadReplayRequests(config_in.requests_file));
  }
  run = BenchRun();
  run.config = config_in;
  BenchConfig& config = run.config;
  run.started_at = UtcTimestamp();
  if (!config.seed) config.seed = FreshSeed();

  HttpOptions http;
  GLINT_ASSIGN_OR_RETURN(http.base, ParseBaseUrl(config.base_url));
  http.api_key = config.api_key;
  http.count_logprob_tokens = config.token_counting == TokenCounting::kLogprobs;
  HttpClient setup(http, std::min(config.request_timeout_s, 300.0));
  GLINT_ASSIGN_OR_RETURN(const ServedModel served, ResolveModel(setup, config));
  config.model = served.id;
  // A replayed file's prompt lengths are the server's to count: one that does not fit is its 400, per request.
  if (served.max_model_len && replay.empty()) GLINT_RETURN_IF_ERROR(CheckFitsContext(config, *served.max_model_len));
  if (config.label.empty()) config.label = StrCat(config.model, " @ ", config.base_url);
  ServerTokenizer tokenizer(setup, config.model);
  PromptFactory prompts(tokenizer);
  if (config.token_id_range) prompts.UseIdRange(config.token_id_range->begin, config.token_id_range->end);
  const CostModel cost{config.chips, config.price_per_chip_hour};

  auto finish = [&] {
    run.finished_at = UtcTimestamp();
    if (hooks.level_done) hooks.level_done(run);
  };
  for (int concurrency : config.concurrency) {
    if (stop.load()) {  // Ctrl-C between two levels
      run.interrupted = true;
      break;
    }
    LevelResult level;
    level.concurrency = concurrency;
    auto plan = replay.empty() ? PlanLevelShowingProgress(config, concurrency, prompts, stop, hooks)
                               : Result<LevelPlan>(PlanReplayLevel(replay, WarmupsForLevel(config, concurrency)));
    if (!plan.ok() && stop.load()) {  // Ctrl-C while the prompts were built
      level.interrupted = true;
      run.levels.push_back(std::move(level));
      run.level_requests.emplace_back();
      run.interrupted = true;
      break;
    }
    if (!plan.ok()) {
      run.stopped_by_error = StrCat("building the prompts of concurrency ", concurrency, ": ", plan.status().message());
      finish();
      return Status(plan.status().code(), run.stopped_by_error);
    }
    std::vector<RequestRecord> records = RunLevel(config, http, setup, stop, hooks, *plan, cost, level);
    run.interrupted = run.interrupted || level.interrupted;
    run.levels.push_back(std::move(level));
    run.level_requests.push_back(std::move(records));
    if (run.interrupted) break;
    if (hooks.level_done) hooks.level_done(run);
  }
  finish();
  return Status::Ok();
}

}  // namespace glint::bench
