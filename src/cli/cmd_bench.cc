// `glint bench`: a load generator for any OpenAI-compatible server, measured the way InferenceX and
// `vllm bench serve` measure (docs/bench.md). This file only maps flags to bench::BenchConfig and handles Ctrl-C.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <memory>

#include "bench/bench.h"
#include "cli/command.h"

namespace glint::cli {
namespace {

// Set by the SIGINT handler, which can reach nothing but a lock-free atomic. The sweep polls it, abandons the
// requests in flight and writes the partial results.
std::atomic<bool> g_bench_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void OnBenchInterrupt(int) { g_bench_stop_requested.store(true); }

struct BenchFlags {
  bench::BenchConfig config;
  std::string workload = "random";
  std::string prompt_format = "text";
  std::string token_id_range;
  std::string count_tokens = "content";
  std::string range_convention = "inferencex";
  std::string arrivals = "even";
  double range_ratio = 0;
  uint64_t seed = 0;
  double price_per_chip_hour = 0;
  std::string extra_body;
  bool no_progress = false;
  std::vector<std::string> compare;
};

Status RunBench(BenchFlags& flags, const CLI::Option* range_ratio, const CLI::Option* seed, const CLI::Option* price,
                const CLI::Option* base_url) {
  bench::BenchConfig& config = flags.config;
  if (!flags.compare.empty()) {
    if (base_url->count() > 0) return InvalidArgument("use either --base-url (run a sweep) or --compare, not both");
    return bench::RunCompareCommand(flags.compare, config.out_dir, stdout);
  }
  GLINT_ASSIGN_OR_RETURN(config.workload, bench::ParseWorkloadKind(flags.workload));
  GLINT_ASSIGN_OR_RETURN(config.prompt_format, bench::ParsePromptFormat(flags.prompt_format));
  if (!flags.token_id_range.empty()) {
    GLINT_ASSIGN_OR_RETURN(config.token_id_range, bench::ParseTokenIdRange(flags.token_id_range));
  }
  GLINT_ASSIGN_OR_RETURN(config.token_counting, bench::ParseTokenCounting(flags.count_tokens));
  GLINT_ASSIGN_OR_RETURN(config.range_convention, bench::ParseRangeConvention(flags.range_convention));
  if (range_ratio->count() > 0) config.range_ratio = flags.range_ratio;
  if (seed->count() > 0) config.seed = flags.seed;
  if (price->count() > 0) config.price_per_chip_hour = flags.price_per_chip_hour;
  if (!flags.extra_body.empty()) {
    config.extra_body = nlohmann::json::parse(flags.extra_body, nullptr, /*allow_exceptions=*/false);
    if (config.extra_body.is_discarded()) {
      return InvalidArgument("--extra-body is not valid JSON: ", flags.extra_body);
    }
  }
  config.progress = !flags.no_progress;
  config.poisson_arrivals = flags.arrivals == "poisson";
  GLINT_RETURN_IF_ERROR(bench::ValidateConfig(config));

  // SA_RESETHAND: the first Ctrl-C stops the sweep cleanly; a second one kills the process as usual.
  struct sigaction action {};
  action.sa_handler = OnBenchInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  struct sigaction previous {};
  sigaction(SIGINT, &action, &previous);
  bench::TerminalProgress progress(stderr);
  Status status = bench::RunBenchCommand(config, g_bench_stop_requested, stdout, config.progress ? &progress : nullptr);
  sigaction(SIGINT, &previous, nullptr);
  return status;
}

CommandSetup SetupBench = [](CLI::App& command) -> std::function<Status()> {
  auto flags = std::make_shared<BenchFlags>();
  bench::BenchConfig& c = flags->config;
  auto* base_url =
      command.add_option("--base-url", c.base_url, "server root, e.g. http://127.0.0.1:8000 (without /v1)");
  command.add_option("--model", c.model, "model name to request (default: the first of GET /v1/models)");
  command.add_option("--api-key", c.api_key, "sent as 'Authorization: Bearer KEY'")->envname("OPENAI_API_KEY");
  command.add_option("--label", c.label, "name of this run in tables and plots (default: MODEL @ URL)");
  command.add_option("--workload", flags->workload, "random or multiturn")->capture_default_str();
  command
      .add_option("--prompt-format", flags->prompt_format,
                  "text (exact length via the server's /tokenize) or token-ids (prompt as a list of ids)")
      ->capture_default_str();
  command.add_option("--token-id-range", flags->token_id_range,
                     "token-ids: draw prompt ids uniformly from BEGIN:END (no /tokenize; for random-weight models "
                     "and servers without a real tokenizer)");
  command
      .add_option("--count-tokens", flags->count_tokens,
                  "content (one token per chunk with text) or logprobs (one per sampled token's logprob entry: "
                  "exact when tokens decode to no text)")
      ->capture_default_str();
  command.add_option("--input-len", c.input_len, "prompt tokens (multiturn: first context)")->capture_default_str();
  command.add_option("--output-len", c.output_len, "output tokens per request (ignore_eos)")->capture_default_str();
  auto* range_ratio = command.add_option("--range-ratio", flags->range_ratio,
                                         "length spread; inferencex: [r*L, L] (default 1 = fixed), "
                                         "vllm: [L(1-r), L(1+r)] (default 0 = fixed)");
  command.add_option("--range-convention", flags->range_convention, "inferencex or vllm: meaning of --range-ratio")
      ->capture_default_str();
  // A mixed workload (docs/bench.md "Mixed lengths and arrivals"): long prompts among the range's.
  command
      .add_option("--long-input-len", c.long_input_len,
                  "random: --long-fraction of the prompts have this many tokens instead (0: none; a mixed workload)")
      ->capture_default_str();
  command.add_option("--long-fraction", c.long_fraction, "random: share of the prompts that are long")
      ->capture_default_str();
  command.add_option("--concurrency", c.concurrency, "levels of the sweep, e.g. 1,2,4,8")
      ->delimiter(',')
      ->capture_default_str();
  command.add_option("--prompts-per-level", c.prompts_per_level, "sessions per level (default: 10 x concurrency)");
  command.add_option("--warmup-requests", c.warmup_requests, "warm-up requests per level (default: 2 x concurrency)");
  command.add_option("--chips", c.chips, "accelerators behind the server (1 = per machine)")->capture_default_str();
  auto* price = command.add_option("--price-per-chip-hour", flags->price_per_chip_hour,
                                   "price of one chip for one hour, for cost per million tokens");
  command.add_option("--request-timeout", c.request_timeout_s, "seconds before a request counts as timed out")
      ->capture_default_str();
  auto* seed = command.add_option("--seed", flags->seed, "prompt seed (default: fresh each run, recorded)");
  command.add_option("--extra-body", flags->extra_body,
                     "JSON object merged into every generation request, e.g. '{\"temperature\":0}'");
  command.add_option("--turns", c.turns, "multiturn: turns per session")->capture_default_str();
  command.add_option("--turn-input-len", c.turn_input_len, "multiturn: tokens of each later user message")
      ->capture_default_str();
  command
      .add_option("--subagent-every", c.subagent_every, "multiturn: a sub-agent burst after every N-th turn (0: none)")
      ->capture_default_str();
  command.add_option("--subagents", c.subagents, "multiturn: sub-agent sessions per burst")->capture_default_str();
  command.add_option("--subagent-turns", c.subagent_turns, "multiturn: turns per sub-agent session")
      ->capture_default_str();
  command.add_option("--subagent-input-len", c.subagent_input_len, "multiturn: tokens of a sub-agent's first context")
      ->capture_default_str();
  command
      .add_option("--request-rate", c.request_rate,
                  "requests (multiturn: sessions) started per second, evenly spaced, at most --concurrency in "
                  "flight (0: each client sends its next request when its previous one ends)")
      ->capture_default_str();
  command
      .add_option("--arrivals", flags->arrivals,
                  "with --request-rate: even (request i at i / R) or poisson (exponential gaps of mean 1 / R, from "
                  "the seed; random workload)")
      ->check(CLI::IsMember({"even", "poisson"}))
      ->capture_default_str();
  auto* requests = command.add_option(
      "--requests", c.requests_file,
      "replay this JSONL file of requests (the batch input format of glint batch: custom_id, method, url, body) "
      "instead of generated prompts; each level sends every request once");
  // The flags that shape generated prompts mean nothing to a replayed file: refuse them rather than ignore them.
  for (const char* generated :
       {"--workload", "--prompt-format", "--token-id-range", "--input-len", "--output-len", "--range-ratio",
        "--range-convention", "--prompts-per-level", "--seed", "--turns", "--turn-input-len", "--subagent-every",
        "--subagents", "--subagent-turns", "--subagent-input-len"}) {
    requests->excludes(command.get_option(generated));
  }
  command.add_option("--out", c.out_dir, "output directory for results and plots")->capture_default_str();
  command.add_flag("--no-progress", flags->no_progress, "no live progress bar");
  command
      .add_option("--compare", flags->compare,
                  "overlay the Pareto curves of these results.json files on OUT/compare.png (no sweep)")
      ->expected(1, -1);
  return [flags, range_ratio, seed, price, base_url] { return RunBench(*flags, range_ratio, seed, price, base_url); };
};

GLINT_REGISTER_COMMAND("bench", "load-test an OpenAI-compatible server: concurrency sweep, metrics, Pareto plot", 70,
                       SetupBench);

}  // namespace
}  // namespace glint::cli
