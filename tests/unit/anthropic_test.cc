// Anthropic's Messages API: the translation into the chat request (both ways), the event sequence of a stream,
// stop reasons, usage, count_tokens, error shapes, keep-alive pings and mid-stream errors, against the scripted
// backend in-process (server_test_util.h). The real SDK and Claude Code are in tests/node/anthropic.test.mjs.
#include <thread>

#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server_test_util.h"

namespace glint::server {
namespace {

struct Event {
  std::string name;  // the `event:` line
  Json data;
};

// An Anthropic SSE body: `event: NAME\ndata: JSON\n\n` each.
std::vector<Event> AnthropicEvents(const std::string& body) {
  std::vector<Event> events;
  size_t at = 0;
  while ((at = body.find("event: ", at)) != std::string::npos) {
    const size_t name_end = body.find('\n', at);
    const size_t data_at = body.find("data: ", name_end);
    const size_t end = body.find("\n\n", data_at);
    events.push_back(
        {body.substr(at + 7, name_end - at - 7), Json::parse(body.substr(data_at + 6, end - data_at - 6))});
    at = end;
  }
  return events;
}

std::vector<std::string> Types(const std::vector<Event>& events) {
  std::vector<std::string> types;
  for (const Event& event : events) {
    EXPECT_EQ(event.name, event.data["type"].get<std::string>()) << "event: names the data's type";
    const Json& delta = event.data.contains("delta") ? event.data["delta"] : Json();
    types.push_back(event.name + (event.data.contains("delta") && delta.contains("type")
                                      ? ":" + delta["type"].get<std::string>()
                                  : event.data.contains("content_block")
                                      ? ":" + event.data["content_block"]["type"].get<std::string>()
                                      : ""));
  }
  return types;
}

const Json kWeatherTool = Json::parse(R"({"name": "get_weather", "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}})");

Json MessagesBody(const std::string& text, int max_tokens = 64) {
  return {{"model", "glm-test"}, {"max_tokens", max_tokens}, {"messages", {{{"role", "user"}, {"content", text}}}}};
}

TEST(MessagesRequest, TranslatesIntoTheChatRequest) {
  const Json body = Json::parse(R"({
    "model": "glm-test", "max_tokens": 100,
    "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.abc; cch=1f2e3;"},
               {"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"}, {"type": "text", "text": "Calling."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true, "content": [{"type": "text", "text": "boom"}]},
        {"type": "text", "text": "And tomorrow?", "cache_control": {"type": "ephemeral"}}]},
      {"role": "system", "content": "Be brief."}],
    "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}},
              {"type": "web_search_20250305", "name": "web_search"}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "thinking": {"type": "enabled", "budget_tokens": 2000}, "output_config": {"effort": "medium"},
    "stop_sequences": ["END"], "temperature": 0.5, "top_k": 5, "metadata": {"user_id": "u"},
    "context_management": {"edits": []}, "stream": false})");
  std::vector<std::string> skipped;
  auto chat = MessagesToChatBody(body, RequestPolicy{}, false, &skipped);
  ASSERT_TRUE(chat.ok()) << chat.error().message;
  const Json& m = chat.value()["messages"];
  ASSERT_EQ(m.size(), 6u) << m.dump();
  EXPECT_EQ(m[0], Json::parse(R"({"role": "system", "content": "You are helpful.\n\nBe brief."})"));
  EXPECT_EQ(m[1], Json::parse(R"({"role": "user", "content": "Hi"})"));
  EXPECT_EQ(m[2]["content"], "Calling.");
  EXPECT_EQ(m[2]["reasoning_content"], "hmm");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["tool_call_id"], "toolu_1");
  EXPECT_EQ(m[4]["content"], Json::parse(R"([{"type": "text", "text": "Error:"}, {"type": "text", "text": "boom"}])"));
  EXPECT_EQ(m[5]["role"], "user");
  EXPECT_EQ(chat.value()["tools"].size(), 1u);
  EXPECT_EQ(skipped, std::vector<std::string>{"web_search (web_search_20250305)"});
  EXPECT_EQ(chat.value()["tool_choice"], "required");
  EXPECT_EQ(chat.value()["chat_template_kwargs"]["enable_thinking"], true);
  EXPECT_EQ(chat.value()["reasoning_effort"], "high");

  auto parsed = ParseMessagesRequest(body.dump(), RequestPolicy{}, false);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const ChatRequest& request = parsed.value().chat;
  EXPECT_EQ(request.tool_choice, ToolChoice::kRequired);
  EXPECT_EQ(request.reasoning_effort, "High");
  EXPECT_EQ(request.fields.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(request.fields.max_tokens, 100);
  EXPECT_TRUE(parsed.value().thinking);
  EXPECT_EQ(request.messages[4]["content"], "Error:\nboom");
}

