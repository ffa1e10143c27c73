// The HTTP server in-process, over real sockets, against a scripted backend (fake_backend.h): every endpoint,
// streaming, reasoning and tool-call parsing end to end, errors, limits, access control, disconnects, shutdown.
// The real binary on the tiny model is tested by tests/cli/serve.sh and tests/node/.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "server/chat_prompt.h"
#include "server/generation_session.h"
#include "server_test_util.h"

namespace glint::server {
namespace {

// ---- request parsing and metrics, without HTTP ----

TEST(OpenAiRequest, NormalizesMessagesForTheTemplate) {
  RequestPolicy policy;
  policy.default_sampling.temperature = 0.7f;
  auto parsed = ParseChatRequest(R"({"messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "reasoning": "r",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": [1]}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
    "top_k": -1, "max_tokens": 5, "max_completion_tokens": 7, "stop": "END", "seed": -3})",
                                 policy);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const ChatRequest& chat = parsed.value();
  EXPECT_EQ(chat.messages[0]["role"], "system");
  EXPECT_EQ(chat.messages[1]["content"], "a\nb");
  EXPECT_TRUE(chat.messages[2]["content"].is_null());
  EXPECT_EQ(chat.messages[2]["reasoning_content"], "r");
  EXPECT_EQ(chat.messages[2]["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"x": [1]})"));
  EXPECT_EQ(chat.messages[3]["tool_call_id"], "c1");
  EXPECT_FLOAT_EQ(chat.fields.sampling.temperature, 0.7f);  // the checkpoint's default
  EXPECT_EQ(chat.fields.sampling.top_k, 0);
  EXPECT_EQ(chat.fields.max_tokens, 7);
  EXPECT_EQ(chat.fields.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(chat.fields.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(chat.tool_choice, ToolChoice::kNone);

  auto bad_arguments = ParseChatRequest(
      R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]})",
      policy);
  ASSERT_FALSE(bad_arguments.ok());
  EXPECT_NE(bad_arguments.error().message.find("must be a JSON object"), std::string::npos);
  auto null_fields = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "temperature": null,
      "stop": null, "tools": null, "n": null})",
                                      policy);
  ASSERT_TRUE(null_fields.ok()) << null_fields.error().message;  // null means "not given"
  EXPECT_EQ(null_fields.value().fields.n, 1);
}

TEST(OpenAiRequest, TemplateVariablesPreferRequestFields) {
  ChatRequest chat;
  chat.messages = Json::parse(R"([{"role": "user", "content": "x"}])");
  chat.chat_template_kwargs = {
      {"enable_thinking", false}, {"reasoning_effort", "Low"}, {"add_generation_prompt", false}};
  chat.reasoning_effort = "High";
  const jinja::Object variables = ChatTemplateVariables(chat);
  EXPECT_EQ(variables.Find("reasoning_effort")->as_string(), "High");
  EXPECT_TRUE(variables.Find("add_generation_prompt")->as_bool());
  EXPECT_FALSE(variables.Find("enable_thinking")->as_bool());
  EXPECT_EQ(variables.Find("tools"), nullptr);
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram histogram({1.0, 2.0});
  histogram.Observe(0.5);
  histogram.Observe(1.0);
  histogram.Observe(1.5);
  histogram.Observe(5.0);
  std::string out;
  histogram.Render("h", "m=\"x\"", out);
  EXPECT_EQ(out,
            "h_bucket{m=\"x\",le=\"1\"} 2\nh_bucket{m=\"x\",le=\"2\"} 3\nh_bucket{m=\"x\",le=\"+Inf\"} 4\n"
            "h_sum{m=\"x\"} 8\nh_count{m=\"x\"} 4\n");
}

