// Everything a `glint bench` run is configured with; written in full into every result file.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "bench/lengths.h"

namespace glint::bench {

enum class WorkloadKind {
  kRandom,     // independent random-token prompts to /v1/completions
  kMultiTurn,  // agentic sessions on /v1/chat/completions: turns append to the context, bursts of sub-agents
};
Result<WorkloadKind> ParseWorkloadKind(std::string_view name);  // "random" or "multiturn"
std::string_view WorkloadKindName(WorkloadKind kind);

enum class PromptFormat { kText, kTokenIds };                   // see prompts.h
Result<PromptFormat> ParsePromptFormat(std::string_view name);  // "text" or "token-ids"
std::string_view PromptFormatName(PromptFormat format);

// How output tokens are counted and timed in a stream.
//   content: one token per chunk that carries text (or reasoning / tool calls). Needs a model whose tokens decode to
//     visible text: a random-weight model's tokens often decode to nothing (partial UTF-8, special tokens), and a
//     server that sends no chunk for them leaves those tokens untimed.
//   logprobs: the request asks for the sampled token's logprob (completions "logprobs": 1, chat "logprobs": true),
//     so every token arrives as one logprob entry, visible text or not; a chunk carrying k entries is k tokens at
//     its arrival time. Exact on any model; costs the server a logprob per token.
enum class TokenCounting { kContent, kLogprobs };
Result<TokenCounting> ParseTokenCounting(std::string_view name);  // "content" or "logprobs"
std::string_view TokenCountingName(TokenCounting counting);

// Prompt ids drawn uniformly from [begin, end) of the vocabulary, with no /tokenize call (--token-id-range).
struct TokenIdRange {
  int64_t begin = 0;
  int64_t end = 0;
};
Result<TokenIdRange> ParseTokenIdRange(std::string_view text);  // "BEGIN:END", 0 <= BEGIN < END <= 2^31

struct BenchConfig {
  // Server.
  std::string base_url;
  std::string model;    // empty: the first model of GET /v1/models
  std::string api_key;  // never written to result files
  std::string label;    // names the run in tables and comparison plots; empty: "<model> @ <base_url>"
  double request_timeout_s = 3600;

  // Workload.
  WorkloadKind workload = WorkloadKind::kRandom;
  PromptFormat prompt_format = PromptFormat::kText;
  std::optional<TokenIdRange> token_id_range;  // token-ids only; empty: ids of the built-in word pool
  TokenCounting token_counting = TokenCounting::kContent;
  int64_t input_len = 8192;  // serving.md §3's primary scenario: 8k in / 1k out
  int64_t output_len = 1024;
  std::optional<double> range_ratio;  // empty: fixed lengths in either convention
  RangeConvention range_convention = RangeConvention::kInferenceX;
  // Empty: a fresh seed from the clock, recorded in the results. A fixed seed repeats the same prompts, which a
  // server that keeps its prefix cache between runs will partly serve from cache.
  std::optional<uint64_t> seed;
  nlohmann::json extra_body = nlohmann::json::object();  // merged into every generation request
  // --requests: replay this file's requests (replay.h) instead of generated prompts; every level sends all of
  // them. Empty: the workload above.
  std::string requests_file;

  // Mixed lengths (random workload): --long-fraction of the requests have --long-input-len prompt tokens instead of
  // a length from the input range — long prompts arriving among short ones that decode (disaggregation's case).
  int64_t long_input_len = 0;  // 0: every prompt from the input range
  double long_fraction = 0.25;

  // Multi-turn workload (see workload.h).
  int turns = 4;                      // turns per main session
  int64_t turn_input_len = 256;       // tokens of each later user message
  int subagent_every = 2;             // a burst of sub-agents after every N-th turn (0: never)
  int subagents = 3;                  // sessions per burst, run in parallel
  int subagent_turns = 2;             // turns per sub-agent session
  int64_t subagent_input_len = 1024;  // tokens of a sub-agent's first (fresh) context

  // Sweep.
  std::vector<int> concurrency = {1, 2, 4, 8, 16, 32, 64};
  int64_t prompts_per_level = 0;  // sessions per level; 0: 10 × concurrency
  int64_t warmup_requests = -1;   // warm-up requests per level; -1: 2 × concurrency (0 with --requests)
  // Requests (multiturn: sessions) started per second, evenly spaced, with at most `concurrency` in flight (a start
  // waits for a free one); 0: each client sends its next request as soon as its previous one ends (closed loop).
  double request_rate = 0;
  // --arrivals poisson (random workload, with --request-rate): the starts at Poisson arrivals of that rate
  // (exponential gaps drawn from the seed) instead of evenly spaced.
  bool poisson_arrivals = false;

  // Cost.
  int chips = 1;  // accelerators behind the server (1 for a CPU machine: figures per machine)
  std::optional<double> price_per_chip_hour;

  // Output.
  std::string out_dir = "glint-bench-results";
  bool progress = true;
};

// Checks every field and the combinations (e.g. multiturn needs text prompts); the message names the flag.
Status ValidateConfig(const BenchConfig& config);

// Refuses a run whose longest request cannot fit the server's context (`max_model_len` of GET /v1/models):
// prompt + max_tokens past it is a 400 for every such request. The message names the flags to change.
Status CheckFitsContext(const BenchConfig& config, int64_t max_model_len);

double RangeRatio(const BenchConfig& config);  // the ratio in effect (the convention's "fixed" default)
int64_t SessionsForLevel(const BenchConfig& config, int concurrency);
int64_t WarmupsForLevel(const BenchConfig& config, int concurrency);

// The configuration as JSON (api_key replaced by whether one was set), with the derived length ranges.
nlohmann::json ConfigToJson(const BenchConfig& config);

}  // namespace glint::bench
