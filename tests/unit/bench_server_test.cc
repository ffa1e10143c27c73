// glint bench against the in-process fake server (bench_fake_server.h) on loopback: the measured timings against
// the scripted delays, the request bodies, concurrency, errors, usage cross-checks, multi-turn sessions, Ctrl-C,
// result files and plots.
//
// Timing tolerance. The fake server sleeps until absolute deadlines (arrival + ttft + i·itl), so its wake-up
// overshoots do not add up along a stream, and the client timestamps each chunk when it is read. A measured TTFT
// or E2E can therefore only exceed the script (never fall short of it: the client's send precedes the server's
// arrival), by one wake-up overshoot plus loopback delivery plus thread scheduling. On the shared 2-core CI machine
// that stays within a few ms; kSlack = 30 ms bounds it with margin while staying well below the 25–100 ms gaps
// that tell TTFT, ITL, TPOT and E2E apart.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "base/file.h"
#include "bench/bench.h"
#include "bench/http.h"
#include "bench/report.h"
#include "bench/runner.h"
#include "bench/workload.h"
#include "bench_fake_server.h"
#include "test_util.h"

namespace glint::bench {
namespace {

using fake::FakeReply;
using fake::FakeServer;
using Clock = std::chrono::steady_clock;

constexpr double kSlack = 0.030;

BenchConfig FakeConfig(const FakeServer& server) {
  BenchConfig c;
  c.base_url = server.base_url();
  c.input_len = 16;
  c.output_len = 5;
  c.concurrency = {1};
  c.prompts_per_level = 3;
  c.warmup_requests = 0;
  c.seed = 7;
  c.request_timeout_s = 10;
  c.progress = false;
  return c;
}

BenchRun RunOk(const BenchConfig& config) {
  std::atomic<bool> stop{false};
  BenchRun run;
  const Status status = RunBenchmark(config, stop, RunHooks(), run);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return run;
}

FakeServer::Script Steady(double ttft_s, double itl_s) {
  return [=](int64_t, const nlohmann::json&) {
    FakeReply reply;
    reply.ttft_s = ttft_s;
    reply.itl_s = itl_s;
    return reply;
  };
}

bool IsPng(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  char magic[8] = {};
  file.read(magic, 8);
  return file.gcount() == 8 && std::string(magic, 8) == std::string("\x89PNG\r\n\x1a\n", 8);
}

std::string ReadAll(std::FILE* file) {
  std::rewind(file);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), file)) > 0;) text.append(buffer, n);
  return text;
}

TEST(BenchAgainstFakeServer, TimingsMatchTheScriptedDelays) {
  FakeServer server(Steady(/*ttft_s=*/0.060, /*itl_s=*/0.025));
  BenchConfig config = FakeConfig(server);
  config.prompts_per_level = 4;
  config.warmup_requests = 1;
  config.chips = 2;
  config.price_per_chip_hour = 2.0;
  const BenchRun run = RunOk(config);
  ASSERT_EQ(run.levels.size(), 1u);
  const LevelResult& level = run.levels[0];
  const std::vector<RequestRecord>& records = run.level_requests[0];
  EXPECT_EQ(level.warmup_requests, 1);
  EXPECT_EQ(level.completed, 4);
  EXPECT_EQ(level.failed, 0);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(server.generation_requests(), 5);  // 1 warm-up + 4 measured

  // Per request: 5 chunks at 60, 85, 110, 135, 160 ms after arrival.
  for (size_t i = 0; i < records.size(); ++i) {
    const RequestRecord& r = records[i];
    SCOPED_TRACE(i);
    ASSERT_EQ(r.outcome, Outcome::kOk) << r.error;
    ASSERT_EQ(r.content_times_s.size(), 5u);
    EXPECT_EQ(r.usage_completion_tokens, 5);
    EXPECT_EQ(r.usage_prompt_tokens, 16);  // the text prompt is exactly --input-len tokens with the server's BOS
    const RequestTiming timing = ComputeRequestTiming(r);
    EXPECT_GE(timing.ttft_s, 0.060);
    EXPECT_LE(timing.ttft_s, 0.060 + kSlack);
    EXPECT_GE(timing.e2e_s, 0.160);
    EXPECT_LE(timing.e2e_s, 0.160 + kSlack);
    // E2E − TTFT spans the four 25 ms gaps, give or take how late the first chunk was read.
    EXPECT_GE(timing.tpot_s, (0.100 - kSlack) / 4);
    EXPECT_LE(timing.tpot_s, (0.100 + kSlack) / 4);
    ASSERT_EQ(timing.itl_s.size(), 4u);
    for (double gap : timing.itl_s) {
      EXPECT_GE(gap, 0.025 - kSlack);
      EXPECT_LE(gap, 0.025 + kSlack);
    }
    if (i > 0) {
      EXPECT_GE(r.start_s, records[i - 1].end_s);  // concurrency 1: one request at a time
    }
  }

  // The level's figures are exactly the arithmetic of serving.md §3 on these records.
  const double duration = records.back().end_s - records.front().start_s;
  EXPECT_DOUBLE_EQ(level.duration_s, duration);
  EXPECT_EQ(level.output_tokens, 20);
  EXPECT_EQ(level.input_tokens, 64);
  EXPECT_DOUBLE_EQ(level.output_throughput, 20 / duration);
  EXPECT_DOUBLE_EQ(level.total_throughput, 84 / duration);
  EXPECT_DOUBLE_EQ(level.output_throughput_per_chip, 10 / duration);
  EXPECT_DOUBLE_EQ(level.interactivity_median, 1000 / level.tpot_ms.median);
  EXPECT_DOUBLE_EQ(level.cost_per_million_output_tokens, 2.0 / (10 / duration * 3600 / 1e6));
  EXPECT_GE(level.tpot_ms.median, (100 - kSlack * 1e3) / 4);
  EXPECT_LE(level.tpot_ms.median, (100 + kSlack * 1e3) / 4);
  EXPECT_EQ(level.usage.completion_vs_chunks_mismatches, 0);
  EXPECT_EQ(level.usage.prompt_mismatches, 0);
  EXPECT_EQ(level.usage.output_length_mismatches, 0);

  // Speculative decoding from the /metrics difference around the measured phase: 4 requests, not the warm-up.
  ASSERT_TRUE(level.spec_decode.has_value()) << level.spec_decode_note;
  EXPECT_EQ(level.spec_decode->drafts, 4 * FakeServer::kDraftsPerRequest);
  EXPECT_DOUBLE_EQ(level.spec_decode->acceptance_rate, 20.0 / 30.0);
  EXPECT_DOUBLE_EQ(level.spec_decode->acceptance_length, 3.0);
  EXPECT_EQ(level.spec_decode->per_position_acceptance_rate, (std::vector<double>{0.9, 0.7, 0.4}));

  // What was sent: streaming completions with usage, ignore_eos and max_tokens, prompts of exact length.
  for (const nlohmann::json& body : server.generation_bodies()) {
    EXPECT_EQ(body["model"], "fake-model");
    EXPECT_EQ(body["stream"], true);
    EXPECT_EQ(body["stream_options"]["include_usage"], true);
    EXPECT_EQ(body["ignore_eos"], true);
    EXPECT_EQ(body["max_tokens"], 5);
    ASSERT_TRUE(body["prompt"].is_string());
    EXPECT_EQ(server.Encode(body["prompt"].get<std::string>(), true).size(), 16u);
  }
  for (const std::string& path : server.generation_paths()) EXPECT_EQ(path, "/v1/completions");
}

