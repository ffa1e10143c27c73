// Server-Sent Events framing, OpenAI stream chunks and Prometheus text as glint bench reads them.
#include <cmath>

#include "bench/prometheus.h"
#include "bench/sse.h"
#include "test_util.h"

namespace glint::bench {
namespace {

std::vector<std::string> FeedAll(SseParser& parser, std::string_view bytes, size_t piece) {
  std::vector<std::string> events;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    auto got = parser.Feed(bytes.substr(i, piece));
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (got.ok()) events.insert(events.end(), got->begin(), got->end());
  }
  return events;
}

TEST(BenchSse, EventsSurviveAnySplitAndEveryLineEnding) {
  const std::string stream =
      ": keep-alive comment\n\n"
      "data: {\"a\":1}\n\n"
      "event: message\r\ndata:{\"b\":2}\r\n\r\n"
      "data: line one\rdata: line two\r\r"
      "id: 7\n\n"  // an event without data is not dispatched
      "data: [DONE]\n\n"
      "data: unfinished";
  for (size_t piece : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, stream.size()}) {
    SseParser parser;
    const auto events = FeedAll(parser, stream, piece);
    ASSERT_EQ(events.size(), 4u) << "piece size " << piece;
    EXPECT_EQ(events[0], "{\"a\":1}");
    EXPECT_EQ(events[1], "{\"b\":2}");
    EXPECT_EQ(events[2], "line one\nline two");
    EXPECT_EQ(events[3], "[DONE]");
  }
}

TEST(BenchSse, AnEventThatNeverEndsIsAnError) {
  SseParser parser;
  std::string huge(SseParser::kMaxEventBytes + 10, 'x');
  EXPECT_ERROR_CONTAINS(parser.Feed("data: " + huge), "exceeded");
}

TEST(BenchStreamChunk, CompletionTextUsageAndFinish) {
  ASSERT_OK_AND_ASSIGN(StreamChunk text,
                       ParseStreamChunk(R"({"choices":[{"index":0,"text":"Hi","finish_reason":null}]})"));
  EXPECT_TRUE(text.has_content);
  EXPECT_EQ(text.text, "Hi");
  EXPECT_FALSE(text.finish_reason.has_value());

  ASSERT_OK_AND_ASSIGN(StreamChunk usage,
                       ParseStreamChunk(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5}})"));
  EXPECT_FALSE(usage.has_content);
  EXPECT_EQ(usage.prompt_tokens, 12);
  EXPECT_EQ(usage.completion_tokens, 5);

  ASSERT_OK_AND_ASSIGN(StreamChunk finish,
                       ParseStreamChunk(R"({"choices":[{"text":"","finish_reason":"length"}],"usage":null})"));
  EXPECT_FALSE(finish.has_content);
  EXPECT_EQ(finish.finish_reason, "length");
  EXPECT_FALSE(finish.completion_tokens.has_value());

  ASSERT_OK_AND_ASSIGN(StreamChunk done, ParseStreamChunk("[DONE]"));
  EXPECT_TRUE(done.done);
}

TEST(BenchStreamChunk, ChatDeltasReasoningAndToolCallsAreContent) {
  ASSERT_OK_AND_ASSIGN(StreamChunk role,
                       ParseStreamChunk(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})"));
  EXPECT_FALSE(role.has_content);  // the opening role chunk carries no output: it must not stop the TTFT clock
  ASSERT_OK_AND_ASSIGN(StreamChunk content, ParseStreamChunk(R"({"choices":[{"delta":{"content":"ok"}}]})"));
  EXPECT_TRUE(content.has_content);
  EXPECT_EQ(content.text, "ok");
  ASSERT_OK_AND_ASSIGN(StreamChunk reasoning,
                       ParseStreamChunk(R"({"choices":[{"delta":{"reasoning_content":"hmm","content":null}}]})"));
  EXPECT_TRUE(reasoning.has_content);
  EXPECT_EQ(reasoning.text, "");  // reasoning is output, but is not replayed into the conversation
  ASSERT_OK_AND_ASSIGN(StreamChunk tool, ParseStreamChunk(R"({"choices":[{"delta":{"tool_calls":[{"index":0}]}}]})"));
  EXPECT_TRUE(tool.has_content);
}

TEST(BenchStreamChunk, LogprobEntriesCountTokensWithOrWithoutText) {
  ASSERT_OK_AND_ASSIGN(StreamChunk completion,
                       ParseStreamChunk(R"({"choices":[{"text":"","logprobs":{"tokens":["","",""],)"
                                        R"("token_logprobs":[-1,-2,-3]}}]})"));
  EXPECT_EQ(completion.logprob_tokens, 3);
  EXPECT_FALSE(completion.has_content);
  ASSERT_OK_AND_ASSIGN(StreamChunk chat, ParseStreamChunk(R"({"choices":[{"delta":{"content":"hi"},)"
                                                          R"("logprobs":{"content":[{"token":"hi","logprob":0}]}}]})"));
  EXPECT_EQ(chat.logprob_tokens, 1);
  EXPECT_TRUE(chat.has_content);
  ASSERT_OK_AND_ASSIGN(StreamChunk none, ParseStreamChunk(R"({"choices":[{"text":"x","logprobs":null}]})"));
  EXPECT_EQ(none.logprob_tokens, 0);
  EXPECT_ERROR_CONTAINS(ParseStreamChunk(R"({"choices":[{"logprobs":[1]}]})"), "expected an object");
  EXPECT_ERROR_CONTAINS(ParseStreamChunk(R"({"choices":[{"logprobs":{"tokens":5}}]})"),
                        "logprobs.tokens is number, expected an array");
}