TEST(MessagesRequest, BillingHeaderLinesAreDropped) {
  EXPECT_EQ(DropBillingHeader("x-anthropic-billing-header: cc_version=1; cch=9;\nYou are Claude Code."),
            "You are Claude Code.");
  EXPECT_EQ(DropBillingHeader("a\nx-anthropic-billing-header: x\nb"), "a\nb");
  EXPECT_EQ(DropBillingHeader("no header"), "no header");
}

TEST(MessagesRequest, RefusesBadInputNamingTheField) {
  RequestPolicy policy;
  policy.max_tools = 4;
  policy.max_content_parts = 8;
  const auto refused = [&](const Json& body, const std::string& param, bool count_tokens = false) {
    auto parsed = ParseMessagesRequest(body.dump(), policy, count_tokens);
    ASSERT_FALSE(parsed.ok()) << body.dump();
    EXPECT_EQ(parsed.error().status, 400);
    EXPECT_EQ(parsed.error().param, param) << parsed.error().message;
  };
  Json body = MessagesBody("hi");
  body.erase("max_tokens");
  refused(body, "max_tokens");
  EXPECT_TRUE(ParseMessagesRequest(body.dump(), policy, /*count_tokens=*/true).ok());
  body = MessagesBody("hi");
  body["messages"][0]["content"] = Json::parse(R"([{"type": "document", "source": {}}])");
  refused(body, "messages[0].content[0]");
  body["messages"][0]["content"] = Json::parse(R"([{"type": "image", "source": {"type": "file", "file_id": "f"}}])");
  refused(body, "messages[0].content[0]");
  body["messages"][0]["content"] = Json::parse(R"([{"text": "no type"}])");
  refused(body, "messages[0].content[0]");
  body["messages"][0]["content"] = Json::array();
  for (int i = 0; i < 9; ++i) body["messages"][0]["content"].push_back({{"type", "text"}, {"text", "x"}});
  refused(body, "messages[0].content");
  body = MessagesBody("hi");
  body["messages"][0]["role"] = "tool";
  refused(body, "messages[0].role");
  body = MessagesBody("hi");
  for (int i = 0; i < 5; ++i) body["tools"].push_back(kWeatherTool);
  refused(body, "tools");
  body = MessagesBody("hi");
  body["tools"] = Json::array({{{"name", "t"}}});
  refused(body, "tools[0].input_schema");
  body = MessagesBody("hi");
  body["tool_choice"] = {{"type", "sometimes"}};
  refused(body, "tool_choice.type");
  body["tool_choice"] = {{"type", "tool"}, {"name", "missing"}};
  refused(body, "tool_choice");
  body = MessagesBody("hi");
  body["thinking"] = {{"type", "always"}};
  refused(body, "thinking.type");
  body = MessagesBody("hi");
  body["max_tokens"] = 0;
  refused(body, "max_tokens");
  body = MessagesBody("hi");
  body["temperature"] = "hot";
  refused(body, "temperature");
  // Deep nesting is refused by the body parser before any translation.
  std::string deep = R"({"max_tokens": 1, "messages": [{"role": "user", "content": )";
  for (int i = 0; i < 100; ++i) deep += "[";
  EXPECT_EQ(ParseMessagesRequest(deep, policy, false).error().status, 400);
}

