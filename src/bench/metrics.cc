#include "bench/metrics.h"

#include <algorithm>
#include <cmath>

namespace glint::bench {

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kHttpError:
      return "http_error";
    case Outcome::kTimeout:
      return "timeout";
    case Outcome::kDisconnected:
      return "disconnected";
    case Outcome::kConnectionFailed:
      return "connection_failed";
    case Outcome::kBadResponse:
      return "bad_response";
    case Outcome::kNoContent:
      return "no_content";
    case Outcome::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

int64_t OutputTokens(const RequestRecord& record) {
  return record.usage_completion_tokens.value_or(static_cast<int64_t>(record.content_times_s.size()));
}

RequestTiming ComputeRequestTiming(const RequestRecord& record) {
  RequestTiming timing;
  timing.e2e_s = record.end_s - record.start_s;
  if (record.content_times_s.empty()) return timing;
  timing.ttft_s = record.content_times_s.front() - record.start_s;
  for (size_t i = 1; i < record.content_times_s.size(); ++i) {
    timing.itl_s.push_back(record.content_times_s[i] - record.content_times_s[i - 1]);
  }
  const int64_t output_tokens = OutputTokens(record);
  if (output_tokens >= 2) timing.tpot_s = (timing.e2e_s - timing.ttft_s) / static_cast<double>(output_tokens - 1);
  return timing;
}

double CostPerMillionTokens(std::optional<double> price_per_chip_hour, double tokens_per_s_per_chip) {
  if (!price_per_chip_hour || !(tokens_per_s_per_chip > 0)) return kNaN;
  return *price_per_chip_hour / (tokens_per_s_per_chip * 3600.0 / 1e6);
}

namespace {

std::string ErrorKind(const RequestRecord& record) {
  if (record.outcome == Outcome::kHttpError) return StrCat("http_", record.http_status);
  return std::string(OutcomeName(record.outcome));
}

}  // namespace

void ComputeLevelMetrics(const std::vector<RequestRecord>& records, const CostModel& cost, LevelResult& level) {
  constexpr size_t kMaxErrorExamples = 5;
  std::vector<double> ttft_ms, tpot_ms, itl_ms, e2e_ms, e2e_per_token_ms;
  double first_start = HUGE_VAL, last_end = -HUGE_VAL;
  level.requests_sent = static_cast<int64_t>(records.size());
  for (const RequestRecord& record : records) {
    first_start = std::min(first_start, record.start_s);
    last_end = std::max(last_end, record.end_s);
    level.resent += record.stale_connection_retries;
    if (record.outcome == Outcome::kCancelled) {
      ++level.cancelled;
      continue;
    }
    if (record.outcome != Outcome::kOk) {
      ++level.failed;
      ++level.errors[ErrorKind(record)];
      if (level.error_examples.size() < kMaxErrorExamples) {
        level.error_examples.push_back(StrCat(ErrorKind(record), ": ", record.error));
      }
      continue;
    }
    ++level.completed;
    const int64_t output_tokens = OutputTokens(record);
    const int64_t chunks = static_cast<int64_t>(record.content_times_s.size());
    level.output_tokens += output_tokens;
    level.input_tokens += record.usage_prompt_tokens.value_or(std::max<int64_t>(record.expected_prompt_tokens, 0));

    UsageCheck& usage = level.usage;
    usage.content_chunks += chunks;
    if (!record.usage_completion_tokens || !record.usage_prompt_tokens) ++usage.requests_without_usage;
    if (record.usage_completion_tokens) {
      usage.usage_completion_tokens += *record.usage_completion_tokens;
      if (*record.usage_completion_tokens != chunks) ++usage.completion_vs_chunks_mismatches;
      if (*record.usage_completion_tokens != record.max_tokens) ++usage.output_length_mismatches;
    }
    if (record.usage_prompt_tokens && record.expected_prompt_tokens >= 0 &&
        *record.usage_prompt_tokens != record.expected_prompt_tokens) {
      ++usage.prompt_mismatches;
    }

    const RequestTiming timing = ComputeRequestTiming(record);
    ttft_ms.push_back(timing.ttft_s * 1e3);
    e2e_ms.push_back(timing.e2e_s * 1e3);
    tpot_ms.push_back(timing.tpot_s * 1e3);  // NaN (ignored by Summarize) for one-token replies
    for (double gap : timing.itl_s) itl_ms.push_back(gap * 1e3);
    if (output_tokens > 0) e2e_per_token_ms.push_back(timing.e2e_s * 1e3 / static_cast<double>(output_tokens));
  }

  level.ttft_ms = Summarize(std::move(ttft_ms));
  level.tpot_ms = Summarize(std::move(tpot_ms));
  level.itl_ms = Summarize(std::move(itl_ms));
  level.e2e_ms = Summarize(std::move(e2e_ms));
  level.e2e_per_output_token_ms = Summarize(std::move(e2e_per_token_ms));
  if (level.tpot_ms.count > 0) {
    level.interactivity_median = 1000.0 / level.tpot_ms.median;
    level.interactivity_mean = 1000.0 / level.tpot_ms.mean;
  }
  if (level.e2e_per_output_token_ms.count > 0) {
    level.e2e_interactivity_p90 = 1000.0 / level.e2e_per_output_token_ms.p90;  // (ms/token)⁻¹ → tokens/s
  }

  if (!records.empty() && last_end > first_start) {
    level.duration_s = last_end - first_start;
    const double chips = static_cast<double>(cost.chips);
    level.request_throughput = static_cast<double>(level.completed) / level.duration_s;
    level.output_throughput = static_cast<double>(level.output_tokens) / level.duration_s;
    level.total_throughput = static_cast<double>(level.input_tokens + level.output_tokens) / level.duration_s;
    level.output_throughput_per_chip = level.output_throughput / chips;
    level.total_throughput_per_chip = level.total_throughput / chips;
    level.cost_per_million_output_tokens =
        CostPerMillionTokens(cost.price_per_chip_hour, level.output_throughput_per_chip);
    level.cost_per_million_total_tokens =
        CostPerMillionTokens(cost.price_per_chip_hour, level.total_throughput_per_chip);
  }
}

}  // namespace glint::bench