TEST(BenchStreamChunk, ErrorsAndMalformedChunks) {
  ASSERT_OK_AND_ASSIGN(StreamChunk error, ParseStreamChunk(R"({"error":{"message":"out of memory","code":503}})"));
  EXPECT_EQ(error.error, "out of memory");
  EXPECT_ERROR_CONTAINS(ParseStreamChunk("{not json"), "not a JSON object");
  EXPECT_ERROR_CONTAINS(ParseStreamChunk("[1,2]"), "not a JSON object");
  EXPECT_ERROR_CONTAINS(ParseStreamChunk(R"({"choices":{"text":"x"}})"), "expected an array");
  EXPECT_ERROR_CONTAINS(ParseStreamChunk(R"({"usage":{"completion_tokens":"5"}})"), "non-negative integer");
  EXPECT_ERROR_CONTAINS(ParseStreamChunk(R"({"usage":{"completion_tokens":-1}})"), "non-negative integer");
}

constexpr const char* kMetrics = R"(# HELP vllm:spec_decode_num_drafts_total Drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 60
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 40 1700000000000
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 150
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 80
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 50
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="2"} 20
glint:odd_label{path="a \"quoted\" \\ value\nnext"} NaN
glint:infinite +Inf
  indented_metric 1.5e3
)";

TEST(BenchPrometheus, ParsesLabelsEscapesAndSpecialValues) {
  ASSERT_OK_AND_ASSIGN(auto samples, ParsePrometheusText(kMetrics));
  ASSERT_EQ(samples.size(), 10u);
  EXPECT_EQ(samples[0].name, "vllm:spec_decode_num_drafts_total");
  EXPECT_EQ(samples[0].labels.at("engine"), "0");
  EXPECT_EQ(samples[1].value, 40);  // the timestamp after the value is not the value
  EXPECT_EQ(samples[7].labels.at("path"), "a \"quoted\" \\ value\nnext");
  EXPECT_TRUE(std::isnan(samples[7].value));
  EXPECT_TRUE(std::isinf(samples[8].value));
  EXPECT_EQ(samples[9].value, 1500);
  EXPECT_ERROR_CONTAINS(ParsePrometheusText("ok 1\nbroken{a=\"x} 1\n"), "/metrics line 2");
  EXPECT_ERROR_CONTAINS(ParsePrometheusText("no_value\n"), "has no value");
  EXPECT_ERROR_CONTAINS(ParsePrometheusText("m{a=x} 1\n"), "expected =\"");
  EXPECT_ERROR_CONTAINS(ParsePrometheusText("m 12abc\n"), "not a number");
}

TEST(BenchPrometheus, SpecDecodeCountersAreSummedOverSeries) {
  ASSERT_OK_AND_ASSIGN(auto samples, ParsePrometheusText(kMetrics));
  const SpecDecodeCounters counters = ExtractSpecDecodeCounters(samples);
  EXPECT_TRUE(counters.present);
  EXPECT_EQ(counters.drafts, 100);
  EXPECT_EQ(counters.draft_tokens, 300);
  EXPECT_EQ(counters.accepted_tokens, 150);
  ASSERT_EQ(counters.accepted_per_position.size(), 3u);
  EXPECT_EQ(counters.accepted_per_position.at(1), 50);
}

TEST(BenchPrometheus, AcceptanceFromTheDifferenceOfTwoScrapes) {
  SpecDecodeCounters before{true, 100, 300, 150, {{0, 80}, {1, 50}, {2, 20}}};
  SpecDecodeCounters after{true, 140, 420, 230, {{0, 116}, {1, 78}, {2, 36}}};
  const auto metrics = SpecDecodeDelta(before, after);
  ASSERT_TRUE(metrics.has_value());
  EXPECT_EQ(metrics->drafts, 40);
  EXPECT_EQ(metrics->draft_tokens, 120);
  EXPECT_EQ(metrics->accepted_tokens, 80);
  EXPECT_DOUBLE_EQ(metrics->acceptance_rate, 80.0 / 120.0);
  EXPECT_DOUBLE_EQ(metrics->acceptance_length, 3.0);  // 1 + 80 / 40
  ASSERT_EQ(metrics->per_position_acceptance_rate.size(), 3u);
  EXPECT_DOUBLE_EQ(metrics->per_position_acceptance_rate[0], 0.9);
  EXPECT_DOUBLE_EQ(metrics->per_position_acceptance_rate[1], 0.7);
  EXPECT_DOUBLE_EQ(metrics->per_position_acceptance_rate[2], 0.4);

  EXPECT_FALSE(SpecDecodeDelta(before, before).has_value());  // no drafts in between: no rate
  SpecDecodeCounters absent;
  EXPECT_FALSE(SpecDecodeDelta(absent, after).has_value());
  ASSERT_OK_AND_ASSIGN(auto others, ParsePrometheusText("vllm:num_requests_running 3\n"));
  EXPECT_FALSE(ExtractSpecDecodeCounters(others).present);
}

}  // namespace
}  // namespace glint::bench
