// glint bench-engine: figures of the engine (not a test; nothing here fails on time).
//   1. Throughput at fixed concurrency (closed loop, as InferenceX and `vllm bench serve` run it): random-token
//      prompts of --input-len, --output-len generated tokens with ignore_eos, `concurrency` requests in flight.
//   2. A multi-turn workload: conversations whose every turn extends the previous context (prompt + answer + a new
//      user message), with prefix caching off, then on under each checkpoint policy, then (--prefix-cache-disk)
//      with the disk tier: hit rate, prompt tokens computed, the share served from disk, TTFT, wall time saved.
// The machine may be shared: each point runs --repeats times and the median is printed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/table.h"
#include "base/timer.h"
#include "bench/random_tokens.h"
#include "bench/stats.h"
#include "cli/collective_report.h"
#include "cli/command.h"
#include "cli/distributed.h"
#include "cli/engine_flags.h"
#include "cli/host_info.h"
#include "cli/model_flags.h"
#include "engine/engine.h"
#include "model/model.h"

namespace glint::cli {
namespace {

using bench::NearestRankPercentile;

struct EngineBenchFlags {
  ModelFlag model;
  ForwardPathFlags path;
  EngineFlags engine;
  std::vector<int64_t> concurrency = {1, 4, 16, 64};
  int64_t input_len = 64;
  int64_t output_len = 16;
  int64_t requests_factor = 1;  // requests per point = factor × concurrency
  int64_t repeats = 3;
  uint64_t seed = 1;
  int64_t conversations = 4;
  int64_t turns = 4;
  int64_t system_tokens = 256;
  int64_t user_tokens = 32;
  int64_t turn_output = 32;
  std::vector<std::string> multi_turn_policies = {"uniform", "tail"};
  bool skip_throughput = false;
  bool skip_multi_turn = false;
};

using bench::Median;

Request Make(std::vector<int32_t> prompt, int64_t output_len, std::shared_ptr<RequestSink> sink) {
  Request request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 0.0f;
  request.stop.max_tokens = output_len;
  request.stop.ignore_eos = true;
  request.sink = std::move(sink);
  return request;
}

struct PointStats {
  double wall = 0;
  int64_t prompt_tokens = 0, generated = 0;
  std::vector<double> ttft, tpot, e2e;  // seconds, one per request
  EngineMetrics metrics;
  // [ranks] the most cache bytes each rank held for live sequences (slots and blocks), sampled as requests finished:
  // under --dp-attention each rank's own sequences only (docs/distributed.md "Attention data-parallel").
  std::vector<int64_t> peak_cache_bytes;
};

void NotePeakCache(const EngineMetrics& metrics, std::vector<int64_t>& peak) {
  peak.resize(metrics.cache_by_rank.size(), 0);
  for (size_t r = 0; r < peak.size(); ++r) peak[r] = std::max(peak[r], LiveCacheBytes(metrics.cache_by_rank[r]));
}

std::string DescribeCachePerRank(const std::vector<int64_t>& peak) {
  std::string line = "cache per rank (most held while requests ran, last run):";
  for (size_t r = 0; r < peak.size(); ++r)
    line += StrCat(" rank ", r, " ", FormatBinaryBytes(static_cast<double>(peak[r])));
  return line;
}

// Closed loop: keeps `concurrency` requests in flight until every prompt was served.
Result<PointStats> RunThroughput(const Model& model, const EngineOptions& options,
                                 const std::vector<std::vector<int32_t>>& prompts, int64_t output_len,
                                 int64_t concurrency) {
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Start(model, options));
  auto queue = std::make_shared<OutputQueue>();
  PointStats stats;
  Stopwatch wall;
  size_t next = 0;
  int64_t in_flight = 0;
  const auto submit = [&]() -> Status {
    GLINT_ASSIGN_OR_RETURN(RequestId id, engine->Submit(Make(prompts[next], output_len, queue)));
    (void)id;
    stats.prompt_tokens += static_cast<int64_t>(prompts[next].size());
    ++next;
    ++in_flight;
    return Status::Ok();
  };
  while (in_flight < concurrency && next < prompts.size()) GLINT_RETURN_IF_ERROR(submit());
  while (in_flight > 0) {
    RequestOutput out = queue->Pop();
    if (out.finish_reason == FinishReason::kError) return InternalError("a request failed: ", out.error);
    if (!out.request_finished) continue;
    const SequenceTimings& t = *out.timings;
    stats.generated += t.generated_tokens;
    stats.ttft.push_back(t.first_token - t.arrival);
    stats.e2e.push_back(t.finished - t.arrival);
    if (t.generated_tokens > 1) stats.tpot.push_back((t.finished - t.first_token) / (t.generated_tokens - 1));
    NotePeakCache(engine->Metrics(), stats.peak_cache_bytes);  // the others are still in flight
    --in_flight;
    if (next < prompts.size()) GLINT_RETURN_IF_ERROR(submit());
  }
  stats.wall = wall.Seconds();
  stats.metrics = engine->Metrics();
  return stats;
}

// Conversations of `turns` turns run side by side; turn k's prompt is turn k−1's prompt + answer + a new message.
Result<PointStats> RunMultiTurn(const Model& model, const EngineOptions& options, const EngineBenchFlags& flags,
                                uint64_t seed) {
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Start(model, options));
  const int64_t vocab = model.config().vocab_size;
  std::mt19937_64 rng(seed);
  struct Conversation {
    std::vector<int32_t> context;
    std::vector<int32_t> answer;
    int64_t turn = 0;
  };
  std::vector<Conversation> conversations(flags.conversations);
  std::map<RequestId, size_t> owner;
  auto queue = std::make_shared<OutputQueue>();
  PointStats stats;
  Stopwatch wall;
  const auto submit = [&](size_t c) -> Status {
    Conversation& conversation = conversations[c];
    const std::vector<int32_t> message = bench::UniformTokenIds(rng, vocab, flags.user_tokens);
    conversation.context.insert(conversation.context.end(), conversation.answer.begin(), conversation.answer.end());
    conversation.context.insert(conversation.context.end(), message.begin(), message.end());
    conversation.answer.clear();
    GLINT_ASSIGN_OR_RETURN(RequestId id, engine->Submit(Make(conversation.context, flags.turn_output, queue)));
    owner[id] = c;
    stats.prompt_tokens += static_cast<int64_t>(conversation.context.size());
    return Status::Ok();
  };
  for (size_t c = 0; c < conversations.size(); ++c) {
    conversations[c].context = bench::UniformTokenIds(rng, vocab, flags.system_tokens);
    GLINT_RETURN_IF_ERROR(submit(c));
  }
  int64_t in_flight = flags.conversations;
  while (in_flight > 0) {
    RequestOutput out = queue->Pop();
    if (out.finish_reason == FinishReason::kError) return InternalError("a request failed: ", out.error);
    Conversation& conversation = conversations[owner.at(out.request)];
    conversation.answer.insert(conversation.answer.end(), out.tokens.begin(), out.tokens.end());
    if (!out.request_finished) continue;
    const SequenceTimings& t = *out.timings;
    stats.generated += t.generated_tokens;
    stats.ttft.push_back(t.first_token - t.arrival);
    stats.e2e.push_back(t.finished - t.arrival);
    if (++conversation.turn < flags.turns) {
      GLINT_RETURN_IF_ERROR(submit(owner.at(out.request)));
    } else {
      --in_flight;
    }
  }
  stats.wall = wall.Seconds();
  stats.metrics = engine->Metrics();
  return stats;
}