// Hostile bodies against the default limits: each is refused quickly with a message naming what was too much,
// and a 413 from the transport keeps Anthropic's shape.
TEST(MessagesApi, HostileBodiesGetClearErrorsQuickly) {
  ServerOptions options;
  options.max_body_bytes = size_t{4} << 20;
  TestServer server(options);
  const auto refused = [&](const std::string& body, int status, const std::string& words) {
    const auto start = std::chrono::steady_clock::now();
    HttpReply reply = Exchange(server.port(), "POST", "/v1/messages", body);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(reply.status, status) << reply.body.substr(0, 300);
    const Json error = Json::parse(reply.body, nullptr, false);
    EXPECT_EQ(error["type"], "error") << reply.body.substr(0, 300);
    EXPECT_NE(error["error"]["message"].get<std::string>().find(words), std::string::npos) << reply.body.substr(0, 300);
    EXPECT_LT(seconds, 5.0);
  };
  Json body = MessagesBody("hi");
  for (int i = 0; i < 600; ++i) {
    Json tool = kWeatherTool;
    tool["name"] = StrCat("tool_", i);
    body["tools"].push_back(std::move(tool));
  }
  refused(body.dump(), 400, "at most 512");
  body = MessagesBody("hi");
  body["messages"][0]["content"] = Json::array();
  for (int i = 0; i < 5000; ++i) body["messages"][0]["content"].push_back({{"type", "text"}, {"text", "x"}});
  refused(body.dump(), 400, "content blocks");
  body = MessagesBody("hi");
  for (int i = 0; i < 5000; ++i) body["messages"].push_back({{"role", "user"}, {"content", "x"}});
  refused(body.dump(), 400, "at most 4096");
  std::string deep =
      R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_result", "content": )";
  for (int i = 0; i < 10000; ++i) deep += "[";
  refused(deep, 400, "nest");
  body = MessagesBody("hi");
  body["messages"][0]["content"] = Json::parse(R"([{"type": "text", "text": "a"}, {"type": "mystery_block"}])");
  refused(body.dump(), 400, "mystery_block");
  refused(std::string(size_t{5} << 20, ' '), 413, "");
}