TEST(BenchAgainstFakeServer, ConcurrencyBoundsTheRequestsInFlight) {
  double duration_1 = 0, duration_4 = 0;
  for (int concurrency : {1, 4}) {
    FakeServer server(Steady(0.050, 0.010));
    BenchConfig config = FakeConfig(server);
    config.output_len = 3;
    config.prompts_per_level = 8;
    config.concurrency = {concurrency};
    const BenchRun run = RunOk(config);
    EXPECT_EQ(run.levels[0].completed, 8);
    EXPECT_EQ(server.max_streams_in_flight(), concurrency);
    (concurrency == 1 ? duration_1 : duration_4) = run.levels[0].duration_s;
  }
  // 8 requests of ~70 ms: ~560 ms one at a time, ~140 ms four at a time.
  EXPECT_LT(duration_4, duration_1 / 2);
}

TEST(BenchAgainstFakeServer, FailuresAreCountedPerLevelAndNeverFatal) {
  FakeServer server([](int64_t number, const nlohmann::json&) {
    FakeReply reply;
    reply.ttft_s = 0.01;
    reply.itl_s = 0.01;
    if (number == 1) reply.http_status = 500;
    if (number == 2) reply.disconnect_after_chunks = 2;
    if (number == 3) reply.stall = true;
    if (number == 4) reply.garbage_chunk = true;
    if (number == 6) reply.tokens = 0;  // a normal end without any output
    return reply;
  });
  BenchConfig config = FakeConfig(server);
  config.prompts_per_level = 7;
  config.request_timeout_s = 0.4;
  const BenchRun run = RunOk(config);
  const LevelResult& level = run.levels[0];
  EXPECT_EQ(level.requests_sent, 7);
  EXPECT_EQ(level.completed, 2);
  EXPECT_EQ(level.failed, 5);
  EXPECT_EQ(level.errors,
            (std::map<std::string, int64_t>{
                {"http_500", 1}, {"disconnected", 1}, {"timeout", 1}, {"bad_response", 1}, {"no_content", 1}}));
  EXPECT_EQ(level.output_tokens, 10);  // only the two completed requests count
  const auto& records = run.level_requests[0];
  EXPECT_EQ(records[1].http_status, 500);
  EXPECT_NE(records[1].error.find("scripted failure"), std::string::npos);
  EXPECT_EQ(records[2].content_times_s.size(), 2u);
  const double timeout_e2e = records[3].end_s - records[3].start_s;
  EXPECT_GE(timeout_e2e, 0.4);
  EXPECT_LE(timeout_e2e, 0.4 + 0.1);  // the watchdog checks every 20 ms
  EXPECT_NE(records[4].error.find("not a JSON object"), std::string::npos);
  EXPECT_EQ(records[5].outcome, Outcome::kOk);  // the client recovers after each failure
}

TEST(BenchStreamingClient, NoListenerIsAConnectionFailure) {
  HttpOptions options;
  ASSERT_OK_AND_ASSIGN(options.base, ParseBaseUrl("http://127.0.0.1:1"));  // port 1: nothing listens on loopback
  StreamingClient client(options);
  RequestRecord record;
  std::string text;
  client.Run("/v1/completions", "{}", 5.0, Clock::now(), record, text);
  EXPECT_EQ(record.outcome, Outcome::kConnectionFailed);
  EXPECT_NE(record.error.find("could not connect"), std::string::npos) << record.error;
}