// The speculative-decoding counters come from the engine (glint_ and vllm: series alike, one sample per draft
// position); with speculation off they are 0 and position 0 is still there.
TEST(Metrics, SpeculativeDecodingCountersComeFromTheBackend) {
  ServerMetrics metrics;
  BackendMetrics backend;
  backend.spec_drafts = 40;
  backend.spec_draft_tokens = 40;
  backend.spec_accepted_tokens = 27;
  backend.spec_accepted_per_position = {27};
  const std::string out = metrics.Render(backend, "m");
  for (const char* line :
       {"glint_spec_decode_num_drafts_total 40\n", "glint_spec_decode_num_draft_tokens_total 40\n",
        "glint_spec_decode_num_accepted_tokens_total 27\n",
        "glint_spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 27\n",
        "vllm:spec_decode_num_drafts_total{model_name=\"m\"} 40\n",
        "vllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 40\n",
        "vllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 27\n",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 27\n"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line;
  }
  const std::string off = metrics.Render(BackendMetrics{}, "m");
  EXPECT_NE(off.find("vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 0\n"),
            std::string::npos);
  EXPECT_NE(off.find("glint_spec_decode_num_drafts_total 0\n"), std::string::npos);
}

// ---- the plain endpoints ----

// A client end that renders /metrics at the moment [DONE] is written, as a client that scrapes /metrics right
// after reading [DONE] would see it.
class MetricsAtDoneConnection final : public ClientConnection {
 public:
  explicit MetricsAtDoneConnection(const ServerMetrics& metrics) : metrics_(metrics) {}
  bool Write(std::string_view data) override {
    if (data.find("data: [DONE]") != std::string_view::npos) metrics_at_done = metrics_.Render({}, "m");
    written += data;
    return true;
  }
  bool Alive() override { return true; }

  std::string written;
  std::string metrics_at_done;

 private:
  const ServerMetrics& metrics_;
};

TEST(GenerationSession, AStreamIsCountedInTheMetricsBeforeItsDone) {
  FakeBackend backend;
  backend.set_script([](const GenerationRequest&, int64_t) { return std::vector<std::string>(5, "word "); });
  InFlightRegistry registry(8);
  ServerMetrics metrics;
  GenerationSession session(backend, registry, &metrics,
                            MakeCompletionFormatter({"cmpl-test", 0, "m"}, 1, 1, {}, TestTokenizer()),
                            GenerationSession::Clock::now());
  GenerationRequest request;
  request.prompt = {5, 6, 7};
  request.max_tokens = 3;
  std::vector<GenerationRequest> requests;
  requests.push_back(std::move(request));
  ASSERT_FALSE(session.Submit(std::move(requests)).has_value());
  MetricsAtDoneConnection connection(metrics);
  ASSERT_TRUE(session.Stream(connection, /*include_usage=*/true));
  ASSERT_NE(connection.written.find("data: [DONE]"), std::string::npos);
  EXPECT_NE(connection.metrics_at_done.find("\nglint_generation_tokens_total 3\n"), std::string::npos)
      << connection.metrics_at_done;
  EXPECT_NE(connection.metrics_at_done.find("\nglint_prompt_tokens_total 3\n"), std::string::npos);
  EXPECT_NE(connection.metrics_at_done.find("glint_request_success_total{finish_reason=\"length\"} 1\n"),
            std::string::npos);
}

// Issue 37: /health says what a request would meet. Damaged weights (a mapped container that shrank, an extent that
// failed its checksum) are a 503 for good; an engine whose current step has run past --health-stall-seconds with
// requests queued is a 503 "stalled" (before, /health said ok while every request hung). A long step with nothing
// queued is not a stall.
TEST(Server, HealthReportsDamagedWeightsAndAStalledEngine) {
  ServerOptions options;
  options.health_stall_seconds = 5;
  TestServer server(options);
  server.backend().set_health({DataLoss("'model.glint' extent 'x' does not match its checksum"), 0, 0});
  HttpReply health = Exchange(server.port(), "GET", "/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.json()["status"], "damaged");
  EXPECT_NE(health.json()["reason"].get<std::string>().find("does not match its checksum"), std::string::npos);
  server.backend().set_health({Status::Ok(), 6.5, 3});
  health = Exchange(server.port(), "GET", "/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(health.json()["status"], "stalled");
  EXPECT_NE(health.json()["reason"].get<std::string>().find("no progress for 6 s"), std::string::npos) << health.body;
  EXPECT_NE(health.json()["reason"].get<std::string>().find("3 requests"), std::string::npos) << health.body;
  server.backend().set_health({Status::Ok(), 6.5, 0});  // nothing queued: not a stall
  EXPECT_EQ(Exchange(server.port(), "GET", "/health").status, 200);
  server.backend().set_health({Status::Ok(), 4.0, 3});  // under the limit
  EXPECT_EQ(Exchange(server.port(), "GET", "/health").status, 200);
}

// Issue 37: a refusal that is the server's fault (damaged weights, a stopping engine) is a 503 naming the cause, not
// a 400 that tells the client to change its request; the client's own faults stay 400.
TEST(Server, ServerFaultRefusalsAre503ClientFaultsStay400) {
  TestServer server;
  for (const Status& fault :
       {IoError("the file 'model.glint' changed under the running process"),
        DataLoss("'model.glint' tensor 'embed' does not match its checksum"), Unavailable("the engine is stopping")}) {
    server.backend().set_submit_error(fault);
    const HttpReply reply = Post(server.port(), "/v1/chat/completions", UserChat("hi"));
    EXPECT_EQ(reply.status, 503) << fault.ToString();
    EXPECT_NE(reply.body.find(fault.message()), std::string::npos) << reply.body;
  }
  server.backend().set_submit_error(InvalidArgument("max_tokens is 0; expected at least 1"));
  EXPECT_EQ(Post(server.port(), "/v1/chat/completions", UserChat("hi")).status, 400);
}

TEST(Server, HealthModelsMetrics) {
  TestServer server;
  HttpReply health = Exchange(server.port(), "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json()["status"], "ok");
  HttpReply models = Exchange(server.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json()["object"], "list");
  EXPECT_EQ(models.json()["data"][0]["id"], "glm-test");
  EXPECT_EQ(models.json()["data"][0]["max_model_len"], 4096);
  HttpReply metrics = Exchange(server.port(), "GET", "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.header("Content-Type").find("text/plain"), std::string::npos);
  for (const char* name :
       {"glint_requests_running 0", "vllm:num_requests_running{model_name=\"glm-test\"} 0",
        "vllm:spec_decode_num_drafts_total{model_name=\"glm-test\"} 0",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"glm-test\",position=\"0\"} 0",
        "glint_kv_blocks_used 0", "# TYPE vllm:time_to_first_token_seconds histogram",
        "glint_http_requests_total{endpoint=\"/health\",status=\"200\"} 1"}) {
    EXPECT_NE(metrics.body.find(name), std::string::npos) << name;
  }
  // The scrape's own connection is open (earlier ones may still be closing).
  const size_t active = metrics.body.find("\nglint_http_connections_active ");
  ASSERT_NE(active, std::string::npos);
  EXPECT_GE(std::stoi(metrics.body.substr(active + 31)), 1);
}

TEST(Server, TokenizeAndDetokenize) {
  TestServer server;
  HttpReply reply = Post(server.port(), "/tokenize", {{"prompt", "hello world"}, {"return_token_strs", true}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json tokens = reply.json()["tokens"];
  EXPECT_EQ(tokens, Json(*TestTokenizer().Encode("hello world")));
  EXPECT_EQ(reply.json()["count"], tokens.size());
  EXPECT_EQ(reply.json()["token_strs"].size(), tokens.size());
  HttpReply back = Post(server.port(), "/detokenize", {{"tokens", tokens}});
  ASSERT_EQ(back.status, 200);
  EXPECT_EQ(back.json()["prompt"], "hello world");

  Json chat = UserChat("Hi");
  chat["add_generation_prompt"] = true;
  reply = Post(server.port(), "/tokenize", chat);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(TestTokenizer().Decode(reply.json()["tokens"].get<std::vector<int32_t>>()),
            "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi<|assistant|><think>");

  EXPECT_EQ(Post(server.port(), "/detokenize", {{"tokens", {1, 999999}}}).status, 400);
  EXPECT_EQ(Post(server.port(), "/tokenize", Json::object()).status, 400);
}

// ---- chat ----

TEST(Server, ChatSplitsReasoningAndCountsUsage) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"Let me ", "think.", "</th", "ink>", "Hello", " there", "!"};
  });
  HttpReply reply = Post(server.port(), "/v1/chat/completions", UserChat("Hi"));
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json body = reply.json();
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "glm-test");
  EXPECT_EQ(body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const Json& message = body["choices"][0]["message"];
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["reasoning_content"], "Let me think.");
  EXPECT_EQ(message["content"], "Hello there!");
  EXPECT_FALSE(message.contains("tool_calls"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  const int64_t prompt_tokens = static_cast<int64_t>(
      TestTokenizer().Encode("[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Hi<|assistant|><think>")->size());
  EXPECT_EQ(body["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(body["usage"]["completion_tokens"], 7);
  EXPECT_EQ(body["usage"]["total_tokens"], prompt_tokens + 7);
  // What reached the backend: the rendered prompt's tokens, special tokens kept in the output text.
  const auto submitted = server.backend().submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_FALSE(submitted[0].skip_special_tokens);
  EXPECT_EQ(static_cast<int64_t>(submitted[0].prompt.size()), prompt_tokens);
}

TEST(Server, ChatStreamsDeltasAndUsage) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"hm", "</think>", "Hel", "lo"};
  });
  Json request = UserChat("Hi");
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  HttpReply reply = Post(server.port(), "/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_NE(reply.header("Content-Type").find("text/event-stream"), std::string::npos);
  bool done = false;
  const std::vector<Json> events = Events(reply.body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string reasoning, content, finish;
  for (const Json& event : events) {
    if (event["choices"].empty()) continue;
    const Json& delta = event["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!event["choices"][0]["finish_reason"].is_null()) finish = event["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(reasoning, "hm");
  EXPECT_EQ(content, "Hello");
  EXPECT_EQ(finish, "stop");
  const Json& last = events.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 4);
}

TEST(Server, ChatToolCallsStreamedAndWhole) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"Need weather.",
                                    "</think>",
                                    "<tool_call>get_",
                                    "weather<arg_key>city",
                                    "</arg_key><arg_value>Par",
                                    "is</arg_value><arg_key>days</arg_key><arg_value>3",
                                    "</arg_value></tool_call>"};
  });
  Json request = UserChat("Weather in Paris?");
  request["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");
  HttpReply reply = Post(server.port(), "/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json choice = reply.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(choice["message"]["reasoning_content"], "Need weather.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const Json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris", "days": 3})"));
  // The tools were rendered into the prompt.
  const std::string prompt = TestTokenizer().Decode(server.backend().submitted()[0].prompt);
  EXPECT_NE(prompt.find("<tools>"), std::string::npos);
  EXPECT_NE(prompt.find("\"get_weather\""), std::string::npos);

  request["stream"] = true;
  reply = Post(server.port(), "/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200);
  std::string name, arguments, id, finish;
  int name_deltas = 0;
  for (const Json& event : Events(reply.body)) {
    const Json& c = event["choices"][0];
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    if (!c["delta"].contains("tool_calls")) continue;
    for (const Json& delta : c["delta"]["tool_calls"]) {
      EXPECT_EQ(delta["index"], 0);
      if (delta.contains("id")) {
        id = delta["id"];
        name += delta["function"]["name"].get<std::string>();
        ++name_deltas;
      }
      arguments += delta["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(name_deltas, 1);
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(Json::parse(arguments), Json::parse(R"({"city": "Paris", "days": 3})"));
  EXPECT_EQ(finish, "tool_calls");
}

TEST(Server, ToolChoiceNoneRequiredAndNamed) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"<arg_key>q</arg_key><arg_value>x</arg_value></tool_call>"};
  });
  Json request = UserChat("go");
  request["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "search"}},
                                     {"type": "function", "function": {"name": "other"}}])");
  request["tool_choice"] = {{"type", "function"}, {"function", {{"name", "search"}}}};
  HttpReply reply = Post(server.port(), "/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json call = reply.json()["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "search");
  EXPECT_EQ(call["function"]["arguments"], R"({"q": "x"})");
  std::string prompt = TestTokenizer().Decode(server.backend().submitted().back().prompt);
  EXPECT_TRUE(prompt.ends_with("<|assistant|><think></think><tool_call>search")) << prompt;

  request["tool_choice"] = "required";
  server.backend().set_script(
      [](const GenerationRequest&, int64_t) { return std::vector<std::string>{"other</tool_call>"}; });
  reply = Post(server.port(), "/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "other");
  prompt = TestTokenizer().Decode(server.backend().submitted().back().prompt);
  EXPECT_TRUE(prompt.ends_with("<|assistant|><think></think><tool_call>")) << prompt;

  request["tool_choice"] = "none";  // tools rendered, calls left as text
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"</think><tool_call>search</tool_call>"};
  });
  reply = Post(server.port(), "/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.json()["choices"][0]["message"]["content"], "<tool_call>search</tool_call>");
  EXPECT_EQ(reply.json()["choices"][0]["finish_reason"], "stop");

  request["tool_choice"] = {{"type", "function"}, {"function", {{"name", "missing"}}}};
  reply = Post(server.port(), "/v1/chat/completions", request);
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.json()["error"]["param"], "tool_choice");
}

