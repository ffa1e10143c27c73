// glint bench-turns: the prefix cache on agentic sessions whose histories outgrow the cache memory (issue #15
// items 4–5; docs/long-context.md "Multi-turn sessions past 64K"). Not a test: nothing here fails on time.
//
// Workload: `--sessions` sessions share a system prompt; each turn appends `--user-tokens` random tokens (a user
// message or a tool result) to the session's context and its previous answer, and generates `--turn-output`
// tokens (greedy, ignore_eos). Sessions take turns round-robin, one request at a time, on an EngineCore driven
// step by step on this thread: each TTFT is one request's own (no queueing behind other sessions), and every
// figure is exact per request (the cache counters are read before and after it). With the cache memory holding
// less than the sessions together, a session's blocks and checkpoints are evicted while the others run; each
// row (checkpoint policy, disk tier on or off) shows what the cache then saves.
//
// Bounded: each row stops starting turns after `--time-limit` seconds (and says so); a line per turn goes to
// stderr as it finishes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/timer.h"
#include "bench/random_tokens.h"
#include "bench/stats.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/host_info.h"
#include "cli/model_flags.h"
#include "engine/engine_core.h"
#include "model/model.h"

namespace glint::cli {
namespace {

struct TurnsFlags {
  ModelFlag model;
  ForwardPathFlags path;
  EngineFlags engine;
  int64_t sessions = 4;
  int64_t turns = 16;
  int64_t system_tokens = 1024;
  int64_t user_tokens = 4032;
  int64_t turn_output = 64;
  std::vector<std::string> rows;  // empty: uniform,tail, and uniform+disk,tail+disk with --prefix-cache-disk
  double time_limit = 120;        // seconds per row
  int64_t long_context = 65536;   // turns whose prompt is longer than this get their own TTFT median
  uint64_t seed = 1;
};

// One row of the table: a cache configuration.
struct Row {
  std::string name;
  bool prefix = true;
  CheckpointPolicy policy = CheckpointPolicy::kTail;
  bool disk = false;
};

Result<Row> ParseRow(const std::string& name, bool have_disk) {
  Row row{name};
  std::string policy = name;
  const std::string suffix = "+disk";
  if (policy.size() > suffix.size() && policy.ends_with(suffix)) {
    if (!have_disk) {
      return InvalidArgument("--rows ", name,
                             " needs the disk tier: give --prefix-cache-disk DIR and "
                             "--prefix-cache-disk-size SIZE");
    }
    row.disk = true;
    policy.resize(policy.size() - suffix.size());
  }
  if (policy == "off" && !row.disk) {
    row.prefix = false;
    return row;
  }
  Result<CheckpointPolicy> parsed = ParseCheckpointPolicy(policy);
  if (!parsed.ok()) return InvalidArgument("--rows ", name, ": expected off, uniform, tail, uniform+disk or tail+disk");
  row.policy = *parsed;
  return row;
}

// What one turn (one request) did, from its timings and the cache counters around it.
struct Turn {
  int64_t round = 0, session = 0;
  int64_t prompt = 0;    // prompt tokens
  int64_t seen = 0;      // of which an earlier request computed already (the session's history, the system prompt)
  int64_t hit = 0;       // restored from the prefix cache (memory or disk)
  int64_t disk_hit = 0;  // of which reachable only through blocks or checkpoints read back from the disk
  int64_t computed = 0;  // prompt positions run through the model
  double ttft = 0;       // seconds from Add to the first generated token
  double seconds = 0;    // the whole request
  int64_t recomputed() const { return computed - (prompt - seen); }
};

struct RowResult {
  Row row;
  std::vector<Turn> turns;
  bool stopped = false;  // by --time-limit
  double wall = 0;
  CacheStats cache;  // at the end
  double load = 0;
};

// Collects one request's outputs (OnOutput runs on this thread: the core is stepped here).
class CollectingSink : public RequestSink {
 public:
  void OnOutput(RequestOutput output) override { outputs.push_back(std::move(output)); }
  std::vector<RequestOutput> outputs;
};

// Runs one request to its end; returns its generated tokens and fills the turn's timings and counts.
Result<std::vector<int32_t>> RunRequest(EngineCore& core, RequestId id, const std::vector<int32_t>& prompt,
                                        int64_t output_tokens, Turn& turn) {
  auto sink = std::make_shared<CollectingSink>();
  Request request;
  request.prompt = prompt;
  request.sampling.temperature = 0.0f;
  request.stop.max_tokens = output_tokens;
  request.stop.ignore_eos = true;
  request.sink = sink;
  const int64_t disk_before = core.Metrics().cache.disk_hit_tokens;
  const int64_t computed_before = core.Metrics().prompt_tokens_computed;
  GLINT_RETURN_IF_ERROR(core.Add(id, std::move(request)));
  std::vector<int32_t> answer;
  while (core.HasWork()) GLINT_RETURN_IF_ERROR(core.Step());
  for (const RequestOutput& out : sink->outputs) {
    if (out.finish_reason == FinishReason::kError)
      return InternalError("turn ", turn.round, " of session ", turn.session, " failed: ", out.error);
    answer.insert(answer.end(), out.tokens.begin(), out.tokens.end());
    if (out.timings) {
      turn.ttft = out.timings->first_token - out.timings->arrival;
      turn.seconds = out.timings->finished - out.timings->arrival;
      turn.hit = out.timings->cached_prompt_tokens;
    }
  }
  const EngineMetrics after = core.Metrics();
  turn.disk_hit = after.cache.disk_hit_tokens - disk_before;
  turn.computed = after.prompt_tokens_computed - computed_before;
  return answer;
}

void PrintTurnProgress(const RowResult& result, const Turn& turn, const TurnsFlags& flags, double elapsed) {
  std::fprintf(stderr,
               "bench-turns %s: round %lld/%lld session %lld/%lld: prompt %lld, hit %lld (disk %lld), computed "
               "%lld, TTFT %.3f s, row %.1f s\n",
               result.row.name.c_str(), static_cast<long long>(turn.round) + 1, static_cast<long long>(flags.turns),
               static_cast<long long>(turn.session) + 1, static_cast<long long>(flags.sessions),
               static_cast<long long>(turn.prompt), static_cast<long long>(turn.hit),
               static_cast<long long>(turn.disk_hit), static_cast<long long>(turn.computed), turn.ttft, elapsed);
}

// The sessions of one row, on a fresh engine (and an emptied disk tier). Every row draws the same tokens: the
// messages come from `flags.seed`, and greedy answers depend only on the prompts.
Result<RowResult> RunRow(const Model& model, const EngineOptions& base, const Row& row, const TurnsFlags& flags) {
  EngineOptions options = base;
  options.prefix_caching = row.prefix;
  options.checkpoint_policy = row.policy;
  if (!row.disk) options.prefix_disk = {};
  options.prefix_disk.start_empty = true;
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::Create(model, options));
  const int64_t vocab = model.config().vocab_size;
  std::mt19937_64 rng(flags.seed);
  const std::vector<int32_t> system = bench::UniformTokenIds(rng, vocab, flags.system_tokens);
  std::vector<std::vector<int32_t>> contexts(flags.sessions, system);
  std::vector<int64_t> seen(flags.sessions, 0);  // tokens of the next prompt an earlier request computed
  RowResult result;
  result.row = row;
  Stopwatch wall;
  RequestId next_id = 1;
  for (int64_t round = 0; round < flags.turns && !result.stopped; ++round) {
    for (int64_t s = 0; s < flags.sessions; ++s) {
      if (wall.Seconds() > flags.time_limit) {
        result.stopped = true;
        break;
      }
      const std::vector<int32_t> message = bench::UniformTokenIds(rng, vocab, flags.user_tokens);
      std::vector<int32_t>& context = contexts[s];
      context.insert(context.end(), message.begin(), message.end());
      Turn turn{round, s, static_cast<int64_t>(context.size())};
      // The system prompt was computed by session 0's first turn; later turns by the session's previous one.
      turn.seen = round == 0 ? (s == 0 ? 0 : flags.system_tokens) : seen[s];
      GLINT_ASSIGN_OR_RETURN(std::vector<int32_t> answer,
                             RunRequest(*core, next_id++, context, flags.turn_output, turn));
      // Every generated token but the last was fed back through the model.
      seen[s] = static_cast<int64_t>(context.size() + answer.size()) - 1;
      context.insert(context.end(), answer.begin(), answer.end());
      result.turns.push_back(turn);
      PrintTurnProgress(result, turn, flags, wall.Seconds());
    }
  }
  result.wall = wall.Seconds();
  result.cache = core->Metrics().cache;
  result.load = LoadAverage();
  return result;
}

double MedianOf(std::vector<double> values) { return bench::Summarize(std::move(values)).median; }

// Seconds with 3 decimals, "-" for NaN (no turn in that class, e.g. none past --long-context).
std::string Seconds(double seconds) {
  if (std::isnan(seconds)) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.3fs", seconds);
  return text;
}

double MedianTtft(std::span<const Turn> turns, int64_t longer_than) {
  std::vector<double> ttft;
  for (const Turn& turn : turns) {
    if (turn.prompt > longer_than) ttft.push_back(turn.ttft);
  }
  return MedianOf(std::move(ttft));
}

struct RowTotals {
  int64_t prompt = 0, hit = 0, disk_hit = 0, computed = 0, recomputed = 0;
};

RowTotals Totals(std::span<const Turn> turns) {
  RowTotals t;
  for (const Turn& turn : turns) {
    t.prompt += turn.prompt;
    t.hit += turn.hit;
    t.disk_hit += turn.disk_hit;
    t.computed += turn.computed;
    t.recomputed += turn.recomputed();
  }
  return t;
}

void PrintSummaryTable(const std::vector<RowResult>& results, const TurnsFlags& flags) {
  std::printf("%14s %6s %13s %13s %8s %12s %12s %14s %9s %8s %9s %9s %11s %8s %5s\n", "prefix cache", "turns",
              "prompt tok", "hit tok", "hit", "from disk", "recomputed", "ckpt MiB", "ckpts", "demoted", "disk MiB",
              "TTFT p50", "TTFT p50 >", "wall", "load");
  std::printf("%14s %6s %13s %13s %8s %12s %12s %14s %9s %8s %9s %9s %11lld %8s %5s\n", "", "", "", "", "", "", "",
              "used/budget", "taken", "", "", "", static_cast<long long>(flags.long_context), "", "");
  for (const RowResult& r : results) {
    const RowTotals t = Totals(r.turns);
    const CacheStats& c = r.cache;
    const double mib = 1.0 / (1 << 20);
    char checkpoints[64];
    std::snprintf(checkpoints, sizeof checkpoints, "%.2f/%.2f", c.checkpoints_used * c.checkpoint_bytes * mib,
                  c.checkpoints_total * c.checkpoint_bytes * mib);
    std::printf("%14s %6lld %13lld %13lld %7.1f%% %12lld %12lld %14s %9lld %8lld %9.1f %9s %11s %7.1fs %5.2f%s\n",
                r.row.name.c_str(), static_cast<long long>(r.turns.size()), static_cast<long long>(t.prompt),
                static_cast<long long>(t.hit), 100.0 * t.hit / std::max<int64_t>(t.prompt, 1),
                static_cast<long long>(t.disk_hit), static_cast<long long>(t.recomputed), checkpoints,
                static_cast<long long>(c.checkpoints_taken), static_cast<long long>(c.checkpoints_demoted),
                c.disk.bytes * mib, Seconds(MedianTtft(r.turns, -1)).c_str(),
                Seconds(MedianTtft(r.turns, flags.long_context)).c_str(), r.wall, r.load,
                r.stopped ? "  (stopped by --time-limit)" : "");
  }
}

// Median TTFT of each round over the sessions, one column per row: how TTFT grows with the context.
void PrintRoundTable(const std::vector<RowResult>& results, const TurnsFlags& flags) {
  std::printf("\nTTFT by round (median over the sessions, seconds)\n%6s %10s", "round", "prompt");
  for (const RowResult& r : results) std::printf(" %13s", r.row.name.c_str());
  std::printf("\n");
  for (int64_t round = 0; round < flags.turns; ++round) {
    const auto in_round = [round](const Turn& turn) { return turn.round == round; };
    std::vector<double> prompts;
    for (const Turn& turn : results.front().turns) {
      if (in_round(turn)) prompts.push_back(static_cast<double>(turn.prompt));
    }
    if (prompts.empty()) break;
    std::printf("%6lld %10.0f", static_cast<long long>(round) + 1, MedianOf(prompts));
    for (const RowResult& r : results) {
      std::vector<double> ttft;
      for (const Turn& turn : r.turns) {
        if (in_round(turn)) ttft.push_back(turn.ttft);
      }
      if (ttft.empty()) {
        std::printf(" %13s", "-");
      } else {
        std::printf(" %13.3f", MedianOf(ttft));
      }
    }
    std::printf("\n");
  }
}

// `b` against `a` over the turns both ran (a row cut short by --time-limit ran fewer).
void PrintComparison(const RowResult& a, const RowResult& b, const TurnsFlags& flags) {
  const size_t n = std::min(a.turns.size(), b.turns.size());
  if (n == 0) return;
  const std::span<const Turn> a_turns(a.turns.data(), n), b_turns(b.turns.data(), n);
  const RowTotals ta = Totals(a_turns), tb = Totals(b_turns);
  const double ttft_a = MedianTtft(a_turns, -1), ttft_b = MedianTtft(b_turns, -1);
  const double long_a = MedianTtft(a_turns, flags.long_context);
  const double long_b = MedianTtft(b_turns, flags.long_context);
  double seconds_a = 0, seconds_b = 0;
  for (size_t i = 0; i < n; ++i) {
    seconds_a += a.turns[i].seconds;
    seconds_b += b.turns[i].seconds;
  }
  std::printf(
      "%s vs %s (%zu turns): TTFT p50 %s → %s (saved %s), past %lld tokens %s → %s (saved %s); "
      "recomputed %lld → %lld tokens; request time %.1f → %.1f s\n",
      b.row.name.c_str(), a.row.name.c_str(), n, Seconds(ttft_a).c_str(), Seconds(ttft_b).c_str(),
      Seconds(ttft_a - ttft_b).c_str(), static_cast<long long>(flags.long_context), Seconds(long_a).c_str(),
      Seconds(long_b).c_str(), Seconds(long_a - long_b).c_str(), static_cast<long long>(ta.recomputed),
      static_cast<long long>(tb.recomputed), seconds_a, seconds_b);
}

void PrintComparisons(const std::vector<RowResult>& results, const TurnsFlags& flags) {
  std::printf("\n");
  const auto find = [&](bool disk, CheckpointPolicy policy) -> const RowResult* {
    for (const RowResult& r : results) {
      if (r.row.prefix && r.row.disk == disk && r.row.policy == policy) return &r;
    }
    return nullptr;
  };
  for (CheckpointPolicy policy : {CheckpointPolicy::kUniform, CheckpointPolicy::kTail}) {
    const RowResult *ram = find(false, policy), *disk = find(true, policy);
    if (ram && disk) PrintComparison(*ram, *disk, flags);  // what the disk tier saves
  }
  for (bool disk : {false, true}) {
    const RowResult *uniform = find(disk, CheckpointPolicy::kUniform), *tail = find(disk, CheckpointPolicy::kTail);
    if (uniform && tail) PrintComparison(*uniform, *tail, flags);  // what the spacing policy saves
  }
  for (const RowResult& r : results) {
    if (r.stopped) {
      std::printf(
          "note: %s was stopped by --time-limit %.0f s after %zu of %lld turns; the comparisons above cover "
          "the turns both rows ran\n",
          r.row.name.c_str(), flags.time_limit, r.turns.size(), static_cast<long long>(flags.turns) * flags.sessions);
    }
  }
}

Status CheckFlags(const TurnsFlags& flags) {
  if (flags.sessions < 1 || flags.turns < 1 || flags.user_tokens < 1 || flags.turn_output < 1) {
    return InvalidArgument("--sessions, --turns, --user-tokens and --turn-output must be at least 1");
  }
  if (flags.system_tokens < 0) return InvalidArgument("--system-tokens must not be negative");
  if (!(flags.time_limit > 0)) return InvalidArgument("--time-limit must be a positive number of seconds");
  return Status::Ok();
}

// The workload against the cache the first row lays out: every session must fit (a request longer than
// max_model_len is refused), and the sessions together should not, or nothing is evicted.
Status DescribeWorkload(const Model& model, const EngineOptions& options, const TurnsFlags& flags) {
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> probe, EngineCore::Create(model, options));
  const CapacityReport& capacity = probe->capacity();
  std::printf("%s", capacity.ToString().c_str());
  const int64_t final_context = flags.system_tokens + flags.turns * (flags.user_tokens + flags.turn_output);
  if (final_context > capacity.max_model_len) {
    return InvalidArgument("a session reaches ", final_context, " tokens but the cache holds at most ",
                           capacity.max_model_len, " per sequence: raise --memory or lower --turns / --user-tokens");
  }
  const int64_t together = flags.system_tokens + flags.sessions * (final_context - flags.system_tokens);
  std::printf(
      "\nsessions: %lld × %lld turns, system prompt %lld tokens (shared), each turn +%lld tokens and %lld "
      "generated (greedy, ignore_eos), round-robin, one request at a time\n"
      "final context %lld tokens per session, %lld together: %.2f × the %lld tokens the cache blocks hold%s\n",
      static_cast<long long>(flags.sessions), static_cast<long long>(flags.turns),
      static_cast<long long>(flags.system_tokens), static_cast<long long>(flags.user_tokens),
      static_cast<long long>(flags.turn_output), static_cast<long long>(final_context),
      static_cast<long long>(together), static_cast<double>(together) / capacity.cache_tokens,
      static_cast<long long>(capacity.cache_tokens),
      together <= capacity.cache_tokens ? " (no overflow: nothing is evicted, the disk tier stays idle)" : "");
  std::printf("each row stops starting turns after %.0f s (--time-limit); progress on stderr\n\n", flags.time_limit);
  std::fflush(stdout);
  return Status::Ok();
}