// One row of the multi-turn table: a cache configuration.
struct MultiTurnMode {
  std::string name;
  bool prefix = true;
  CheckpointPolicy policy = CheckpointPolicy::kTail;
  bool disk = false;
};

// The multi-turn workload under each cache configuration: prefix caching off, on with each --multi-turn-policies
// policy, and, with --prefix-cache-disk, each policy again with the disk tier (its files deleted before each run).
// Prints the hit rate, the prompt tokens recomputed, the disk's share, and TTFT.
Status MultiTurnTable(const Model& model, const EngineOptions& options, const EngineBenchFlags& flags) {
  std::vector<MultiTurnMode> modes = {{"off", false}};
  for (const std::string& name : flags.multi_turn_policies) {
    GLINT_ASSIGN_OR_RETURN(CheckpointPolicy policy, ParseCheckpointPolicy(name));
    modes.push_back({name, true, policy, false});
  }
  if (!options.prefix_disk.directory.empty()) {
    for (size_t m = 1, n = modes.size(); m < n; ++m)
      modes.push_back({modes[m].name + "+disk", true, modes[m].policy, true});
  }
  std::printf(
      "\nmulti-turn: %lld conversations × %lld turns; system %lld tokens, each turn +%lld user tokens, "
      "%lld generated (final context %lld tokens); median of %lld runs\n",
      static_cast<long long>(flags.conversations), static_cast<long long>(flags.turns),
      static_cast<long long>(flags.system_tokens), static_cast<long long>(flags.user_tokens),
      static_cast<long long>(flags.turn_output),
      static_cast<long long>(flags.system_tokens) +
          static_cast<long long>(flags.turns) * (flags.user_tokens + flags.turn_output),
      static_cast<long long>(flags.repeats));
  std::printf("%14s %14s %15s %9s %12s %10s %10s %10s %9s %9s %9s %5s\n", "prefix cache", "prompt tokens",
              "prompt computed", "hit rate", "from disk", "wall", "TTFT p50", "TTFT mean", "ckpts", "demoted",
              "disk MiB", "load");
  double wall_off = 0, computed_off = 0;
  for (const MultiTurnMode& mode : modes) {
    EngineOptions run_options = options;
    run_options.prefix_caching = mode.prefix;
    run_options.checkpoint_policy = mode.policy;
    if (!mode.disk) run_options.prefix_disk = {};
    run_options.prefix_disk.start_empty = true;  // every run starts from an empty disk tier
    std::vector<double> walls, computed, hit_rate, disk_share, ttft, ttft_mean, checkpoints, demoted, disk_mib, load;
    double prompt_tokens = 0;
    for (int64_t r = 0; r < flags.repeats; ++r) {
      GLINT_ASSIGN_OR_RETURN(PointStats s, RunMultiTurn(model, run_options, flags, flags.seed + 7 * r));
      const CacheStats& cache = s.metrics.cache;
      walls.push_back(s.wall);
      computed.push_back(static_cast<double>(s.metrics.prompt_tokens_computed));
      hit_rate.push_back(static_cast<double>(cache.prefix_hit_tokens) / s.prompt_tokens);
      disk_share.push_back(static_cast<double>(cache.disk_hit_tokens) / s.prompt_tokens);
      ttft.push_back(Median(s.ttft));
      double sum = 0;
      for (double t : s.ttft) sum += t;
      ttft_mean.push_back(s.ttft.empty() ? 0 : sum / s.ttft.size());
      checkpoints.push_back(static_cast<double>(cache.checkpoints_taken));
      demoted.push_back(static_cast<double>(cache.checkpoints_demoted));
      disk_mib.push_back(static_cast<double>(cache.disk.bytes) / (1 << 20));
      load.push_back(LoadAverage());
      prompt_tokens = static_cast<double>(s.prompt_tokens);
    }
    std::printf("%14s %14.0f %15.0f %8.1f%% %11.1f%% %9.2fs %9.3fs %9.3fs %9.0f %9.0f %9.1f %5.2f\n", mode.name.c_str(),
                prompt_tokens, Median(computed), 100 * Median(hit_rate), 100 * Median(disk_share), Median(walls),
                Median(ttft), Median(ttft_mean), Median(checkpoints), Median(demoted), Median(disk_mib), Median(load));
    if (!mode.prefix) {
      wall_off = Median(walls);
      computed_off = Median(computed);
    } else {
      std::printf("%14s saved %.0f prompt tokens (%.1f%%), %.2f s of %.2f s wall (%.1f%%)\n", "",
                  computed_off - Median(computed),
                  100 * (computed_off - Median(computed)) / std::max(computed_off, 1.0), wall_off - Median(walls),
                  wall_off, 100 * (wall_off - Median(walls)) / std::max(wall_off, 1e-9));
    }
    std::fflush(stdout);
  }
  return Status::Ok();
}