TEST(MessagesApi, CreateReturnsBlocksInOrderWithUsage) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"Let me see.",
                                    "</think>",
                                    "\n",
                                    "Sure",
                                    ".",
                                    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Pa",
                                    "ris</arg_value></tool_call>"};
  });
  Json body = MessagesBody("Weather in Paris?");
  body["tools"] = Json::array({kWeatherTool});
  body["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  const std::vector<std::string> headers = {"anthropic-version: 2023-06-01", "anthropic-beta: interleaved-thinking"};
  HttpReply reply = Post(server.port(), "/v1/messages?beta=true", body, headers);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json message = reply.json();
  EXPECT_EQ(message["type"], "message");
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["id"].get<std::string>().rfind("msg_", 0), 0u);
  ASSERT_EQ(message["content"].size(), 3u) << message.dump();
  EXPECT_EQ(message["content"][0]["type"], "thinking");
  EXPECT_EQ(message["content"][0]["thinking"], "Let me see.");
  EXPECT_FALSE(message["content"][0]["signature"].get<std::string>().empty());
  EXPECT_EQ(message["content"][1], Json::parse(R"({"type": "text", "text": "Sure."})"));
  const Json& call = message["content"][2];
  EXPECT_EQ(call["type"], "tool_use");
  EXPECT_EQ(call["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["input"], Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(message["stop_reason"], "tool_use");
  EXPECT_TRUE(message["stop_sequence"].is_null());
  EXPECT_EQ(message["usage"]["output_tokens"], 7);
  EXPECT_EQ(message["usage"]["cache_read_input_tokens"], 0);
  // count_tokens counts the prompt a create submits.
  body.erase("max_tokens");
  HttpReply counted = Post(server.port(), "/v1/messages/count_tokens?beta=true", body, headers);
  ASSERT_EQ(counted.status, 200) << counted.body;
  EXPECT_EQ(counted.json()["input_tokens"], message["usage"]["input_tokens"]);
  EXPECT_EQ(counted.json()["input_tokens"].get<size_t>(), server.backend().submitted()[0].prompt.size());
}

TEST(MessagesApi, StreamIsTheDocumentedEventSequence) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"Hm",
                                    "m.",
                                    "</think>",
                                    "Sure",
                                    ".",
                                    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Pa",
                                    "ris</arg_value></tool_call>"};
  });
  Json body = MessagesBody("Weather?");
  body["tools"] = Json::array({kWeatherTool});
  body["thinking"] = {{"type", "adaptive"}};
  body["stream"] = true;
  HttpReply reply = Post(server.port(), "/v1/messages", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.header("Content-Type"), "text/event-stream");
  const std::vector<Event> events = AnthropicEvents(reply.body);
  const std::vector<std::string> expected = {"message_start",
                                             "content_block_start:thinking",
                                             "content_block_delta:thinking_delta",
                                             "content_block_delta:thinking_delta",
                                             "content_block_delta:signature_delta",
                                             "content_block_stop",
                                             "content_block_start:text",
                                             "content_block_delta:text_delta",
                                             "content_block_delta:text_delta",
                                             "content_block_stop",
                                             "content_block_start:tool_use",
                                             "content_block_delta:input_json_delta",
                                             "content_block_delta:input_json_delta",
                                             "content_block_stop",
                                             "message_delta",
                                             "message_stop"};
  EXPECT_EQ(Types(events), expected) << reply.body;
  std::string arguments;
  int64_t index = -1;
  for (const Event& event : events) {
    if (event.name == "content_block_start") {
      EXPECT_EQ(event.data["index"], ++index) << "indices are sequential";
    } else if (event.name == "content_block_delta" || event.name == "content_block_stop") {
      EXPECT_EQ(event.data["index"], index);
    }
    if (event.name == "content_block_delta" && event.data["delta"]["type"] == "input_json_delta") {
      arguments += event.data["delta"]["partial_json"].get<std::string>();
    }
  }
  EXPECT_EQ(Json::parse(arguments), Json::parse(R"({"city": "Paris"})"));
  EXPECT_GT(events[0].data["message"]["usage"]["input_tokens"].get<int64_t>(), 0);
  const Json& end = events[events.size() - 2].data;
  EXPECT_EQ(end["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(end["usage"]["output_tokens"], 7);
}

TEST(MessagesApi, StopReasons) {
  TestServer server;
  const auto create = [&](Json body, std::vector<std::string> script) {
    server.backend().set_script([script](const GenerationRequest&, int64_t) { return script; });
    HttpReply reply = Post(server.port(), "/v1/messages", body);
    EXPECT_EQ(reply.status, 200) << reply.body;
    return reply.json();
  };
  Json message = create(MessagesBody("hi"), {"Hello", "."});
  EXPECT_EQ(message["stop_reason"], "end_turn");
  Json body = MessagesBody("hi");
  body["stop_sequences"] = {"END", "STOP"};
  message = create(body, {"Hello ", "STOP", " more"});
  EXPECT_EQ(message["stop_reason"], "stop_sequence");
  EXPECT_EQ(message["stop_sequence"], "STOP");
  EXPECT_EQ(message["content"][0]["text"], "Hello ");
  message = create(MessagesBody("hi", 2), {"a", "b", "c"});
  EXPECT_EQ(message["stop_reason"], "max_tokens");
  // A call cut by max_tokens: stop_reason max_tokens; the stream carried exactly the text written.
  body = MessagesBody("hi", 2);
  body["tools"] = Json::array({kWeatherTool});
  const std::vector<std::string> call = {"<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par", "is",
                                         "</arg_value></tool_call>"};
  message = create(body, call);
  EXPECT_EQ(message["stop_reason"], "max_tokens");
  EXPECT_EQ(message["content"][0]["type"], "tool_use");
  body["stream"] = true;
  server.backend().set_script([call](const GenerationRequest&, int64_t) { return call; });
  HttpReply reply = Post(server.port(), "/v1/messages", body);
  std::string arguments;
  for (const Event& event : AnthropicEvents(reply.body)) {
    if (event.name == "content_block_delta") arguments += event.data["delta"].value("partial_json", "");
  }
  EXPECT_EQ(arguments, R"({"city": "Paris)");
}

TEST(MessagesApi, SeveralCallsInATurnAndCallsWithoutArguments) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"<tool_call>get_time</tool_call>\n<tool_call>get_weather<arg_key>city",
                                    "</arg_key><arg_value>Oslo</arg_value></tool_call>"};
  });
  Json body = MessagesBody("Time and weather?");
  body["tools"] =
      Json::array({kWeatherTool, Json::parse(R"({"name": "get_time", "input_schema": {"type": "object"}})")});
  HttpReply reply = Post(server.port(), "/v1/messages", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json message = reply.json();
  ASSERT_EQ(message["content"].size(), 2u) << message.dump();
  EXPECT_EQ(message["content"][0]["name"], "get_time");
  EXPECT_EQ(message["content"][0]["input"], Json::object());
  EXPECT_EQ(message["content"][1]["input"], Json::parse(R"({"city": "Oslo"})"));
  EXPECT_NE(message["content"][0]["id"], message["content"][1]["id"]);
  EXPECT_EQ(message["stop_reason"], "tool_use");
  body["stream"] = true;
  const std::vector<std::string> types = Types(AnthropicEvents(Post(server.port(), "/v1/messages", body).body));
  EXPECT_EQ(std::count(types.begin(), types.end(), "content_block_start:tool_use"), 2);
  EXPECT_EQ(std::count(types.begin(), types.end(), "content_block_stop"), 2);
}

