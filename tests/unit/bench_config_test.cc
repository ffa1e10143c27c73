// Validation of glint bench's configuration and base URL, and what of it goes into result files.
#include <cmath>
#include <limits>

#include "bench/config.h"
#include "bench/http.h"
#include "bench/replay.h"
#include "test_util.h"

namespace glint::bench {
namespace {

BenchConfig Valid() {
  BenchConfig config;
  config.base_url = "http://127.0.0.1:8000";
  return config;
}

TEST(BenchConfig, DefaultsFollowTheServingDoc) {
  const BenchConfig config = Valid();
  EXPECT_OK(ValidateConfig(config));
  EXPECT_EQ(config.input_len, 8192);
  EXPECT_EQ(config.output_len, 1024);
  EXPECT_EQ(SessionsForLevel(config, 4), 40);  // 10 × concurrency
  EXPECT_EQ(WarmupsForLevel(config, 4), 8);    // 2 × concurrency
  EXPECT_EQ(RangeRatio(config), 1.0);          // fixed lengths in the InferenceX convention
  BenchConfig vllm = Valid();
  vllm.range_convention = RangeConvention::kVllm;
  EXPECT_EQ(RangeRatio(vllm), 0.0);
  vllm.prompts_per_level = 5;
  vllm.warmup_requests = 0;
  EXPECT_EQ(SessionsForLevel(vllm, 64), 5);
  EXPECT_EQ(WarmupsForLevel(vllm, 64), 0);
}

TEST(BenchConfig, TheLongestRequestMustFitTheServersContext) {
  BenchConfig c = Valid();
  c.input_len = 1000;
  c.output_len = 24;
  EXPECT_OK(CheckFitsContext(c, 1024));  // prompt + max_tokens = the context exactly: the server accepts it
  EXPECT_ERROR_CONTAINS(CheckFitsContext(c, 1023),
                        "requests need up to 1000 + 24 = 1024 tokens (prompt + output) but the server's "
                        "max_model_len is 1023 (GET /v1/models): lower --input-len or --output-len");
  // With a range the longest draw counts: vLLM's convention, 1000 · 1.1 → 1100 and 24 · 1.1 → 27 (rounded up).
  c.range_convention = RangeConvention::kVllm;
  c.range_ratio = 0.1;
  EXPECT_OK(CheckFitsContext(c, 1127));
  EXPECT_ERROR_CONTAINS(CheckFitsContext(c, 1126), "1100 + 27 = 1127 tokens");

  // Multi-turn: a first turn's message alone; the sub-agents' fresh contexts when a burst happens and is longer.
  BenchConfig m = Valid();
  m.workload = WorkloadKind::kMultiTurn;
  m.input_len = 100;
  m.output_len = 10;
  m.subagent_input_len = 500;
  m.turns = 2;
  m.subagent_every = 2;  // a burst never follows the last turn: no sub-agents in a 2-turn session
  EXPECT_OK(CheckFitsContext(m, 110));
  EXPECT_ERROR_CONTAINS(CheckFitsContext(m, 109), "first turns need at least 100 + 10 = 110 tokens");
  m.turns = 3;
  EXPECT_ERROR_CONTAINS(CheckFitsContext(m, 509), "first turns need at least 500 + 10 = 510 tokens");
  EXPECT_ERROR_CONTAINS(CheckFitsContext(m, 509), "lower --subagent-input-len or --output-len");
  m.subagents = 0;
  EXPECT_OK(CheckFitsContext(m, 110));
}

TEST(BenchConfig, InvalidCombinationsNameTheFlag) {
  BenchConfig c = Valid();
  c.base_url = "";
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--base-url is required");
  c = Valid();
  c.workload = WorkloadKind::kMultiTurn;
  c.prompt_format = PromptFormat::kTokenIds;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "use --prompt-format text");
  c = Valid();
  c.concurrency = {1, 0};
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--concurrency level 0");
  c = Valid();
  c.extra_body = {{"stream", false}};
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--extra-body may not set \"stream\"");
  c = Valid();
  c.extra_body = nlohmann::json::array();
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "must be a JSON object");
  c = Valid();
  c.range_ratio = 0.5;
  c.range_convention = RangeConvention::kVllm;
  EXPECT_OK(ValidateConfig(c));
  c.range_ratio = 1.0;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--range-ratio");
  c = Valid();
  c.chips = 0;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--chips");
  c = Valid();
  c.price_per_chip_hour = -1;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--price-per-chip-hour");
  c = Valid();
  c.output_len = 0;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--output-len");
  EXPECT_ERROR_CONTAINS(ParseWorkloadKind("chat"), "expected 'random' or 'multiturn'");
  EXPECT_ERROR_CONTAINS(ParsePromptFormat("ids"), "expected 'text' or 'token-ids'");
  c = Valid();
  c.token_id_range = TokenIdRange{0, 10};
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--token-id-range needs --prompt-format token-ids");
  c.prompt_format = PromptFormat::kTokenIds;
  EXPECT_OK(ValidateConfig(c));
  c = Valid();
  c.token_counting = TokenCounting::kLogprobs;
  c.extra_body = {{"logprobs", 3}};
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "may not set \"logprobs\" with --count-tokens logprobs");
  c.token_counting = TokenCounting::kContent;
  EXPECT_OK(ValidateConfig(c));  // logprobs of the caller's own, counted by content
  EXPECT_ERROR_CONTAINS(ParseTokenCounting("chunks"), "expected 'content' or 'logprobs'");
  c = Valid();
  c.request_rate = -1;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--request-rate -1 must be a non-negative number");
  c.request_rate = std::numeric_limits<double>::infinity();
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--request-rate");
  c = Valid();
  c.requests_file = "requests.jsonl";
  EXPECT_OK(ValidateConfig(c));
  c.prompts_per_level = 4;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--requests replays the file's requests");
  c.prompts_per_level = 0;
  c.workload = WorkloadKind::kMultiTurn;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--requests replays the file's requests");
}