// A loopback server on raw sockets that answers the first request of each connection with a complete SSE reply
// (keep-alive) and closes the connection when a second request arrives on it, without a reply — what a server
// does to a kept-alive connection it has decided to drop (llama-server did it in the peer comparison). With
// `close_first`, it closes every connection on its first request instead.
class ClosingServer {
 public:
  explicit ClosingServer(bool close_first) : close_first_(close_first) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(::listen(listener_, 8), 0);
    socklen_t length = sizeof(address);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ClosingServer() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
  }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_; }

 private:
  // Reads one request (headers and a Content-Length body); false when the peer closed first.
  static bool ReadRequest(int fd) {
    std::string data;
    char buffer[4096];
    size_t body_at = std::string::npos, length = 0;
    while (body_at == std::string::npos || data.size() < body_at + length) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n <= 0) return false;
      data.append(buffer, static_cast<size_t>(n));
      if (body_at == std::string::npos && data.find("\r\n\r\n") != std::string::npos) {
        body_at = data.find("\r\n\r\n") + 4;
        const size_t field = data.find("Content-Length: ");
        if (field != std::string::npos && field < body_at) length = std::stoul(data.substr(field + 16));
      }
    }
    return true;
  }
  void Serve() {
    for (;;) {
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;  // the listener was shut down
      ++connections_;
      if (ReadRequest(fd) && !close_first_) {
        const std::string events =
            "data: {\"choices\":[{\"index\":0,\"text\":\"hi\",\"finish_reason\":\"length\"}],"
            "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n";
        const std::string reply =
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + std::to_string(events.size()) +
            "\r\nConnection: keep-alive\r\n\r\n" + events;
        EXPECT_EQ(::write(fd, reply.data(), reply.size()), static_cast<ssize_t>(reply.size()));
        ReadRequest(fd);  // the client's next request on this connection: dropped unanswered
      }
      ::close(fd);
    }
  }
  bool close_first_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

// A request that fails on a reused kept-alive connection before any reply is sent once more on a fresh one, and
// counted (results.json's resent_on_fresh_connection); a request that fails on a fresh connection is not retried.
TEST(BenchStreamingClient, AClosedKeptAliveConnectionIsRetriedOnceOnAFreshOne) {
  ClosingServer server(/*close_first=*/false);
  HttpOptions options;
  ASSERT_OK_AND_ASSIGN(options.base, ParseBaseUrl(server.base_url()));
  StreamingClient client(options);
  std::string text;
  for (int i = 0; i < 3; ++i) {
    RequestRecord record;
    client.Run("/v1/completions", "{}", 5.0, Clock::now(), record, text);
    EXPECT_EQ(record.outcome, Outcome::kOk) << i << ": " << record.error;
    EXPECT_EQ(record.stale_connection_retries, i == 0 ? 0 : 1) << i;
  }
  EXPECT_EQ(server.connections(), 3);
  LevelResult level;
  std::vector<RequestRecord> records(2);
  records[1].stale_connection_retries = 1;
  ComputeLevelMetrics(records, CostModel{}, level);
  EXPECT_EQ(level.resent, 1);

  ClosingServer closing(/*close_first=*/true);
  ASSERT_OK_AND_ASSIGN(options.base, ParseBaseUrl(closing.base_url()));
  StreamingClient fresh(options);
  RequestRecord record;
  fresh.Run("/v1/completions", "{}", 5.0, Clock::now(), record, text);
  EXPECT_EQ(record.outcome, Outcome::kDisconnected) << record.error;
  EXPECT_EQ(record.stale_connection_retries, 0);
  EXPECT_EQ(closing.connections(), 1);
}

TEST(BenchAgainstFakeServer, InvalidUtf8InAServerErrorDoesNotBreakTheResultFiles) {
  FakeServer server([](int64_t number, const nlohmann::json&) {
    FakeReply reply;
    if (number == 0) {
      reply.http_status = 503;
      reply.error_body = "overloaded \xff\xfe";
    }
    return reply;
  });
  BenchConfig config = FakeConfig(server);
  config.prompts_per_level = 2;
  config.out_dir = JoinPath(glint::testing::MakeTempDir("bench_utf8"), "out");
  std::atomic<bool> stop{false};
  std::FILE* table = std::tmpfile();
  ASSERT_OK(RunBenchCommand(config, stop, table, nullptr));
  std::fclose(table);
  ASSERT_OK_AND_ASSIGN(std::string text, ReadFile(JoinPath(config.out_dir, "results.json")));
  const nlohmann::json results = nlohmann::json::parse(text);
  const std::string example = results["levels"][0]["error_examples"][0].get<std::string>();
  EXPECT_NE(example.find("http_503: HTTP 503: overloaded \xEF\xBF\xBD"), std::string::npos) << example;  // U+FFFD
}