TEST(Server, SeveralChoicesLogprobsAndStops) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t index) {
    return std::vector<std::string>{"</think>", "choice ", std::to_string(index), " END more"};
  });
  Json request = UserChat("Hi");
  request["n"] = 3;
  request["logprobs"] = true;
  request["top_logprobs"] = 2;
  request["stop"] = "END";
  HttpReply reply = Post(server.port(), "/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json body = reply.json();
  ASSERT_EQ(body["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Json& choice = body["choices"][i];
    EXPECT_EQ(choice["index"], i);
    EXPECT_EQ(choice["message"]["content"], "choice " + std::to_string(i) + " ");
    EXPECT_EQ(choice["finish_reason"], "stop");
    const Json& content = choice["logprobs"]["content"];
    ASSERT_EQ(content.size(), 4u);
    EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.25f);
    EXPECT_TRUE(content[0]["token"].is_string());
    EXPECT_TRUE(content[0]["bytes"].is_array());
    EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  }
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);
  const GenerationRequest sent = server.backend().submitted().back();
  EXPECT_EQ(sent.n, 3);
  EXPECT_EQ(sent.logprobs, 2);
  EXPECT_EQ(sent.stop_strings, std::vector<std::string>{"END"});
}

TEST(Server, SamplingFieldsReachTheBackend) {
  TestServer server;
  Json request = UserChat("Hi");
  request.update(Json::parse(R"({"temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.1, "seed": 7,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "max_completion_tokens": 9,
    "stop_token_ids": [5, 6], "ignore_eos": true, "unknown_field": {"is": "ignored"}})"));
  ASSERT_EQ(Post(server.port(), "/v1/chat/completions", request).status, 200);
  const GenerationRequest sent = server.backend().submitted().back();
  EXPECT_FLOAT_EQ(sent.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(sent.sampling.top_p, 0.9f);
  EXPECT_EQ(sent.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(sent.sampling.min_p, 0.1f);
  EXPECT_EQ(sent.sampling.seed, 7u);
  EXPECT_FLOAT_EQ(sent.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(sent.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(sent.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(sent.max_tokens, 9);
  EXPECT_EQ(sent.stop_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(sent.ignore_eos);
}

// ---- completions ----

TEST(Server, CompletionsTextEchoLogprobsAndPromptLists) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest& request, int64_t) {
    return std::vector<std::string>{" A", "B", "C"};
  });
  HttpReply reply = Post(server.port(), "/v1/completions",
                         {{"prompt", "Once"}, {"echo", true}, {"max_tokens", 2}, {"model", "alias"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  Json body = reply.json();
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "Once AB");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
  EXPECT_TRUE(server.backend().submitted().back().skip_special_tokens);

  reply = Post(server.port(), "/v1/completions", {{"prompt", {"one", "two"}}, {"n", 2}, {"logprobs", 1}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  body = reply.json();
  ASSERT_EQ(body["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(body["choices"][i]["index"], i);
    EXPECT_EQ(body["choices"][i]["text"], " ABC");
    const Json& logprobs = body["choices"][i]["logprobs"];
    EXPECT_EQ(logprobs["tokens"].size(), 3u);
    EXPECT_EQ(logprobs["token_logprobs"].size(), 3u);
    EXPECT_EQ(logprobs["top_logprobs"][0].size(), 2u);  // the chosen token and the top 1
    EXPECT_EQ(logprobs["text_offset"], Json::parse("[0, 2, 3]"));
  }
  const int64_t expected_prompt =
      static_cast<int64_t>(TestTokenizer().Encode("one")->size() + TestTokenizer().Encode("two")->size());
  EXPECT_EQ(body["usage"]["prompt_tokens"], expected_prompt);
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);

  reply = Post(server.port(), "/v1/completions",
               {{"prompt", {5, 6, 7}}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(reply.status, 200);
  bool done = false;
  std::string text;
  for (const Json& event : Events(reply.body, &done)) {
    EXPECT_EQ(event["object"], "text_completion");
    if (!event["choices"].empty()) text += event["choices"][0]["text"].get<std::string>();
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(text, " ABC");
  EXPECT_EQ(server.backend().submitted().back().prompt, (std::vector<int32_t>{5, 6, 7}));
}

// ---- errors ----

void ExpectError(const HttpReply& reply, int status, const std::string& message_part, const std::string& param = "") {
  EXPECT_EQ(reply.status, status) << reply.body;
  const Json body = Json::parse(reply.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << reply.body;
  ASSERT_TRUE(body.contains("error")) << reply.body;
  const Json& error = body["error"];
  for (const char* key : {"message", "type", "param", "code"}) EXPECT_TRUE(error.contains(key)) << key;
  EXPECT_NE(error["message"].get<std::string>().find(message_part), std::string::npos) << reply.body;
  if (!param.empty()) {
    EXPECT_EQ(error["param"], param);
  }
}

TEST(Server, ErrorsAreOpenAiShaped) {
  TestServer server(ServerOptions{}, /*max_model_len=*/64);
  const int port = server.port();
  ExpectError(Exchange(port, "POST", "/v1/chat/completions", "{not json"), 400, "not valid JSON");
  ExpectError(Exchange(port, "POST", "/v1/chat/completions", "[1, 2]"), 400, "must be a JSON object");
  ExpectError(Exchange(port, "POST", "/v1/chat/completions", "{\"messages\": \"\xff\xfe\"}"), 400, "UTF-8");
  ExpectError(Exchange(port, "POST", "/v1/chat/completions", std::string(100, '[') + std::string(100, ']')), 400,
              "nested more than");
  ExpectError(Post(port, "/v1/chat/completions", Json::object()), 400, "'messages' is required", "messages");
  ExpectError(Post(port, "/v1/chat/completions", {{"messages", Json::array()}}), 400, "must not be empty");
  Json bad = UserChat("x");
  bad["temperature"] = "hot";
  ExpectError(Post(port, "/v1/chat/completions", bad), 400, "must be a number", "temperature");
  bad = UserChat("x");
  bad["temperature"] = 3;
  ExpectError(Post(port, "/v1/chat/completions", bad), 400, "must be in [0, 2]", "temperature");
  bad = UserChat("x");
  bad["n"] = 0;
  ExpectError(Post(port, "/v1/chat/completions", bad), 400, "'n'", "n");
  bad = UserChat("x");
  bad["max_tokens"] = 1.5;
  ExpectError(Post(port, "/v1/chat/completions", bad), 400, "must be an integer", "max_tokens");
  bad = UserChat("x");
  bad["stream_options"] = {{"include_usage", true}};
  ExpectError(Post(port, "/v1/chat/completions", bad), 400, "only allowed when 'stream' is true");
  bad = {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}};
  ExpectError(Post(port, "/v1/chat/completions", bad), 400, "must be system, developer, user", "messages[0].role");
  bad = {{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}};
  ExpectError(Post(port, "/v1/chat/completions", bad), 400, "must be {\"url\"", "messages[0].content[0]");
  bad = {{"messages", {{{"role", "user"}, {"content", {{{"type", "input_audio"}}}}}}}};
  ExpectError(Post(port, "/v1/chat/completions", bad), 400, "glint takes text and image_url parts");
  bad = UserChat("x");
  bad["reasoning_effort"] = "medium";
  ExpectError(Post(port, "/v1/chat/completions", bad), 400, "low, high or max", "reasoning_effort");
  bad = UserChat("x");
  bad["response_format"] = {{"type", "json_schema"}};
  ExpectError(Post(port, "/v1/chat/completions", bad), 400, "must be an object with a 'schema'", "response_format");
  bad = UserChat("x");
  bad["model"] = "gpt-4";
  HttpReply unknown_model = Post(port, "/v1/chat/completions", bad);
  ExpectError(unknown_model, 404, "does not exist", "model");
  EXPECT_EQ(unknown_model.json()["error"]["code"], "model_not_found");
  HttpReply too_long = Post(port, "/v1/chat/completions", UserChat(std::string(400, 'x') + " words words"));
  ExpectError(too_long, 400, "context");
  EXPECT_EQ(too_long.json()["error"]["code"], "context_length_exceeded");
  ExpectError(Post(port, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 100}}), 400, "exceeds", "max_tokens");
  ExpectError(Post(port, "/v1/completions", {{"prompt", {1, 2, 100000}}}), 400, "prompt[2]");
  ExpectError(Post(port, "/v1/completions", {{"prompt", 5}}), 400, "'prompt' must be");
  ExpectError(Post(port, "/v1/completions", {{"prompt", "x"}, {"suffix", "y"}}), 400, "not supported");
  ExpectError(Exchange(port, "GET", "/v1/nothing"), 404, "no such endpoint");
  HttpReply wrong_method = Exchange(port, "GET", "/v1/chat/completions");
  ExpectError(wrong_method, 405, "use POST");
  EXPECT_EQ(wrong_method.header("Allow"), "POST");
  // The server is still up.
  EXPECT_EQ(Exchange(port, "GET", "/health").status, 200);
}

TEST(Server, BodyAndHeaderLimits) {
  ServerOptions options;
  options.max_body_bytes = 1000;
  options.max_header_bytes = 2000;
  TestServer server(options);
  ExpectError(Exchange(server.port(), "POST", "/v1/completions", std::string(5000, ' ')), 413, "too large");
  std::vector<std::string> headers;
  for (int i = 0; i < 10; ++i) headers.push_back("X-Filler-" + std::to_string(i) + ": " + std::string(500, 'a'));
  ExpectError(Exchange(server.port(), "GET", "/v1/models", "", headers), 431, "headers are");
  EXPECT_EQ(Exchange(server.port(), "GET", "/health").status, 200);
}

TEST(Server, ApiKeyGuardsEverythingButHealth) {
  ServerOptions options;
  options.api_key = "sk-secret";
  TestServer server(options);
  EXPECT_EQ(Exchange(server.port(), "GET", "/health").status, 200);
  for (const char* path : {"/v1/models", "/metrics"}) {
    HttpReply missing = Exchange(server.port(), "GET", path);
    ExpectError(missing, 401, "missing API key");
    EXPECT_EQ(missing.json()["error"]["type"], "authentication_error");
    ExpectError(Exchange(server.port(), "GET", path, "", {"Authorization: Bearer sk-wrong"}), 401, "invalid API key");
    ExpectError(Exchange(server.port(), "GET", path, "", {"Authorization: Bearer sk-secretX"}), 401, "invalid");
    ExpectError(Exchange(server.port(), "GET", path, "", {"Authorization: sk-secret"}), 401, "missing");
    EXPECT_EQ(Exchange(server.port(), "GET", path, "", {"Authorization: Bearer sk-secret"}).status, 200);
  }
  ExpectError(Post(server.port(), "/v1/chat/completions", UserChat("x")), 401, "API key");
  EXPECT_EQ(Post(server.port(), "/v1/chat/completions", UserChat("x"), {"Authorization: Bearer sk-secret"}).status,
            200);
  EXPECT_TRUE(server.backend().submitted().size() == 1);  // the refused request never reached the backend
}

TEST(Server, ConstantTimeEqualsIsEquality) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), "a"));
}

TEST(Server, CorsOnlyWhenEnabled) {
  {
    TestServer server;
    HttpReply reply = Exchange(server.port(), "GET", "/v1/models", "", {"Origin: https://example.com"});
    EXPECT_EQ(reply.header("Access-Control-Allow-Origin"), "");
    EXPECT_EQ(Exchange(server.port(), "OPTIONS", "/v1/models", "", {"Origin: https://example.com"}).status, 405);
  }
  ServerOptions options;
  options.allowed_origins = {"https://example.com"};
  TestServer server(options);
  HttpReply reply = Exchange(server.port(), "GET", "/v1/models", "", {"Origin: https://example.com"});
  EXPECT_EQ(reply.header("Access-Control-Allow-Origin"), "https://example.com");
  HttpReply preflight = Exchange(server.port(), "OPTIONS", "/v1/chat/completions", "", {"Origin: https://example.com"});
  EXPECT_EQ(preflight.status, 204);
  EXPECT_NE(preflight.header("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
  EXPECT_EQ(Exchange(server.port(), "GET", "/v1/models", "", {"Origin: https://evil.example"})
                .header("Access-Control-Allow-Origin"),
            "");
}

// ---- load, disconnects, shutdown ----

TEST(Server, QueueBoundGives429WithRetryAfter) {
  ServerOptions options;
  options.max_queued_sequences = 2;  // + 4 running = 6 sequences at once
  TestServer server(options);
  server.backend().set_paused(true);
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&] {
      Json request = UserChat("x");
      request["n"] = 2;
      if (Post(server.port(), "/v1/chat/completions", request).status == 200) ++ok;
    });
  }
  // Wait until the 6 sequences are in.
  for (int i = 0; i < 500 && server.backend().submitted().size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server.backend().submitted().size(), 3u);
  HttpReply refused = Post(server.port(), "/v1/chat/completions", UserChat("x"));
  ExpectError(refused, 429, "busy");
  EXPECT_EQ(refused.header("Retry-After"), "1");
  server.backend().set_paused(false);
  for (auto& client : clients) client.join();
  EXPECT_EQ(ok.load(), 3);
  EXPECT_EQ(Post(server.port(), "/v1/chat/completions", UserChat("x")).status, 200);
  HttpReply metrics = Exchange(server.port(), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("glint_requests_rejected_total 1"), std::string::npos);
}

TEST(Server, ConnectionsBeyondTheLimitGet503) {
  ServerOptions options;
  options.max_connections = 2;  // 2 open; a 3rd is answered 503 at once, before it sends anything
  TestServer server(options);
  std::vector<int> idle;
  for (int i = 0; i < 2; ++i) idle.push_back(Connect(server.port()));  // connected, silent
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  HttpReply refused = Exchange(server.port(), "GET", "/v1/models");
  ExpectError(refused, 503, "too many connections");
  EXPECT_EQ(refused.header("Connection"), "close");
  for (int fd : idle) close(fd);
  bool served = false;
  for (int i = 0; i < 200 && !served; ++i) {
    served = Exchange(server.port(), "GET", "/health").status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(served);
}

TEST(Server, StreamingClientThatLeavesCancelsItsRequest) {
  TestServer server;
  server.backend().set_script(
      [](const GenerationRequest&, int64_t) { return std::vector<std::string>(100000, "word "); });
  Json request = UserChat("Hi");
  request["stream"] = true;
  const int fd = Connect(server.port());
  SendAll(fd, RequestText("POST", "/v1/chat/completions", request.dump()));
  std::string received;
  char buffer[4096];
  while (received.find("word") == std::string::npos) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    ASSERT_GT(n, 0);
    received.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  EXPECT_TRUE(server.backend().WaitIdle(std::chrono::seconds(5)));
  EXPECT_EQ(server.backend().cancelled().size(), 1u);
  HttpReply metrics = Exchange(server.port(), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("glint_server_requests_in_flight 0"), std::string::npos);
  EXPECT_NE(metrics.body.find("glint_request_success_total{finish_reason=\"abort\"} 1"), std::string::npos);
}

TEST(Server, WaitingClientThatLeavesCancelsItsRequest) {
  TestServer server;
  server.backend().set_paused(true);  // the request waits (as behind a long prefill); nothing is written
  const int fd = Connect(server.port());
  SendAll(fd, RequestText("POST", "/v1/chat/completions", UserChat("Hi").dump()));
  for (int i = 0; i < 500 && server.backend().submitted().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server.backend().submitted().size(), 1u);
  close(fd);
  for (int i = 0; i < 400 && server.backend().cancelled().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(server.backend().cancelled().size(), 1u);
  EXPECT_TRUE(server.backend().WaitIdle(std::chrono::seconds(5)));
}

TEST(Server, ManyConcurrentStreamsAllComplete) {
  TestServer server(ServerOptions{}, 4096, /*max_running=*/8);
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"</think>", "a", "b", "c", "d"};
  });
  constexpr int kClients = 64;
  std::vector<std::thread> clients;
  std::atomic<int> good{0};
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      Json request = UserChat("Hi");
      request["stream"] = true;
      request["stream_options"] = {{"include_usage", true}};
      HttpReply reply = Post(server.port(), "/v1/chat/completions", request);
      bool done = false;
      const std::vector<Json> events = Events(reply.body, &done);
      if (reply.status == 200 && done && !events.empty() && events.back()["usage"]["completion_tokens"] == 5) ++good;
    });
  }
  for (auto& client : clients) client.join();
  EXPECT_EQ(good.load(), kClients);
}