TEST(BenchReplay, TheBatchInputFormatIsParsedAndEveryBadLineIsNamed) {
  ASSERT_OK_AND_ASSIGN(
      std::vector<ReplayRequest> requests,
      ParseReplayRequests(
          R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 3, "temperature": 0.5}})"
          "\n\n"
          R"({"custom_id": "b", "url": "/v1/chat/completions", "body": {"messages": [], "max_completion_tokens": 7}})"
          "\n"));
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_FALSE(requests[0].chat);
  EXPECT_EQ(requests[0].max_tokens, 3);
  EXPECT_EQ(requests[0].body["temperature"], 0.5);
  EXPECT_TRUE(requests[1].chat);
  EXPECT_EQ(requests[1].max_tokens, 7);
  const auto error = [](const std::string& line) {
    return ParseReplayRequests(R"({"url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 1}})"
                               "\n" +
                               line)
        .status();
  };
  EXPECT_ERROR_CONTAINS(error("not json"), "line 2: not a JSON object");
  EXPECT_ERROR_CONTAINS(error(R"({"url": "/v1/embeddings", "body": {}})"), "line 2: \"url\" must be");
  EXPECT_ERROR_CONTAINS(error(R"({"url": "/v1/completions", "body": "x"})"), "line 2: \"body\" must be a JSON object");
  EXPECT_ERROR_CONTAINS(error(R"({"url": "/v1/completions", "body": {"max_tokens": 1}})"), "no \"prompt\"");
  EXPECT_ERROR_CONTAINS(error(R"({"url": "/v1/chat/completions", "body": {"prompt": "x", "max_tokens": 1}})"),
                        "no \"messages\"");
  EXPECT_ERROR_CONTAINS(error(R"({"url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 0}})"),
                        "positive integer \"max_tokens\"");
  EXPECT_ERROR_CONTAINS(error(R"({"url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 2, "n": 2}})"),
                        "\"n\" must be 1");
  EXPECT_ERROR_CONTAINS(ParseReplayRequests("\n \n"), "the file holds no request");
  EXPECT_ERROR_CONTAINS(LoadReplayRequests("/nonexistent/requests.jsonl"), "--requests /nonexistent");
}