// One row of the throughput table: `flags.repeats` closed-loop runs at `concurrency`, medians printed.
Status BenchThroughputPoint(const Model& model, const EngineOptions& options, const EngineBenchFlags& flags,
                            int64_t concurrency) {
  if (concurrency < 1) return InvalidArgument("--concurrency values must be at least 1");
  const int64_t requests = flags.requests_factor * concurrency;
  std::vector<double> out_rate, total_rate, ttft50, ttft99, tpot50, e2e50, preemptions, overhead, handoff, load;
  std::vector<double> acceptance;  // speculative decoding: accepted drafted tokens / drafted tokens
  std::vector<double> mtp_share;   // … and the share of step time in the MTP layer
  std::string speculation;         // the last run's acceptance by draft position
  const CollectiveStats collectives_start = World().stats_with_splits();  // under mpirun: rank 0's collectives
  int64_t engine_steps = 0;
  double engine_step_seconds = 0;
  std::vector<int64_t> peak_cache;
  for (int64_t r = 0; r < flags.repeats; ++r) {
    std::mt19937_64 rng(flags.seed + 1000 * r + concurrency);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < requests; ++i) {
      prompts.push_back(bench::UniformTokenIds(rng, model.config().vocab_size, flags.input_len));
    }
    GLINT_ASSIGN_OR_RETURN(PointStats s, RunThroughput(model, options, prompts, flags.output_len, concurrency));
    out_rate.push_back(s.generated / s.wall);
    total_rate.push_back((s.generated + s.prompt_tokens) / s.wall);
    ttft50.push_back(Median(s.ttft));
    ttft99.push_back(NearestRankPercentile(s.ttft, 0.99));
    tpot50.push_back(Median(s.tpot));
    e2e50.push_back(Median(s.e2e));
    preemptions.push_back(static_cast<double>(s.metrics.preemptions));
    // Time of the steps not spent in Model::Forward nor handing outputs to the client thread (which, on a busy
    // machine, mostly measures the OS giving the core to the woken thread): scheduling, memory, sampling, stops.
    overhead.push_back(100 * (s.metrics.step_seconds - s.metrics.model_seconds - s.metrics.deliver_seconds) /
                       s.metrics.step_seconds);
    handoff.push_back(100 * s.metrics.deliver_seconds / s.metrics.step_seconds);
    if (s.metrics.spec_draft_tokens > 0) {
      acceptance.push_back(100.0 * s.metrics.spec_accepted_tokens / s.metrics.spec_draft_tokens);
      speculation = DescribeSpeculation(s.metrics);
    }
    mtp_share.push_back(100 * s.metrics.mtp_seconds / s.metrics.step_seconds);
    engine_steps += s.metrics.steps;
    engine_step_seconds += s.metrics.step_seconds;
    peak_cache = s.peak_cache_bytes;
    load.push_back(LoadAverage());
  }
  const std::string accept = acceptance.empty() ? "-" : StrCat(static_cast<int>(std::lround(Median(acceptance))), "%");
  std::printf("%11lld %9lld %12.1f %12.1f %9.3fs %9.3fs %8.1fms %9.3fs %11.0f %8.2f%% %9.2f%% %8s %5.1f%% %5.2f\n",
              static_cast<long long>(concurrency), static_cast<long long>(requests), Median(out_rate),
              Median(total_rate), Median(ttft50), Median(ttft99), 1000 * Median(tpot50), Median(e2e50),
              Median(preemptions), Median(overhead), Median(handoff), accept.c_str(), Median(mtp_share), Median(load));
  if (!speculation.empty()) std::printf("%11s speculative decoding, last run: %s\n", "", speculation.c_str());
  if (Distributed()) std::printf("%11s %s\n", "", DescribeCachePerRank(peak_cache).c_str());
  if (Distributed()) {  // the engine's steps mix prefill and decode: no plan to compare with
    // Over the whole point: the engine's start-up (its pools broadcast while the followers allocate theirs) and
    // the waits for the slowest rank count too, so the share can pass 100% on a loaded machine.
    std::printf("%11s %s (start-up and waits for the slowest rank included)\n", "",
                DescribeStepCollectives(World().stats_with_splits().Since(collectives_start), engine_steps,
                                        engine_step_seconds / std::max<int64_t>(1, engine_steps), model.config(),
                                        model.shard_plan(), std::nullopt)
                    .c_str());
  }
  std::fflush(stdout);
  return Status::Ok();
}