TEST(BenchAgainstFakeServer, UsageIsCrossCheckedAgainstTheChunksCounted) {
  FakeServer server([](int64_t number, const nlohmann::json&) {
    FakeReply reply;
    if (number == 1) reply.tokens_per_chunk = 2;         // 5 tokens in 3 chunks, as with speculative decoding
    if (number == 2) reply.include_usage = false;        // output counted from the 5 chunks
    if (number == 3) reply.usage_completion_tokens = 4;  // usage disagrees with the 5 chunks and max_tokens
    return reply;
  });
  BenchConfig config = FakeConfig(server);
  config.prompts_per_level = 4;
  const BenchRun run = RunOk(config);
  const LevelResult& level = run.levels[0];
  EXPECT_EQ(level.completed, 4);
  EXPECT_EQ(level.usage.requests_without_usage, 1);
  EXPECT_EQ(level.usage.content_chunks, 5 + 3 + 5 + 5);
  EXPECT_EQ(level.usage.usage_completion_tokens, 5 + 5 + 4);
  EXPECT_EQ(level.usage.completion_vs_chunks_mismatches, 2);
  EXPECT_EQ(level.usage.output_length_mismatches, 1);
  EXPECT_EQ(level.output_tokens, 5 + 5 + 5 + 4);
  const RequestRecord& multi = run.level_requests[0][1];
  const RequestTiming timing = ComputeRequestTiming(multi);
  EXPECT_DOUBLE_EQ(timing.tpot_s, (timing.e2e_s - timing.ttft_s) / 4);  // usage's 5 tokens, not 3 chunks
}

TEST(BenchAgainstFakeServer, TokenIdPromptsAndBothRangeConventions) {
  for (RangeConvention convention : {RangeConvention::kInferenceX, RangeConvention::kVllm}) {
    FakeServer server;
    BenchConfig config = FakeConfig(server);
    config.prompt_format = PromptFormat::kTokenIds;
    config.input_len = 20;
    config.output_len = 6;
    config.range_ratio = 0.5;
    config.range_convention = convention;
    config.prompts_per_level = 12;
    config.concurrency = {3};
    const BenchRun run = RunOk(config);
    // inferencex: [⌊0.5·L⌋, L]; vllm: [⌊0.5·L⌋, ⌈1.5·L⌉]
    const int64_t input_max = convention == RangeConvention::kInferenceX ? 20 : 30;
    const int64_t output_max = convention == RangeConvention::kInferenceX ? 6 : 9;
    std::set<size_t> lengths;
    int64_t prompt_tokens = 0, max_tokens = 0;
    for (const nlohmann::json& body : server.generation_bodies()) {
      ASSERT_TRUE(body["prompt"].is_array());
      const size_t length = body["prompt"].size();
      EXPECT_GE(length, 10u);
      EXPECT_LE(length, static_cast<size_t>(input_max));
      EXPECT_GE(body["max_tokens"].get<int64_t>(), 3);
      EXPECT_LE(body["max_tokens"].get<int64_t>(), output_max);
      lengths.insert(length);
      prompt_tokens += static_cast<int64_t>(length);
      max_tokens += body["max_tokens"].get<int64_t>();
    }
    EXPECT_GT(lengths.size(), 2u);  // lengths are drawn, not fixed
    const LevelResult& level = run.levels[0];
    EXPECT_EQ(level.completed, 12);
    EXPECT_EQ(level.input_tokens, prompt_tokens);
    EXPECT_EQ(level.output_tokens, max_tokens);
    EXPECT_EQ(level.usage.prompt_mismatches, 0);
    EXPECT_EQ(level.usage.output_length_mismatches, 0);
  }
}

// --long-input-len and --long-fraction mix long prompts among the range's; --request-rate with --arrivals poisson
// sends each request at its Poisson arrival (never before it), the concurrency capping those in flight.
TEST(BenchAgainstFakeServer, MixedLengthsArriveAtTheirPoissonTimes) {
  FakeServer server(Steady(0.005, 0.002));
  BenchConfig config = FakeConfig(server);
  config.prompt_format = PromptFormat::kTokenIds;
  config.input_len = 12;
  config.long_input_len = 40;
  config.long_fraction = 0.5;
  config.request_rate = 20;
  config.poisson_arrivals = true;
  config.prompts_per_level = 40;
  config.concurrency = {8};
  std::vector<double> arrivals;
  {
    std::vector<SessionPlan> sessions(40);
    Rng rng(3);
    AssignPoissonArrivals(config.request_rate, rng, sessions);
    for (const SessionPlan& s : sessions) arrivals.push_back(s.arrival_s);
  }
  EXPECT_EQ(arrivals[0], 0.0);
  EXPECT_TRUE(std::is_sorted(arrivals.begin(), arrivals.end()));
  // 39 exponential gaps of mean 50 ms: the sum is within ±50 % of 1.95 s with a probability above 0.998.
  EXPECT_GT(arrivals.back(), 0.975);
  EXPECT_LT(arrivals.back(), 2.925);

  const auto started = Clock::now();
  const BenchRun run = RunOk(config);
  const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
  int long_prompts = 0;
  for (const nlohmann::json& body : server.generation_bodies()) {
    const size_t length = body["prompt"].size();
    EXPECT_TRUE(length == 12 || length == 40) << length;
    long_prompts += length == 40 ? 1 : 0;
  }
  EXPECT_GE(long_prompts, 8);  // Binomial(40, 0.5): outside [8, 32] with probability below 1e-4
  EXPECT_LE(long_prompts, 32);
  ASSERT_EQ(run.level_requests.size(), 1u);
  const std::vector<RequestRecord>& records = run.level_requests[0];
  ASSERT_EQ(records.size(), 40u);
  // Paced: the last request is sent no earlier than ~1 s into the level (it would be at once unpaced), and spread.
  double last_start = 0;
  for (const RequestRecord& r : records) last_start = std::max(last_start, r.start_s);
  EXPECT_GT(last_start, 0.9);
  EXPECT_GT(elapsed, 0.9);
  EXPECT_EQ(run.levels[0].completed, 40);
}