Status BenchTurns(const TurnsFlags& flags) {
  GLINT_RETURN_IF_ERROR(CheckFlags(flags));
  GLINT_ASSIGN_OR_RETURN(EngineOptions options, ToEngineOptions(flags.engine));
  const bool have_disk = !options.prefix_disk.directory.empty();
  std::vector<std::string> names = flags.rows;
  if (names.empty()) names = {"uniform", "tail"};
  if (flags.rows.empty() && have_disk) names.insert(names.end(), {"uniform+disk", "tail+disk"});
  std::vector<Row> rows;
  for (const std::string& name : names) {
    GLINT_ASSIGN_OR_RETURN(Row row, ParseRow(name, have_disk));
    rows.push_back(row);
  }
  if (!options.prefix_disk.directory.empty()) {
    GLINT_ASSIGN_OR_RETURN(const std::string dir, ResolveModelDir(flags.model));
    GLINT_RETURN_IF_ERROR(SetPrefixDiskModel(dir, options));
  }
  GLINT_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(flags.model, flags.path));
  const Model& model = *loaded.model;
  std::printf("model: %lld layers, hidden %lld, vocab %lld (%s)\n",
              static_cast<long long>(model.config().num_hidden_layers),
              static_cast<long long>(model.config().hidden_size), static_cast<long long>(model.config().vocab_size),
              loaded.description.c_str());
  GLINT_RETURN_IF_ERROR(DescribeWorkload(model, options, flags));
  std::vector<RowResult> results;
  for (const Row& row : rows) {
    GLINT_ASSIGN_OR_RETURN(RowResult result, RunRow(model, options, row, flags));
    results.push_back(std::move(result));
  }
  PrintSummaryTable(results, flags);
  PrintRoundTable(results, flags);
  PrintComparisons(results, flags);
  return Status::Ok();
}