TEST(MessagesApi, AFullContextIsNotMaxTokens) {
  int64_t prompt_tokens = 0;
  {
    TestServer counter;
    Json body = MessagesBody("hi");
    body.erase("max_tokens");
    prompt_tokens = Post(counter.port(), "/v1/messages/count_tokens", body).json()["input_tokens"];
  }
  TestServer server(ServerOptions{}, /*max_model_len=*/prompt_tokens + 3);
  server.backend().set_script([](const GenerationRequest&, int64_t) { return std::vector<std::string>(10, "x"); });
  // max_tokens beyond the context room is lowered to it, not refused: the context filling up is its own reason.
  HttpReply reply = Post(server.port(), "/v1/messages", MessagesBody("hi", 32000));
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["stop_reason"], "model_context_window_exceeded");
  EXPECT_EQ(reply.json()["usage"]["output_tokens"], 3);
}

TEST(MessagesApi, ErrorsHaveAnthropicsShape) {
  ServerOptions options;
  options.api_key = "sekret";
  TestServer server(options);
  const auto expect_error = [](const HttpReply& reply, int status, const std::string& type) {
    EXPECT_EQ(reply.status, status) << reply.body;
    const Json body = Json::parse(reply.body, nullptr, false);
    EXPECT_EQ(body["type"], "error") << reply.body;
    EXPECT_EQ(body["error"]["type"], type) << reply.body;
    EXPECT_TRUE(body["error"]["message"].is_string()) << reply.body;
  };
  const Json body = MessagesBody("hi");
  expect_error(Post(server.port(), "/v1/messages", body), 401, "authentication_error");
  expect_error(Post(server.port(), "/v1/messages", body, {"x-api-key: wrong"}), 401, "authentication_error");
  EXPECT_EQ(Post(server.port(), "/v1/messages", body, {"x-api-key: sekret"}).status, 200);
  EXPECT_EQ(Post(server.port(), "/v1/messages", body, {"Authorization: Bearer sekret"}).status, 200);
  const std::vector<std::string> key = {"x-api-key: sekret"};
  Json bad = body;
  bad.erase("max_tokens");
  expect_error(Post(server.port(), "/v1/messages", bad, key), 400, "invalid_request_error");
  bad = body;
  bad["model"] = "claude-opus";
  expect_error(Post(server.port(), "/v1/messages", bad, key), 404, "not_found_error");
  expect_error(Exchange(server.port(), "POST", "/v1/messages", "{not json", key), 400, "invalid_request_error");
  expect_error(Exchange(server.port(), "GET", "/v1/messages", "", key), 405, "invalid_request_error");
  expect_error(Post(server.port(), "/v1/messages/count_tokens", bad), 401, "authentication_error");
  // The chat API keeps OpenAI's shape; HEAD / answers without a key.
  EXPECT_TRUE(Post(server.port(), "/v1/chat/completions", UserChat("hi")).json()["error"].is_object());
  EXPECT_EQ(Exchange(server.port(), "HEAD", "/").status, 200);
}