// A random-weight model's tokens decode to nothing: counted by content chunks every request is `no_content`;
// counted by logprob entries every token is timed, and token-ids prompts from an id range need no /tokenize.
TEST(BenchAgainstFakeServer, EmptyTextTokensAreTimedByTheirLogprobs) {
  const auto script = [](int64_t, const nlohmann::json&) {
    FakeReply reply;
    reply.ttft_s = 0.040;
    reply.itl_s = 0.020;
    reply.empty_text = true;
    return reply;
  };
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    {
      FakeServer server(script);
      BenchConfig config = FakeConfig(server);
      config.output_len = 4;
      config.prompts_per_level = 2;
      config.warmup_requests = 0;
      if (chat) config.workload = WorkloadKind::kMultiTurn, config.turns = 1;
      const BenchRun run = RunOk(config);
      EXPECT_EQ(run.levels[0].completed, 0);
      for (const RequestRecord& r : run.level_requests[0]) EXPECT_EQ(r.outcome, Outcome::kNoContent);
    }
    FakeServer server(script);
    server.tokenize_enabled = chat;  // completions with an id range never ask; chat prompts are text
    BenchConfig config = FakeConfig(server);
    config.token_counting = TokenCounting::kLogprobs;
    config.output_len = 4;
    config.prompts_per_level = 3;
    config.warmup_requests = 0;
    if (chat) {
      config.workload = WorkloadKind::kMultiTurn;
      config.turns = 1;
    } else {
      config.prompt_format = PromptFormat::kTokenIds;
      config.token_id_range = TokenIdRange{500, 510};
    }
    const BenchRun run = RunOk(config);
    const LevelResult& level = run.levels[0];
    EXPECT_EQ(level.completed, 3);
    EXPECT_EQ(level.output_tokens, 12);
    for (const RequestRecord& r : run.level_requests[0]) {
      ASSERT_EQ(r.outcome, Outcome::kOk) << r.error;
      ASSERT_EQ(r.content_times_s.size(), 4u);
      const RequestTiming timing = ComputeRequestTiming(r);
      EXPECT_GE(timing.ttft_s, 0.040);
      EXPECT_LE(timing.ttft_s, 0.040 + kSlack);
      EXPECT_GE(timing.tpot_s, (0.060 - kSlack) / 3);
      EXPECT_LE(timing.tpot_s, (0.060 + kSlack) / 3);
    }
    for (const nlohmann::json& body : server.generation_bodies()) {
      if (chat) {
        EXPECT_EQ(body["logprobs"], true);
        continue;
      }
      EXPECT_EQ(body["logprobs"], 1);
      ASSERT_TRUE(body["prompt"].is_array());
      for (const nlohmann::json& id : body["prompt"]) {
        EXPECT_GE(id.get<int>(), 500);
        EXPECT_LT(id.get<int>(), 510);
      }
    }
  }
}

TEST(BenchAgainstFakeServer, MultiTurnSessionsExtendTheirContextAndBurstSubagents) {
  FakeServer server(Steady(0.020, 0.005));  // long enough for the two sub-agents of a burst to overlap
  BenchConfig config = FakeConfig(server);
  config.workload = WorkloadKind::kMultiTurn;
  config.turns = 3;
  config.subagent_every = 1;  // bursts after turns 0 and 1 (never after the last)
  config.subagents = 2;
  config.subagent_turns = 2;
  config.input_len = 12;
  config.turn_input_len = 4;
  config.subagent_input_len = 6;
  config.output_len = 3;
  config.prompts_per_level = 2;
  config.warmup_requests = 1;
  const BenchRun run = RunOk(config);
  const LevelResult& level = run.levels[0];
  EXPECT_EQ(level.requests_planned, 2 * (3 + 2 * 2 * 2));
  EXPECT_EQ(level.completed, 22);
  EXPECT_EQ(level.failed, 0);
  EXPECT_EQ(server.max_streams_in_flight(), 2);  // the main session waits while its two sub-agents run
  for (const std::string& path : server.generation_paths()) EXPECT_EQ(path, "/v1/chat/completions");

  std::vector<nlohmann::json> bodies = server.generation_bodies();
  ASSERT_EQ(bodies.size(), 23u);
  bodies.erase(bodies.begin());                                      // the warm-up
  std::map<std::string, std::vector<nlohmann::json>> conversations;  // first user message → its requests
  for (const nlohmann::json& body : bodies) {
    conversations[body["messages"][0]["content"].get<std::string>()].push_back(body);
  }
  int main_sessions = 0, subagent_sessions = 0;
  for (auto& [first, requests] : conversations) {
    const size_t words = server.Encode(first, false).size();
    const bool main = words == 12;
    EXPECT_TRUE(main || words == 6) << first;
    (main ? main_sessions : subagent_sessions)++;
    ASSERT_EQ(requests.size(), main ? 3u : 2u);
    std::sort(requests.begin(), requests.end(),
              [](const auto& a, const auto& b) { return a["messages"].size() < b["messages"].size(); });
    for (size_t turn = 0; turn + 1 < requests.size(); ++turn) {
      // Each turn's conversation is the previous one + the assistant's reply + a new user message.
      const nlohmann::json& before = requests[turn]["messages"];
      const nlohmann::json& after = requests[turn + 1]["messages"];
      ASSERT_EQ(after.size(), before.size() + 2);
      for (size_t m = 0; m < before.size(); ++m) EXPECT_EQ(after[m], before[m]);
      EXPECT_EQ(after[before.size()], (nlohmann::json{{"role", "assistant"}, {"content", "tok tok tok "}}));
      const std::string user = after[before.size() + 1]["content"].get<std::string>();
      if (main) {
        EXPECT_NE(user.find("Sub-agent 1 reported: tok tok tok"), std::string::npos) << user;
        EXPECT_NE(user.find("Sub-agent 2 reported: tok tok tok"), std::string::npos) << user;
      } else {
        EXPECT_EQ(server.Encode(user, false).size(), 4u);
      }
    }
  }
  EXPECT_EQ(main_sessions, 2);
  EXPECT_EQ(subagent_sessions, 8);
  EXPECT_TRUE(std::isfinite(level.e2e_interactivity_p90));
  ASSERT_OK_AND_ASSIGN(ParetoSeries series, ParetoFromResults(RunToJson(run)));
  EXPECT_EQ(series.x_key, "e2e_interactivity_p90");
  EXPECT_EQ(series.y_key, "output_throughput_per_chip");
}