void AddWorkloadFlags(CLI::App& command, TurnsFlags& flags) {
  command.add_option("--sessions", flags.sessions, "sessions taking turns round-robin")->capture_default_str();
  command.add_option("--turns", flags.turns, "turns per session")->capture_default_str();
  command.add_option("--system-tokens", flags.system_tokens, "the system prompt the sessions share")
      ->capture_default_str();
  command.add_option("--user-tokens", flags.user_tokens, "tokens each turn appends (a message or a tool result)")
      ->capture_default_str();
  command.add_option("--turn-output", flags.turn_output, "tokens generated per turn")->capture_default_str();
  command
      .add_option("--rows", flags.rows,
                  "cache configurations, one row each: off, uniform, tail (checkpoint policies), uniform+disk, "
                  "tail+disk (with --prefix-cache-disk); default uniform,tail, and both +disk rows when "
                  "--prefix-cache-disk is given")
      ->delimiter(',');
  command.add_option("--time-limit", flags.time_limit, "seconds per row after which no new turn starts")
      ->capture_default_str();
  command.add_option("--long-context", flags.long_context, "turns with a longer prompt get their own TTFT median")
      ->capture_default_str();
  command.add_option("--seed", flags.seed, "seed of the random messages")->capture_default_str();
}

GLINT_REGISTER_COMMAND("bench-turns",
                       "Prefix caching on multi-turn sessions that outgrow the cache memory (hit rate, recompute, "
                       "checkpoints, TTFT; disk tier off and on)",
                       61, [](CLI::App& command) {
                         auto flags = std::make_shared<TurnsFlags>();
                         AddModelFlag(command, flags->model);
                         AddForwardPathFlags(command, flags->path);
                         AddEngineFlags(command, flags->engine);
                         AddWorkloadFlags(command, *flags);
                         return [flags] { return BenchTurns(*flags); };
                       });

}  // namespace
}  // namespace glint::cli