TEST(Server, ShutdownFinishesInFlightRequestsThenStops) {
  auto server = std::make_unique<TestServer>();
  server->backend().set_script([](const GenerationRequest&, int64_t) { return std::vector<std::string>(20, "x"); });
  std::atomic<int> status{0};
  std::thread client([&] { status = Post(server->port(), "/v1/chat/completions", UserChat("Hi")).status; });
  for (int i = 0; i < 500 && server->backend().submitted().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const int port = server->port();
  server->Stop();  // returns once every connection is closed
  client.join();
  EXPECT_EQ(status.load(), 200);
  EXPECT_OK(server->run_status());
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  EXPECT_NE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);  // no longer listening
  close(fd);
}

TEST(Server, ShutdownCancelsRequestsThatOutlastTheGrace) {
  auto server = std::make_unique<TestServer>();
  server->backend().set_paused(true);
  std::atomic<int> status{0};
  std::string body;
  std::thread client([&] {
    HttpReply reply = Post(server->port(), "/v1/chat/completions", UserChat("Hi"));
    status = reply.status;
  });
  for (int i = 0; i < 500 && server->backend().submitted().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  server->Stop();  // grace is 2 s in TestServer, then the request is cancelled
  client.join();
  EXPECT_EQ(server->backend().cancelled().size(), 1u);
  EXPECT_EQ(status.load(), 503);  // answered: cancelled by the shutdown
}

// Issue 37 item 8: grammars whose parses multiply after the first byte compiled, then every request ended with a
// 500 blaming the tokenizer. Now they are a 400 at compile time naming the matcher's limit.
TEST(Server, ATooAmbiguousGrammarIs400NamingTheLimit) {
  TestServer server;
  const auto schema = [](const std::string& pattern) {
    Json body = UserChat("x");
    body["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", "s"}, {"schema", {{"type", "string"}, {"pattern", pattern}}}}}};
    return body;
  };
  for (const std::string pattern : {"^((a*){0,300})$", "^((a{0,99}){0,99}){0,99}$"}) {
    const HttpReply reply = Post(server.port(), "/v1/chat/completions", schema(pattern));
    EXPECT_EQ(reply.status, 400) << pattern << ": " << reply.body;
    EXPECT_NE(reply.body.find("too ambiguous to follow"), std::string::npos) << reply.body;
    EXPECT_NE(reply.body.find("more than 256 parses"), std::string::npos) << reply.body;
  }
  std::string gbnf = "root ::=";
  for (int i = 0; i < 400; ++i) gbnf += " (\"a\" | \"b\" | \"c\" | \"d\" | \"e\" | \"f\" | \"g\" | \"a\")?";
  Json body = UserChat("x");
  body["guided_grammar"] = gbnf;
  const HttpReply reply = Post(server.port(), "/v1/chat/completions", body);
  EXPECT_EQ(reply.status, 400) << reply.body;
  EXPECT_NE(reply.body.find("too ambiguous to follow"), std::string::npos) << reply.body;
  EXPECT_TRUE(server.backend().submitted().empty());
  // An ordinary pattern still compiles and runs.
  EXPECT_EQ(Post(server.port(), "/v1/chat/completions", schema("^[a-z]{1,8}$")).status, 200);
}

}  // namespace
}  // namespace glint::server