Status BenchThroughput(const Model& model, const EngineOptions& options, const EngineBenchFlags& flags) {
  std::printf("\nthroughput: input %lld, output %lld tokens (ignore_eos), closed loop, median of %lld runs\n",
              static_cast<long long>(flags.input_len), static_cast<long long>(flags.output_len),
              static_cast<long long>(flags.repeats));
  std::printf("%11s %9s %12s %12s %10s %10s %10s %10s %11s %9s %10s %8s %6s %5s\n", "concurrency", "requests",
              "out tok/s", "total tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "E2E p50", "preemptions", "engine %",
              "hand-off %", "accept", "MTP %", "load");
  for (int64_t concurrency : flags.concurrency) {
    GLINT_RETURN_IF_ERROR(BenchThroughputPoint(model, options, flags, concurrency));
  }
  return Status::Ok();
}

Status Bench(const EngineBenchFlags& flags) {
  if (flags.repeats < 1 || flags.input_len < 1 || flags.output_len < 1 || flags.requests_factor < 1) {
    return InvalidArgument("--repeats, --input-len, --output-len and --requests-factor must be at least 1");
  }
  GLINT_ASSIGN_OR_RETURN(EngineOptions options, ToEngineOptions(flags.engine));
  if (!options.prefix_disk.directory.empty()) {
    GLINT_ASSIGN_OR_RETURN(const std::string dir, ResolveModelDir(flags.model));
    GLINT_RETURN_IF_ERROR(SetPrefixDiskModel(dir, options));
  }
  GLINT_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModel(flags.model, flags.path));
  const Model* model = loaded.model.get();
  const ModelConfig& c = model->config();
  {
    GLINT_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> probe, EngineCore::Create(*model, options));
    std::printf("%s", probe->capacity().ToString().c_str());
  }
  std::printf("model: %lld layers, hidden %lld, vocab %lld (%s)\n", static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size), loaded.description.c_str());
  if (!flags.skip_throughput) GLINT_RETURN_IF_ERROR(BenchThroughput(*model, options, flags));
  if (!flags.skip_multi_turn) GLINT_RETURN_IF_ERROR(MultiTurnTable(*model, options, flags));
  return Status::Ok();
}

