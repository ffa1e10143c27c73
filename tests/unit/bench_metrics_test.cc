// The metric arithmetic of glint bench on hand-made request records whose every figure is worked out below.
#include <cmath>

#include "bench/metrics.h"
#include "test_util.h"

namespace glint::bench {
namespace {

constexpr double kTolerance = 1e-9;  // the figures are exact up to double rounding of the times below

RequestRecord Ok(double start, std::vector<double> chunks, double end, std::optional<int64_t> prompt,
                 std::optional<int64_t> completion, int64_t max_tokens, int64_t expected_prompt) {
  RequestRecord r;
  r.start_s = start;
  r.content_times_s = std::move(chunks);
  r.end_s = end;
  r.usage_prompt_tokens = prompt;
  r.usage_completion_tokens = completion;
  r.max_tokens = max_tokens;
  r.expected_prompt_tokens = expected_prompt;
  return r;
}

RequestRecord Failed(Outcome outcome, double start, double end, int status = 0) {
  RequestRecord r;
  r.outcome = outcome;
  r.start_s = start;
  r.end_s = end;
  r.http_status = status;
  r.error = "scripted";
  return r;
}

// r0..r6: four completed, two failed, one cancelled. In ms: TTFT {100, 200, 50, 100}; E2E {310, 450, 100, 150};
// TPOT {70, 250, (one token: none), 50/3}; ITL {50, 100, 50, 200, 20, 20}; E2E per output token
// {77.5, 225, 100, 37.5}.
std::vector<RequestRecord> Records() {
  return {
      Ok(0.00, {0.10, 0.15, 0.25, 0.30}, 0.31, 10, 4, 4, 10),
      Ok(0.05, {0.25, 0.45}, 0.50, 12, 2, 2, 12),
      Failed(Outcome::kHttpError, 0.10, 0.12, 500),
      [] {
        RequestRecord r = Failed(Outcome::kTimeout, 0.12, 0.52);
        r.content_times_s = {0.3};  // chunks of a failed request count nowhere
        return r;
      }(),
      Failed(Outcome::kCancelled, 0.20, 0.60),
      Ok(0.25, {0.30}, 0.35, std::nullopt, std::nullopt, 1, 8),  // no usage: 1 token from the chunk count
      Ok(0.30, {0.40, 0.42, 0.44}, 0.45, 9, 4, 5, 10),  // usage ≠ chunks, ≠ max_tokens, prompt ≠ expected
  };
}

TEST(BenchRequestTiming, DefinitionsOnOneRequest) {
  const RequestTiming timing = ComputeRequestTiming(Records()[0]);
  EXPECT_NEAR(timing.ttft_s, 0.10, kTolerance);
  EXPECT_NEAR(timing.e2e_s, 0.31, kTolerance);
  EXPECT_NEAR(timing.tpot_s, (0.31 - 0.10) / 3, kTolerance);  // (E2E − TTFT) / (4 tokens − 1)
  ASSERT_EQ(timing.itl_s.size(), 3u);
  EXPECT_NEAR(timing.itl_s[1], 0.10, kTolerance);
  EXPECT_EQ(OutputTokens(Records()[0]), 4);

  const RequestTiming one_token = ComputeRequestTiming(Records()[5]);
  EXPECT_TRUE(std::isnan(one_token.tpot_s));
  EXPECT_EQ(OutputTokens(Records()[5]), 1);

  // usage wins over the chunk count when both exist (speculative decoding sends several tokens per chunk)
  RequestRecord multi = Ok(0, {0.1, 0.2}, 0.3, 5, 4, 4, 5);
  EXPECT_EQ(OutputTokens(multi), 4);
  EXPECT_NEAR(ComputeRequestTiming(multi).tpot_s, 0.2 / 3, kTolerance);
}

TEST(BenchLevelMetrics, CountsThroughputLatencyAndCost) {
  LevelResult level;
  ComputeLevelMetrics(Records(), CostModel{2, 3.6}, level);

  EXPECT_EQ(level.requests_sent, 7);
  EXPECT_EQ(level.completed, 4);
  EXPECT_EQ(level.failed, 2);
  EXPECT_EQ(level.cancelled, 1);
  EXPECT_EQ(level.errors, (std::map<std::string, int64_t>{{"http_500", 1}, {"timeout", 1}}));
  ASSERT_EQ(level.error_examples.size(), 2u);
  EXPECT_EQ(level.error_examples[0], "http_500: scripted");

  EXPECT_EQ(level.output_tokens, 4 + 2 + 1 + 4);
  EXPECT_EQ(level.input_tokens, 10 + 12 + 8 + 9);   // usage, or the built length when usage is missing
  EXPECT_NEAR(level.duration_s, 0.60, kTolerance);  // first send 0.00 → last end 0.60 (the cancelled request)
  EXPECT_NEAR(level.request_throughput, 4 / 0.6, kTolerance);
  EXPECT_NEAR(level.output_throughput, 11 / 0.6, kTolerance);
  EXPECT_NEAR(level.total_throughput, 50 / 0.6, kTolerance);
  EXPECT_NEAR(level.output_throughput_per_chip, 11 / 0.6 / 2, kTolerance);
  EXPECT_NEAR(level.total_throughput_per_chip, 50 / 0.6 / 2, kTolerance);

  EXPECT_EQ(level.ttft_ms.count, 4);
  EXPECT_NEAR(level.ttft_ms.mean, 112.5, kTolerance);
  EXPECT_NEAR(level.ttft_ms.median, 100, kTolerance);
  EXPECT_NEAR(level.ttft_ms.p90, 170, kTolerance);  // sorted {50, 100, 100, 200}, rank 2.7
  EXPECT_NEAR(level.ttft_ms.p99, 197, kTolerance);
  EXPECT_EQ(level.tpot_ms.count, 3);
  EXPECT_NEAR(level.tpot_ms.median, 70, kTolerance);
  EXPECT_NEAR(level.tpot_ms.mean, (70 + 250 + 50.0 / 3) / 3, kTolerance);
  EXPECT_EQ(level.itl_ms.count, 6);
  EXPECT_NEAR(level.itl_ms.median, 50, kTolerance);  // sorted {20, 20, 50, 50, 100, 200}
  EXPECT_NEAR(level.itl_ms.p90, 150, kTolerance);
  EXPECT_NEAR(level.itl_ms.p99, 195, kTolerance);
  EXPECT_NEAR(level.e2e_ms.median, 230, kTolerance);
  EXPECT_NEAR(level.e2e_ms.max, 450, kTolerance);

  EXPECT_NEAR(level.interactivity_median, 1000.0 / 70, kTolerance);
  EXPECT_NEAR(level.interactivity_mean, 1000.0 / ((70 + 250 + 50.0 / 3) / 3), kTolerance);
  EXPECT_NEAR(level.e2e_per_output_token_ms.p90, 187.5, kTolerance);  // sorted {37.5, 77.5, 100, 225}, rank 2.7
  EXPECT_NEAR(level.e2e_interactivity_p90, 1000.0 / 187.5, kTolerance);
  // $3.6 per chip-hour at 9.1667 output tok/s/chip: 3.6 / (9.1667 · 3600 / 10⁶) $ per million output tokens
  EXPECT_NEAR(level.cost_per_million_output_tokens, 3.6 / (11 / 0.6 / 2 * 3600 / 1e6), 1e-6);
  EXPECT_NEAR(level.cost_per_million_total_tokens, 3.6 / (50 / 0.6 / 2 * 3600 / 1e6), 1e-6);

  EXPECT_EQ(level.usage.requests_without_usage, 1);
  EXPECT_EQ(level.usage.usage_completion_tokens, 4 + 2 + 4);
  EXPECT_EQ(level.usage.content_chunks, 4 + 2 + 1 + 3);
  EXPECT_EQ(level.usage.completion_vs_chunks_mismatches, 1);
  EXPECT_EQ(level.usage.output_length_mismatches, 1);
  EXPECT_EQ(level.usage.prompt_mismatches, 1);
}

TEST(BenchLevelMetrics, NoPriceNoCostAndNoRequestsNoFigures) {
  LevelResult priced;
  ComputeLevelMetrics(Records(), CostModel{1, std::nullopt}, priced);
  EXPECT_TRUE(std::isnan(priced.cost_per_million_output_tokens));
  EXPECT_NEAR(priced.output_throughput_per_chip, priced.output_throughput, kTolerance);

  LevelResult empty;
  ComputeLevelMetrics({}, CostModel{1, 1.0}, empty);
  EXPECT_EQ(empty.completed, 0);
  EXPECT_TRUE(std::isnan(empty.duration_s));
  EXPECT_TRUE(std::isnan(empty.output_throughput));
  EXPECT_TRUE(std::isnan(empty.interactivity_median));

  LevelResult all_failed;
  ComputeLevelMetrics({Failed(Outcome::kDisconnected, 0, 1)}, CostModel{1, 1.0}, all_failed);
  EXPECT_EQ(all_failed.failed, 1);
  EXPECT_NEAR(all_failed.output_throughput, 0, kTolerance);
  EXPECT_EQ(all_failed.ttft_ms.count, 0);
  EXPECT_EQ(all_failed.errors.at("disconnected"), 1);
}

TEST(BenchCost, PerMillionTokensFromPricePerChipHour) {
  // $2 per chip-hour at 1000 tok/s/chip: 3.6 M tokens per hour, so $0.5556 per million.
  EXPECT_NEAR(CostPerMillionTokens(2.0, 1000), 2.0 / 3.6, 1e-12);
  EXPECT_TRUE(std::isnan(CostPerMillionTokens(std::nullopt, 1000)));
  EXPECT_TRUE(std::isnan(CostPerMillionTokens(2.0, 0)));
}

}  // namespace
}  // namespace glint::bench