TEST(BenchAgainstFakeServer, ARequestsFileIsReplayedWholeAtEveryLevel) {
  FakeServer server(Steady(0.0, 0.0));
  BenchConfig config = FakeConfig(server);
  config.prompts_per_level = 0;
  config.warmup_requests = -1;  // the default: no warm-up with --requests
  config.concurrency = {1, 2};
  config.requests_file = JoinPath(glint::testing::MakeTempDir("bench_replay"), "requests.jsonl");
  ASSERT_OK(WriteFileAtomic(
      config.requests_file,
      R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "one two", "max_tokens": 3, "temperature": 0.5, "ignore_eos": true}})"
      "\n"
      R"({"custom_id": "b", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": false}})"
      "\n"));
  const BenchRun run = RunOk(config);
  ASSERT_EQ(run.levels.size(), 2u);
  for (const LevelResult& level : run.levels) {
    EXPECT_EQ(level.requests_planned, 2);
    EXPECT_EQ(level.completed, 2);
    EXPECT_EQ(level.warmup_requests, 0);
    EXPECT_EQ(level.output_tokens, 5);  // the fake replies with max_tokens tokens
  }
  const std::vector<std::string> paths = server.generation_paths();
  const std::vector<nlohmann::json> bodies = server.generation_bodies();
  ASSERT_EQ(bodies.size(), 4u);
  for (size_t i = 0; i < bodies.size(); ++i) {
    const nlohmann::json& body = bodies[i];
    EXPECT_EQ(body["model"], "fake-model");
    EXPECT_EQ(body["stream"], true);  // the bench's, over the file's false
    EXPECT_EQ(body["stream_options"]["include_usage"], true);
    if (paths[i] == "/v1/completions") {
      EXPECT_EQ(body["prompt"], "one two");
      EXPECT_EQ(body["temperature"], 0.5);
      EXPECT_EQ(body["max_tokens"], 3);
    } else {
      EXPECT_EQ(paths[i], "/v1/chat/completions");
      EXPECT_EQ(body["messages"][0]["content"], "hi");
      EXPECT_FALSE(body.contains("ignore_eos"));  // the file's body as it is: nothing added but the measured fields
    }
  }
  const nlohmann::json recorded = ConfigToJson(run.config);
  EXPECT_EQ(recorded["workload"], "requests");
  EXPECT_EQ(recorded["requests_file"], config.requests_file);
  EXPECT_FALSE(recorded.contains("input_len")) << "the lengths are the file's";
  EXPECT_NE(SummaryTable(run).find("requests of " + config.requests_file), std::string::npos);
}

TEST(BenchAgainstFakeServer, ARequestRateSpacesTheStartsEvenly) {
  FakeServer server(Steady(0.0, 0.0));
  BenchConfig config = FakeConfig(server);
  config.prompts_per_level = 5;
  config.concurrency = {4};
  config.request_rate = 20;  // a start every 50 ms, though four could be in flight at once
  const BenchRun run = RunOk(config);
  const std::vector<RequestRecord>& records = run.level_requests[0];
  ASSERT_EQ(records.size(), 5u);
  std::vector<double> starts;
  for (const RequestRecord& record : records) starts.push_back(record.start_s);
  std::sort(starts.begin(), starts.end());
  for (size_t i = 0; i < starts.size(); ++i) {
    EXPECT_GE(starts[i], 0.050 * static_cast<double>(i) - 0.001) << i;
    EXPECT_LE(starts[i], 0.050 * static_cast<double>(i) + kSlack) << i;
  }
  EXPECT_EQ(ConfigToJson(run.config)["request_rate"], 20.0);
}

TEST(BenchAgainstFakeServer, AFailedTurnSkipsTheRestOfItsSession) {
  FakeServer server([](int64_t number, const nlohmann::json&) {
    FakeReply reply;
    if (number == 1) reply.http_status = 500;  // session 0, turn 1
    return reply;
  });
  BenchConfig config = FakeConfig(server);
  config.workload = WorkloadKind::kMultiTurn;
  config.turns = 3;
  config.subagent_every = 0;
  config.turn_input_len = 4;
  config.prompts_per_level = 2;
  const BenchRun run = RunOk(config);
  const LevelResult& level = run.levels[0];
  EXPECT_EQ(level.requests_planned, 6);
  EXPECT_EQ(level.requests_sent, 5);
  EXPECT_EQ(level.completed, 4);
  EXPECT_EQ(level.failed, 1);
  EXPECT_EQ(level.skipped, 1);
}