GLINT_REGISTER_COMMAND(
    "bench-engine", "Engine figures: tokens/s at fixed concurrency, and prefix caching on a multi-turn workload", 60,
    [](CLI::App& command) {
      auto flags = std::make_shared<EngineBenchFlags>();
      AddModelFlag(command, flags->model);
      AddForwardPathFlags(command, flags->path);
      AddEngineFlags(command, flags->engine);
      command.add_option("--concurrency", flags->concurrency, "requests in flight, one point each")
          ->delimiter(',')
          ->capture_default_str();
      command.add_option("--input-len", flags->input_len, "prompt tokens (random ids)")->capture_default_str();
      command.add_option("--output-len", flags->output_len, "generated tokens per request")->capture_default_str();
      command.add_option("--requests-factor", flags->requests_factor, "requests per point = factor × concurrency")
          ->capture_default_str();
      command.add_option("--repeats", flags->repeats, "runs per point (the median is printed)")->capture_default_str();
      command.add_option("--seed", flags->seed, "seed of the random prompts")->capture_default_str();
      command.add_option("--conversations", flags->conversations, "multi-turn: conversations run side by side")
          ->capture_default_str();
      command.add_option("--turns", flags->turns, "multi-turn: turns per conversation")->capture_default_str();
      command.add_option("--system-tokens", flags->system_tokens, "multi-turn: first prompt length")
          ->capture_default_str();
      command.add_option("--user-tokens", flags->user_tokens, "multi-turn: tokens each new message adds")
          ->capture_default_str();
      command.add_option("--turn-output", flags->turn_output, "multi-turn: tokens generated per turn")
          ->capture_default_str();
      command
          .add_option("--multi-turn-policies", flags->multi_turn_policies,
                      "multi-turn: checkpoint policies to compare (rows; each again with the disk tier when "
                      "--prefix-cache-disk is given)")
          ->delimiter(',')
          ->capture_default_str();
      command.add_flag("--skip-throughput", flags->skip_throughput, "only the multi-turn workload");
      command.add_flag("--skip-multi-turn", flags->skip_multi_turn, "only the throughput points");
      return [flags] { return Bench(*flags); };
    });

}  // namespace
}  // namespace glint::cli