TEST(BenchConfig, MixedLengthsAndArrivalsAreCheckedAndFitTheContext) {
  BenchConfig c = Valid();
  c.long_input_len = -1;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--long-input-len -1 must be positive");
  for (double fraction : {0.0, -0.5, 1.5, std::nan("")}) {
    c = Valid();
    c.long_fraction = fraction;
    EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--long-fraction");
  }
  c = Valid();
  c.poisson_arrivals = true;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--arrivals poisson needs --request-rate R > 0");
  c.workload = WorkloadKind::kMultiTurn;
  c.request_rate = 2;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--arrivals poisson applies to the generated random workload only");
  c.poisson_arrivals = false;
  c.long_input_len = 100;
  EXPECT_ERROR_CONTAINS(ValidateConfig(c), "--long-input-len applies to the generated random workload only");
  c = Valid();
  c.input_len = 128;
  c.output_len = 64;
  c.long_input_len = 2048;
  c.long_fraction = 1;
  c.request_rate = 0.5;
  c.poisson_arrivals = true;
  EXPECT_OK(ValidateConfig(c));
  EXPECT_OK(CheckFitsContext(c, 2112));
  EXPECT_ERROR_CONTAINS(CheckFitsContext(c, 2111), "2048 + 64 = 2112 tokens");
  EXPECT_ERROR_CONTAINS(CheckFitsContext(c, 2111), "lower --long-input-len or --output-len");
  const nlohmann::json json = ConfigToJson(c);
  EXPECT_EQ(json["long_input_len"], 2048);
  EXPECT_EQ(json["long_fraction"], 1.0);
  EXPECT_EQ(json["request_rate"], 0.5);
  EXPECT_EQ(json["arrivals"], "poisson");
}

TEST(BenchConfig, TokenIdRangesAreHalfOpenAndBounded) {
  ASSERT_OK_AND_ASSIGN(TokenIdRange range, ParseTokenIdRange("0:154820"));
  EXPECT_EQ(range.begin, 0);
  EXPECT_EQ(range.end, 154820);
  ASSERT_OK_AND_ASSIGN(range, ParseTokenIdRange("7:8"));
  EXPECT_EQ(range.begin, 7);
  ASSERT_OK_AND_ASSIGN(range, ParseTokenIdRange("0:2147483648"));
  EXPECT_EQ(range.end, int64_t{1} << 31);
  for (const char* bad :
       {"", "5", ":5", "5:", "5:5", "6:5", "-1:5", "0:2147483649", "0:99999999999", "a:b", "1:2:3", " 1:2"}) {
    SCOPED_TRACE(bad);
    EXPECT_ERROR_CONTAINS(ParseTokenIdRange(bad), "expected BEGIN:END");
  }
}

TEST(BenchConfig, JsonCarriesEverythingButTheKey) {
  BenchConfig c = Valid();
  c.api_key = "secret-key";
  c.range_ratio = 0.8;
  c.input_len = 1024;
  c.seed = 5;
  const nlohmann::json json = ConfigToJson(c);
  EXPECT_EQ(json.dump().find("secret-key"), std::string::npos);
  EXPECT_TRUE(json["api_key_set"].get<bool>());
  EXPECT_EQ(json["range_convention"], "inferencex");
  EXPECT_EQ(json["input_len_range"], nlohmann::json({819, 1024}));
  EXPECT_EQ(json["output_len_range"], nlohmann::json({819, 1024}));
  EXPECT_EQ(json["seed"], 5);
  EXPECT_EQ(json["prompts_per_level"], "10 x concurrency");
  EXPECT_TRUE(json["ignore_eos"].get<bool>());
}

TEST(BenchBaseUrl, OriginAndPrefix) {
  ASSERT_OK_AND_ASSIGN(BaseUrl plain, ParseBaseUrl("http://127.0.0.1:8000"));
  EXPECT_EQ(plain.origin, "http://127.0.0.1:8000");
  EXPECT_EQ(plain.path_prefix, "");
  ASSERT_OK_AND_ASSIGN(BaseUrl prefixed, ParseBaseUrl("https://example.org/llm/"));
  EXPECT_EQ(prefixed.origin, "https://example.org");
  EXPECT_EQ(prefixed.path_prefix, "/llm");
  EXPECT_ERROR_CONTAINS(ParseBaseUrl("127.0.0.1:8000"), "has no scheme");
  EXPECT_ERROR_CONTAINS(ParseBaseUrl("ftp://host"), "has scheme 'ftp'");
  EXPECT_ERROR_CONTAINS(ParseBaseUrl("http://host:8000/v1"), "ends in /v1");
  EXPECT_ERROR_CONTAINS(ParseBaseUrl("http://host/api/v1/"), "ends in /v1");
  EXPECT_ERROR_CONTAINS(ParseBaseUrl("http:///x"), "has no host");
  EXPECT_ERROR_CONTAINS(ParseBaseUrl("http://host/?q=1"), "query");
  EXPECT_ERROR_CONTAINS(ParseBaseUrl("http://user:pw@host"), "--api-key");
}

}  // namespace
}  // namespace glint::bench