TEST(MessagesApi, PingsDuringAWaitAndAnErrorEventMidStream) {
  ServerOptions options;
  options.stream_keep_alive = std::chrono::milliseconds(20);
  TestServer server(options);
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"Hi", testing::FakeBackend::kFailPiece};
  });
  server.backend().set_paused(true);  // a long prefill: nothing comes for a while
  Json body = MessagesBody("hi");
  body["stream"] = true;
  HttpReply reply;
  std::thread client([&] { reply = Post(server.port(), "/v1/messages", body); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  server.backend().set_paused(false);
  client.join();
  ASSERT_EQ(reply.status, 200);
  const std::vector<std::string> types = Types(AnthropicEvents(reply.body));
  ASSERT_GE(types.size(), 4u) << reply.body;
  EXPECT_EQ(types[0], "message_start");
  EXPECT_EQ(types[1], "ping");
  EXPECT_EQ(types.back(), "error") << reply.body;
  EXPECT_EQ(std::count(types.begin(), types.end(), "message_stop"), 0);
  const std::vector<Event> events = AnthropicEvents(reply.body);
  EXPECT_EQ(events.back().data["error"]["type"], "api_error");
  EXPECT_EQ(events.back().data["error"]["message"], "scripted failure");
}

TEST(MessagesApi, MetricsCountRequestsPerApi) {
  TestServer server;
  ASSERT_EQ(Post(server.port(), "/v1/messages", MessagesBody("hi")).status, 200);
  ASSERT_EQ(Post(server.port(), "/v1/messages", MessagesBody("hi")).status, 200);
  ASSERT_EQ(Post(server.port(), "/v1/chat/completions", UserChat("hi")).status, 200);
  const std::string metrics = Exchange(server.port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("glint_api_requests_total{api=\"messages\"} 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("glint_api_requests_total{api=\"chat\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("glint_api_requests_total{api=\"completions\"} 0"), std::string::npos);
  EXPECT_NE(metrics.find("glint_api_prompt_tokens_cached_total{api=\"messages\"}"), std::string::npos);
}

// The chat API's side of issue 31: a named call cut by max_tokens is the text so far with finish_reason length,
// never a made-up `{}`; arguments stream in fragments as the model writes them.
TEST(ChatToolCalls, ACutCallIsTheTextSoFarAndArgumentsStream) {
  TestServer server;
  const std::vector<std::string> call = {"<arg_key>q</arg_key><arg_value>ca", "ts", "</arg_value></tool_call>"};
  server.backend().set_script([call](const GenerationRequest&, int64_t) { return call; });
  Json request = UserChat("go");
  request["tools"] = Json::parse(R"([{"type": "function", "function": {"name": "search", "parameters":
    {"type": "object", "properties": {"q": {"type": "string"}}}}}])");
  request["tool_choice"] = {{"type", "function"}, {"function", {{"name", "search"}}}};
  request["max_tokens"] = 1;
  HttpReply reply = Post(server.port(), "/v1/chat/completions", request);
  ASSERT_EQ(reply.status, 200) << reply.body;
  Json choice = reply.json()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"q": "ca)");
  request["max_tokens"] = 64;
  request["stream"] = true;
  reply = Post(server.port(), "/v1/chat/completions", request);
  int argument_deltas = 0;
  std::string arguments, finish;
  for (const Json& event : Events(reply.body)) {
    const Json& c = event["choices"][0];
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    if (!c["delta"].contains("tool_calls")) continue;
    for (const Json& delta : c["delta"]["tool_calls"]) {
      const std::string piece = delta["function"]["arguments"];
      if (!piece.empty()) ++argument_deltas;
      arguments += piece;
    }
  }
  EXPECT_EQ(arguments, R"({"q": "cats"})");
  EXPECT_GE(argument_deltas, 3) << "arguments stream as generated, not at the end";
  EXPECT_EQ(finish, "tool_calls");
}

}  // namespace
}  // namespace glint::server
