#include "bench/config.h"

#include <cmath>
#include <set>

namespace glint::bench {

Result<WorkloadKind> ParseWorkloadKind(std::string_view name) {
  if (name == "random") return WorkloadKind::kRandom;
  if (name == "multiturn") return WorkloadKind::kMultiTurn;
  return InvalidArgument("unknown workload '", name, "': expected 'random' or 'multiturn'");
}

std::string_view WorkloadKindName(WorkloadKind kind) { return kind == WorkloadKind::kRandom ? "random" : "multiturn"; }

Result<PromptFormat> ParsePromptFormat(std::string_view name) {
  if (name == "text") return PromptFormat::kText;
  if (name == "token-ids") return PromptFormat::kTokenIds;
  return InvalidArgument("unknown prompt format '", name, "': expected 'text' or 'token-ids'");
}

std::string_view PromptFormatName(PromptFormat format) { return format == PromptFormat::kText ? "text" : "token-ids"; }

Result<TokenCounting> ParseTokenCounting(std::string_view name) {
  if (name == "content") return TokenCounting::kContent;
  if (name == "logprobs") return TokenCounting::kLogprobs;
  return InvalidArgument("unknown token counting '", name, "': expected 'content' or 'logprobs'");
}

std::string_view TokenCountingName(TokenCounting counting) {
  return counting == TokenCounting::kContent ? "content" : "logprobs";
}

Result<TokenIdRange> ParseTokenIdRange(std::string_view text) {
  const auto fail = [&] {
    return InvalidArgument("--token-id-range '", text, "': expected BEGIN:END with 0 <= BEGIN < END <= 2147483648");
  };
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return fail();
  TokenIdRange range;
  const auto parse = [](std::string_view part, int64_t& value) {
    if (part.empty() || part.size() > 10) return false;
    value = 0;
    for (char c : part) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    return true;
  };
  if (!parse(text.substr(0, colon), range.begin) || !parse(text.substr(colon + 1), range.end)) return fail();
  if (range.begin >= range.end || range.end > (int64_t{1} << 31)) return fail();
  return range;
}

double RangeRatio(const BenchConfig& config) {
  return config.range_ratio.value_or(FixedLengthRatio(config.range_convention));
}

int64_t SessionsForLevel(const BenchConfig& config, int concurrency) {
  return config.prompts_per_level > 0 ? config.prompts_per_level : 10 * static_cast<int64_t>(concurrency);
}

int64_t WarmupsForLevel(const BenchConfig& config, int concurrency) {
  if (config.warmup_requests >= 0) return config.warmup_requests;
  // A replayed file's warm-up would send its own first requests, whose prefixes the measured run then finds cached.
  return config.requests_file.empty() ? 2 * static_cast<int64_t>(concurrency) : 0;
}

namespace {

// Request fields glint bench sets itself; --extra-body may not override them or the measurement breaks.
const std::set<std::string>& ReservedBodyKeys() {
  static const std::set<std::string> keys = {
      "model",      "prompt", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
      "ignore_eos", "n"};
  return keys;
}

}  // namespace

// --long-input-len, --long-fraction and --arrivals poisson: values, and the random workload they apply to.
Status ValidateMixAndArrivals(const BenchConfig& config) {
  if (config.long_input_len < 0) {
    return InvalidArgument("--long-input-len ", config.long_input_len, " must be positive (0: no long prompts)");
  }
  if (!(config.long_fraction > 0 && config.long_fraction <= 1)) {
    return InvalidArgument("--long-fraction ", config.long_fraction, " must be in (0, 1]");
  }
  if (config.poisson_arrivals && !(config.request_rate > 0)) {
    return InvalidArgument("--arrivals poisson needs --request-rate R > 0 (the mean arrivals per second)");
  }
  const bool generated_random = config.workload == WorkloadKind::kRandom && config.requests_file.empty();
  if (!generated_random && (config.long_input_len > 0 || config.poisson_arrivals)) {
    return InvalidArgument(config.long_input_len > 0 ? "--long-input-len" : "--arrivals poisson",
                           " applies to the generated random workload only (not multiturn, not --requests)");
  }
  return Status::Ok();
}

Status ValidateConfig(const BenchConfig& config) {
  if (config.base_url.empty()) return InvalidArgument("--base-url is required (e.g. http://127.0.0.1:8000)");
  if (!(config.request_timeout_s > 0)) {
    return InvalidArgument("--request-timeout ", config.request_timeout_s, " must be positive (seconds)");
  }
  if (config.input_len < 1) return InvalidArgument("--input-len ", config.input_len, " must be at least 1");
  if (config.output_len < 1) return InvalidArgument("--output-len ", config.output_len, " must be at least 1");
  GLINT_RETURN_IF_ERROR(ComputeLengthRange(config.input_len, RangeRatio(config), config.range_convention)
                            .status()
                            .WithContext("--range-ratio"));
  if (config.concurrency.empty()) return InvalidArgument("--concurrency needs at least one level");
  for (int level : config.concurrency) {
    if (level < 1 || level > 4096) {
      return InvalidArgument("--concurrency level ", level,
                             " must be in [1, 4096] (one client thread per session in flight)");
    }
  }
  if (config.prompts_per_level < 0) {
    return InvalidArgument("--prompts-per-level ", config.prompts_per_level, " must be positive (0: 10 × concurrency)");
  }
  if (!(config.request_rate >= 0 && std::isfinite(config.request_rate))) {
    return InvalidArgument("--request-rate ", config.request_rate, " must be a non-negative number (0: closed loop)");
  }
  if (!config.requests_file.empty() && (config.workload != WorkloadKind::kRandom ||
                                        config.prompt_format != PromptFormat::kText || config.prompts_per_level > 0)) {
    return InvalidArgument(
        "--requests replays the file's requests: it takes no --workload, --prompt-format or --prompts-per-level");
  }
  if (config.chips < 1) return InvalidArgument("--chips ", config.chips, " must be at least 1");
  if (config.price_per_chip_hour && !(*config.price_per_chip_hour >= 0 && std::isfinite(*config.price_per_chip_hour))) {
    return InvalidArgument("--price-per-chip-hour ", *config.price_per_chip_hour, " must be a non-negative number");
  }
  if (!config.extra_body.is_object()) {
    return InvalidArgument("--extra-body must be a JSON object, got ", config.extra_body.type_name());
  }
  for (const auto& [key, value] : config.extra_body.items()) {
    if (ReservedBodyKeys().contains(key)) {
      return InvalidArgument("--extra-body may not set \"", key, "\": glint bench sets it to measure the request");
    }
    if (config.token_counting == TokenCounting::kLogprobs && (key == "logprobs" || key == "top_logprobs")) {
      return InvalidArgument("--extra-body may not set \"", key,
                             "\" with --count-tokens logprobs: glint bench sets it");
    }
  }
  GLINT_RETURN_IF_ERROR(ValidateMixAndArrivals(config));
  if (config.token_id_range && config.prompt_format != PromptFormat::kTokenIds) {
    return InvalidArgument("--token-id-range needs --prompt-format token-ids (text prompts come from the word pool)");
  }
  if (config.workload == WorkloadKind::kMultiTurn) {
    if (config.prompt_format != PromptFormat::kText) {
      return InvalidArgument("--workload multiturn sends chat messages, which are text: use --prompt-format text");
    }
    if (config.turns < 1) return InvalidArgument("--turns ", config.turns, " must be at least 1");
    if (config.turn_input_len < 1) return InvalidArgument("--turn-input-len must be at least 1");
    if (config.subagent_every < 0) return InvalidArgument("--subagent-every must be ≥ 0 (0: no sub-agents)");
    if (config.subagents < 0) return InvalidArgument("--subagents must be ≥ 0");
    if (config.subagent_turns < 1) return InvalidArgument("--subagent-turns must be at least 1");
    if (config.subagent_input_len < 1) return InvalidArgument("--subagent-input-len must be at least 1");
  }
  if (config.out_dir.empty()) return InvalidArgument("--out must name a directory");
  return Status::Ok();
}

Status CheckFitsContext(const BenchConfig& config, int64_t max_model_len) {
  GLINT_ASSIGN_OR_RETURN(const LengthRange input,
                         ComputeLengthRange(config.input_len, RangeRatio(config), config.range_convention));
  GLINT_ASSIGN_OR_RETURN(const LengthRange output,
                         ComputeLengthRange(config.output_len, RangeRatio(config), config.range_convention));
  // random: prompt lengths include the special tokens, so prompt + max_tokens is exactly what the server counts.
  // multiturn: a first turn's message alone has that many tokens; the chat template only adds (special) tokens.
  int64_t longest_prompt = input.max;
  const char* prompt_flag = "--input-len";
  if (config.workload == WorkloadKind::kRandom && config.long_input_len > longest_prompt) {
    longest_prompt = config.long_input_len;
    prompt_flag = "--long-input-len";
  }
  if (config.workload == WorkloadKind::kMultiTurn && config.subagent_every > 0 && config.subagents > 0 &&
      config.turns > config.subagent_every && config.subagent_input_len > longest_prompt) {
    longest_prompt = config.subagent_input_len;  // a burst happens, and its fresh contexts are the longest
    prompt_flag = "--subagent-input-len";
  }
  const int64_t needed = longest_prompt + output.max;
  if (needed <= max_model_len) return Status::Ok();
  return InvalidArgument(
      config.workload == WorkloadKind::kRandom ? "requests need up to " : "first turns need at least ", longest_prompt,
      " + ", output.max, " = ", needed, " tokens (prompt + output) but the server's max_model_len is ", max_model_len,
      " (GET /v1/models): lower ", prompt_flag, " or --output-len, or raise the server's limit");
}

nlohmann::json ConfigToJson(const BenchConfig& config) {
  nlohmann::json json;
  json["base_url"] = config.base_url;
  json["model"] = config.model;
  json["api_key_set"] = !config.api_key.empty();
  json["label"] = config.label;
  json["request_timeout_s"] = config.request_timeout_s;
  json["workload"] =
      config.requests_file.empty() ? nlohmann::json(WorkloadKindName(config.workload)) : nlohmann::json("requests");
  json["requests_file"] = config.requests_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(config.requests_file);
  json["request_rate"] = config.request_rate > 0 ? nlohmann::json(config.request_rate) : nlohmann::json(nullptr);
  json["prompt_format"] = PromptFormatName(config.prompt_format);
  json["token_id_range"] = config.token_id_range
                               ? nlohmann::json{config.token_id_range->begin, config.token_id_range->end}
                               : nlohmann::json(nullptr);
  json["token_counting"] = TokenCountingName(config.token_counting);
  json["long_input_len"] = config.long_input_len;
  json["long_fraction"] = config.long_fraction;
  json["arrivals"] = config.poisson_arrivals ? "poisson" : "even";
  json["input_len"] = config.input_len;
  json["output_len"] = config.output_len;
  json["range_ratio"] = RangeRatio(config);
  json["range_convention"] = RangeConventionName(config.range_convention);
  if (auto input = ComputeLengthRange(config.input_len, RangeRatio(config), config.range_convention); input.ok()) {
    json["input_len_range"] = {input->min, input->max};
  }
  if (auto output = ComputeLengthRange(config.output_len, RangeRatio(config), config.range_convention); output.ok()) {
    json["output_len_range"] = {output->min, output->max};
  }
  json["ignore_eos"] = config.requests_file.empty() ? nlohmann::json(true) : nlohmann::json("as the file's bodies");
  json["seed"] = config.seed ? nlohmann::json(*config.seed) : nlohmann::json(nullptr);
  json["extra_body"] = config.extra_body;
  if (config.workload == WorkloadKind::kMultiTurn) {
    json["turns"] = config.turns;
    json["turn_input_len"] = config.turn_input_len;
    json["subagent_every"] = config.subagent_every;
    json["subagents"] = config.subagents;
    json["subagent_turns"] = config.subagent_turns;
    json["subagent_input_len"] = config.subagent_input_len;
  }
  json["concurrency"] = config.concurrency;
  const bool replay = !config.requests_file.empty();
  json["prompts_per_level"] = config.prompts_per_level > 0 ? nlohmann::json(config.prompts_per_level)
                              : replay                     ? nlohmann::json("every request of the file")
                                                           : nlohmann::json("10 x concurrency");
  json["warmup_requests"] = config.warmup_requests >= 0 ? nlohmann::json(config.warmup_requests)
                            : replay                    ? nlohmann::json(0)
                                                        : nlohmann::json("2 x concurrency");
  json["chips"] = config.chips;
  json["price_per_chip_hour"] =
      config.price_per_chip_hour ? nlohmann::json(*config.price_per_chip_hour) : nlohmann::json(nullptr);
  json["out_dir"] = config.out_dir;
  if (!config.requests_file.empty()) {
    // The lengths, prompts and seed are the file's: the generated-prompt fields stay out rather than mislead.
    for (const char* unused : {"prompt_format", "token_id_range", "input_len", "output_len", "range_ratio",
                               "range_convention", "input_len_range", "output_len_range", "seed"}) {
      json.erase(unused);
    }
  }
  return json;
}

}  // namespace glint::bench