TEST(BenchAgainstFakeServer, StopFlagAbandonsRequestsAndWritesPartialResults) {
  FakeServer server(Steady(0.05, 0.05));  // 20 tokens: about a second per request
  BenchConfig config = FakeConfig(server);
  config.output_len = 20;
  config.concurrency = {2, 4};
  config.prompts_per_level = 4;
  config.out_dir = JoinPath(glint::testing::MakeTempDir("bench_stop"), "out");
  std::atomic<bool> stop{false};
  Clock::time_point stopped_at;
  std::thread interrupter([&] {
    while (server.generation_requests() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stopped_at = Clock::now();
    stop = true;
  });
  std::FILE* table = std::tmpfile();
  const Status status = RunBenchCommand(config, stop, table, nullptr);
  const double seconds_after_stop = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  interrupter.join();
  EXPECT_ERROR_CONTAINS(status, "interrupted by Ctrl-C");
  EXPECT_LT(seconds_after_stop, 0.5);  // in-flight streams are abandoned, not waited for
  EXPECT_NE(ReadAll(table).find("interrupted"), std::string::npos);
  std::fclose(table);

  ASSERT_OK_AND_ASSIGN(std::string text, ReadFile(JoinPath(config.out_dir, "results.json")));
  const nlohmann::json results = nlohmann::json::parse(text);
  EXPECT_TRUE(results["interrupted"].get<bool>());
  ASSERT_EQ(results["levels"].size(), 1u);  // concurrency 4 never started
  const nlohmann::json& level = results["levels"][0];
  EXPECT_TRUE(level["interrupted"].get<bool>());
  EXPECT_EQ(level["cancelled"], 2);
  EXPECT_EQ(level["skipped"], 2);
  EXPECT_EQ(level["completed"], 0);
  ASSERT_OK_AND_ASSIGN(std::string requests, ReadFile(JoinPath(config.out_dir, "requests.csv")));
  EXPECT_EQ(std::count(requests.begin(), requests.end(), '\n'), 3);
  EXPECT_NE(requests.find(",cancelled,"), std::string::npos);
}

TEST(BenchAgainstFakeServer, SpecDecodeIsReportedOnlyWhenExported) {
  FakeServer server;
  server.spec_decode_enabled = false;
  BenchConfig config = FakeConfig(server);
  config.prompts_per_level = 1;
  BenchRun run = RunOk(config);
  EXPECT_FALSE(run.levels[0].spec_decode.has_value());
  EXPECT_NE(run.levels[0].spec_decode_note.find("exports no vllm:spec_decode"), std::string::npos);
  server.metrics_enabled = false;
  run = RunOk(config);
  EXPECT_NE(run.levels[0].spec_decode_note.find("HTTP 404"), std::string::npos);
  EXPECT_EQ(run.levels[0].completed, 1);
}

TEST(BenchAgainstFakeServer, UnusableServersAreClearErrors) {
  FakeServer server;
  BenchConfig config = FakeConfig(server);
  std::atomic<bool> stop{false};
  BenchRun run;
  config.model = "nope";
  EXPECT_ERROR_CONTAINS(RunBenchmark(config, stop, RunHooks(), run),
                        "--model nope is not served; GET /v1/models "
                        "lists: fake-model");
  config.model = "";
  server.tokenize_enabled = false;
  const Status no_tokenize = RunBenchmark(config, stop, RunHooks(), run);
  EXPECT_ERROR_CONTAINS(no_tokenize, "POST /tokenize");
  EXPECT_ERROR_CONTAINS(no_tokenize, "HTTP 404");
  EXPECT_EQ(server.generation_requests(), 0);
}

TEST(BenchAgainstFakeServer, AMissingApiKeyOrAShortContextIsRefusedBeforeAnyRequest) {
  FakeServer server;
  BenchConfig config = FakeConfig(server);  // 16 + 5 tokens per request
  std::atomic<bool> stop{false};
  BenchRun run;
  server.require_api_key = true;
  const Status no_key = RunBenchmark(config, stop, RunHooks(), run);
  EXPECT_ERROR_CONTAINS(no_key, "GET /v1/models returned HTTP 401");
  EXPECT_ERROR_CONTAINS(no_key, "missing API key");  // the server's own words
  EXPECT_ERROR_CONTAINS(no_key, "the server requires an API key: pass --api-key KEY or set OPENAI_API_KEY");
  config.api_key = "wrong";
  EXPECT_ERROR_CONTAINS(RunBenchmark(config, stop, RunHooks(), run), "the server refused the API key");
  config.model = "fake-model";  // a --model does not turn the 401 into a guess
  EXPECT_ERROR_CONTAINS(RunBenchmark(config, stop, RunHooks(), run), "HTTP 401");

  server.require_api_key = false;
  server.max_model_len = 20;
  EXPECT_ERROR_CONTAINS(
      RunBenchmark(config, stop, RunHooks(), run),
      "requests need up to 16 + 5 = 21 tokens (prompt + output) but the server's max_model_len is 20");
  EXPECT_EQ(server.generation_requests(), 0);
  server.max_model_len = 21;
  config.prompts_per_level = 1;
  RunOk(config);
  EXPECT_EQ(server.generation_requests(), 1);
}

TEST(BenchAgainstFakeServer, TheServersReasonIsShownWhenEveryRequestFails) {
  FakeServer server([](int64_t, const nlohmann::json&) {
    FakeReply reply;
    reply.http_status = 400;
    reply.error_body = R"({"error":{"message":"temperature must be in [0, 2]","type":"invalid_request_error"}})";
    return reply;
  });
  BenchConfig config = FakeConfig(server);
  config.concurrency = {1, 2};
  config.prompts_per_level = 2;
  config.out_dir = JoinPath(glint::testing::MakeTempDir("bench_all_fail"), "out");
  std::atomic<bool> stop{false};
  std::FILE* table = std::tmpfile();
  const Status status = RunBenchCommand(config, stop, table, nullptr);
  const std::string printed = ReadAll(table);
  std::fclose(table);
  EXPECT_ERROR_CONTAINS(status, "every measured request failed (results written to " + config.out_dir +
                                    "); the first: http_400: HTTP 400: ");
  EXPECT_ERROR_CONTAINS(status, "temperature must be in [0, 2]");
  // Each level's table notes quote its first error.
  EXPECT_NE(printed.find("  c=1: http_400=2\n    first error: http_400: HTTP 400: {\"error\":{\"message\":"
                         "\"temperature must be in [0, 2]\""),
            std::string::npos)
      << printed;
  EXPECT_NE(printed.find("  c=2: http_400=2\n    first error: "), std::string::npos) << printed;
  EXPECT_TRUE(ReadFile(JoinPath(config.out_dir, "results.json")).ok());  // the results are kept
}

TEST(BenchAgainstFakeServer, OneTokenRepliesHaveNoParetoPointAndSaySo) {
  FakeServer server;
  BenchConfig config = FakeConfig(server);
  config.output_len = 1;
  config.out_dir = JoinPath(glint::testing::MakeTempDir("bench_one_token"), "out");
  std::atomic<bool> stop{false};
  std::FILE* table = std::tmpfile();
  EXPECT_ERROR_CONTAINS(RunBenchCommand(config, stop, table, nullptr),
                        "the Pareto plot failed: no level produced a Pareto point (with --output-len 1 there is no "
                        "TPOT, so no interactivity)");
  std::fclose(table);
}

TEST(BenchAgainstFakeServer, ResultFilesArePlottedAndCompared) {
  const std::string root = glint::testing::MakeTempDir("bench_files");
  std::vector<std::string> results;
  for (const char* label : {"first", "second"}) {
    FakeServer server(Steady(0.01, 0.005));
    BenchConfig config = FakeConfig(server);
    config.concurrency = {1, 2};
    config.prompts_per_level = 2;
    config.label = label;
    config.out_dir = JoinPath(root, label);
    std::atomic<bool> stop{false};
    std::FILE* table = std::tmpfile();
    ASSERT_OK(RunBenchCommand(config, stop, table, nullptr));
    const std::string printed = ReadAll(table);
    std::fclose(table);
    EXPECT_NE(printed.find("TTFT p50"), std::string::npos);
    EXPECT_NE(printed.find("plot: "), std::string::npos);
    EXPECT_TRUE(IsPng(JoinPath(config.out_dir, "pareto.png")));
    ASSERT_OK_AND_ASSIGN(std::string csv, ReadFile(JoinPath(config.out_dir, "results.csv")));
    EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);
    ASSERT_OK_AND_ASSIGN(std::string requests, ReadFile(JoinPath(config.out_dir, "requests.csv")));
    EXPECT_EQ(std::count(requests.begin(), requests.end(), '\n'), 5);

    // Consistency of the written figures: tokens counted = usage, throughput = tokens / duration.
    ASSERT_OK_AND_ASSIGN(std::string text, ReadFile(JoinPath(config.out_dir, "results.json")));
    const nlohmann::json json = nlohmann::json::parse(text);
    EXPECT_EQ(json["config"]["label"], label);
    EXPECT_EQ(json["config"]["base_url"], server.base_url());
    for (const nlohmann::json& level : json["levels"]) {
      EXPECT_EQ(level["output_tokens"], level["usage_check"]["usage_completion_tokens"]);
      EXPECT_EQ(level["output_tokens"], 2 * 5);
      EXPECT_NEAR(level["output_throughput"].get<double>() * level["duration_s"].get<double>(),
                  level["output_tokens"].get<double>(), 1e-9);
    }
    results.push_back(JoinPath(config.out_dir, "results.json"));
  }
  std::FILE* table = std::tmpfile();
  ASSERT_OK(RunCompareCommand(results, JoinPath(root, "compare"), table));
  const std::string printed = ReadAll(table);
  std::fclose(table);
  EXPECT_TRUE(IsPng(JoinPath(JoinPath(root, "compare"), "compare.png")));
  EXPECT_NE(printed.find("second"), std::string::npos);
  ASSERT_OK_AND_ASSIGN(std::string data, ReadFile(JoinPath(JoinPath(root, "compare"), "compare.dat")));
  EXPECT_NE(data.find("# first"), std::string::npos);
  EXPECT_NE(data.find("# second"), std::string::npos);
}

}  // namespace
}  // namespace glint::bench
