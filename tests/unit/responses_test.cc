// The OpenAI Responses API (docs/server.md "Responses API"): the request's translation into the chat request,
// the output items and the event stream back, the stored responses and their bounds, and hostile inputs. The
// server runs in process against the scripted backend (fake_backend.h).
#include <gtest/gtest.h>

#include "server/responses_request.h"
#include "server/responses_store.h"
#include "server_test_util.h"

namespace glint::server {
namespace {

const std::string kCity = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>";

Json WeatherTool() {
  return {{"type", "function"},
          {"name", "get_weather"},
          {"description", "the weather"},
          {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}},
          {"strict", false}};
}

ApiOr<ChatRequest> Translate(const Json& body, const Json* previous = nullptr) {
  RequestPolicy policy;
  policy.vocab_size = 2048;
  auto parsed = ParseResponsesRequest(body.dump(), policy);
  if (!parsed.ok()) return parsed.error();
  return TranslateResponsesRequest(parsed.value(), previous, policy);
}

// ---- translation: Responses → chat ----

TEST(ResponsesRequest, StringInputAndInstructions) {
  auto chat = Translate({{"model", "m"}, {"input", "Hello"}, {"instructions", "Be brief"}, {"max_output_tokens", 9}});
  ASSERT_TRUE(chat.ok()) << chat.error().message;
  EXPECT_EQ(chat.value().messages,
            Json::parse(R"([{"role":"system","content":"Be brief"},{"role":"user","content":"Hello"}])"));
  EXPECT_EQ(chat.value().fields.max_tokens, 9);
  EXPECT_EQ(chat.value().model, "m");
}

TEST(ResponsesRequest, ItemsBecomeOneAssistantTurnWithCallsAndReasoning) {
  const Json input = Json::parse(R"([
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
    {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "glint-reasoning-v1:thought"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
    {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch\n"},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "done"}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed"}
  ])");
  const Json tools = {WeatherTool(), {{"type", "custom"}, {"name", "apply_patch"}}, {{"type", "web_search"}}};
  auto chat = Translate({{"input", input}, {"tools", tools}});
  ASSERT_TRUE(chat.ok()) << chat.error().message;
  const Json& messages = chat.value().messages;
  ASSERT_EQ(messages.size(), 5u) << messages.dump();
  EXPECT_EQ(messages[0], Json::parse(R"({"role":"system","content":"rules"})"));
  EXPECT_EQ(messages[1], Json::parse(R"({"role":"user","content":"a\nb"})"));
  EXPECT_EQ(messages[2]["role"], "assistant");
  EXPECT_EQ(messages[2]["content"], "Let me look.");
  EXPECT_EQ(messages[2]["reasoning_content"], "thought");  // glint's own encrypted_content is read back
  ASSERT_EQ(messages[2]["tool_calls"].size(), 2u);
  EXPECT_EQ(messages[2]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(messages[2]["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(messages[2]["tool_calls"][1]["function"]["arguments"], Json::parse(R"({"input":"*** Begin Patch\n"})"));
  EXPECT_EQ(messages[3], Json::parse(R"({"role":"tool","content":"sunny","tool_call_id":"c1"})"));
  EXPECT_EQ(messages[4]["content"], "done");
  // The custom tool is a function of one string argument; web_search is skipped.
  ASSERT_EQ(chat.value().tools.size(), 2u);
  EXPECT_EQ(chat.value().tools[1]["function"]["name"], "apply_patch");
  EXPECT_EQ(chat.value().tools[1]["function"]["parameters"]["required"], Json::array({"input"}));
}

TEST(ResponsesRequest, ForeignEncryptedReasoningIsIgnored) {
  auto chat = Translate({{"input", Json::parse(R"([{"role":"user","content":"q"},
      {"type":"reasoning","summary":[],"encrypted_content":"gAAAAB-opaque"},
      {"role":"assistant","content":"a"}])")}});
  ASSERT_TRUE(chat.ok()) << chat.error().message;
  EXPECT_FALSE(chat.value().messages[1].contains("reasoning_content"));
}

TEST(ResponsesRequest, SamplingFormatReasoningAndToolChoice) {
  Json body = {{"input", "x"},
               {"temperature", 0.5},
               {"top_p", 0.5},
               {"tools", {WeatherTool()}},
               {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
               {"reasoning", {{"effort", "minimal"}}}};
  auto chat = Translate(body);
  ASSERT_TRUE(chat.ok()) << chat.error().message;
  EXPECT_EQ(chat.value().tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(chat.value().tool_choice_name, "get_weather");
  EXPECT_FLOAT_EQ(chat.value().fields.sampling.temperature, 0.5f);
  EXPECT_EQ(chat.value().chat_template_kwargs["enable_thinking"], false);

  for (const auto& [effort, level] : std::vector<std::pair<std::string, std::string>>{
           {"low", "Low"}, {"medium", "High"}, {"high", "High"}, {"xhigh", "Max"}}) {
    auto leveled = Translate({{"input", "x"}, {"reasoning", {{"effort", effort}}}});
    ASSERT_TRUE(leveled.ok());
    EXPECT_EQ(leveled.value().reasoning_effort, level) << effort;
  }
  auto formatted =
      Translate({{"input", "x"},
                 {"text", {{"format", {{"type", "json_schema"}, {"name", "r"}, {"schema", {{"type", "object"}}}}}}}});
  ASSERT_TRUE(formatted.ok()) << formatted.error().message;
  EXPECT_TRUE(formatted.value().fields.constraint.has_value());
}

void ExpectError(const Json& body, const std::string& param, const std::string& words) {
  auto chat = Translate(body);
  ASSERT_FALSE(chat.ok()) << body.dump();
  EXPECT_EQ(chat.error().status, 400);
  EXPECT_EQ(chat.error().param, param) << chat.error().message;
  EXPECT_NE(chat.error().message.find(words), std::string::npos) << chat.error().message;
}

TEST(ResponsesRequest, ErrorsNameTheResponsesField) {
  ExpectError({{"input", "x"}, {"background", true}}, "background", "not supported");
  ExpectError({{"input", "x"}, {"conversation", "conv_1"}}, "conversation", "previous_response_id");
  ExpectError({{"input", Json::array({{{"type", "no_such_item"}}})}}, "input[0].type", "no_such_item");
  ExpectError({{"input", Json::array({{{"type", "item_reference"}, {"id", "x"}}})}}, "input[0].type", "item_reference");
  ExpectError({{"input", Json::array({{{"type", "function_call_output"}, {"output", "x"}}})}}, "input[0].call_id",
              "required");
  ExpectError({{"input", "x"}, {"max_output_tokens", 0}}, "max_output_tokens", "max_output_tokens");
  ExpectError({{"input", "x"}, {"temperature", 9}}, "temperature", "temperature");
  ExpectError({{"input", "x"}, {"reasoning", {{"effort", "extreme"}}}}, "reasoning.effort", "xhigh");
  ExpectError({{"input", "x"}, {"text", {{"format", {{"type", "yaml"}}}}}}, "text.format.type", "json_schema");
  ExpectError({{"input", "x"}, {"tool_choice", {{"type", "web_search"}}}}, "tool_choice.type", "cannot run");
  ExpectError({{"input", "x"}, {"tool_choice", {{"type", "function"}, {"name", "nope"}}}}, "tool_choice", "nope");
  ExpectError({{"input", Json::array({{{"role", "user"}, {"content", {{{"type", "input_file"}}}}}})}},
              "input[0].content[0].type", "input_file");
  ExpectError({{"input", Json::array({{{"role", "tool"}, {"content", "x"}}})}}, "input[0].role", "developer");
  // An error found by the chat parser is renamed back: the function_call's arguments are not JSON.
  ExpectError(
      {{"input",
        Json::array({{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "{not json"}}})}},
      "input[0]", "input[0]");
  ExpectError({{"tools", Json::array({{{"type", "function"}}})}, {"input", "x"}}, "tools[0].name", "required");
  ExpectError(Json::object(), "input", "input");  // nothing to answer
}

TEST(ResponsesRequest, HostileInputsAreBounded) {
  Json tools = Json::array();
  for (int i = 0; i < 600; ++i) tools.push_back({{"type", "function"}, {"name", StrCat("f", i)}});
  ExpectError({{"input", "x"}, {"tools", tools}}, "tools", "at most");
  // Deep nesting is refused by the body parser before anything else reads it.
  std::string deep = R"({"input": )";
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  deep += "}";
  RequestPolicy policy;
  auto parsed = ParseResponsesRequest(deep, policy);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error().status, 400);
  // Many unknown tool types are skipped, each type reported once.
  Json hosted = Json::array();
  for (int i = 0; i < 300; ++i) hosted.push_back({{"type", "web_search"}});
  auto many = ParseResponsesRequest(Json{{"input", "x"}, {"tools", hosted}}.dump(), policy);
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many.value().skipped_tools, std::vector<std::string>{"web_search"});
}

// ---- the store ----

TEST(ResponsesStore, BoundedByCountAndBytesOldestFirst) {
  ResponsesStore store(3, 10'000);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(store.Put(StrCat("r", i), {{"i", i}}, Json::array()));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.Get("r0"), nullptr);
  EXPECT_EQ(store.Get("r1"), nullptr);
  ASSERT_NE(store.Get("r4"), nullptr);
  EXPECT_EQ(store.Get("r4")->response["i"], 4);
  EXPECT_TRUE(store.Erase("r3"));
  EXPECT_FALSE(store.Erase("r3"));
  EXPECT_EQ(store.size(), 2u);

  // A flood of large responses: the byte bound holds at every step.
  ResponsesStore small(1000, 50'000);
  const std::string text(4000, 'x');
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(small.Put(StrCat("big", i), {{"text", text}}, Json::array({text})));
    ASSERT_LE(small.bytes(), 50'000u);
  }
  EXPECT_LE(small.size(), 7u);
  EXPECT_NE(small.Get("big1999"), nullptr);
  EXPECT_FALSE(small.Put("huge", {{"text", std::string(60'000, 'y')}}, Json::array()));  // alone over the bound
  EXPECT_EQ(ResponsesStore(0, 1000).Put("x", Json::object(), Json::array()), false);
}

// ---- the server: output items, events, store ----

std::vector<std::string> Pieces(std::initializer_list<const char*> pieces) { return {pieces.begin(), pieces.end()}; }

TEST(ResponsesServer, WholeResponseHasItemsInOrderAndUsage) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return Pieces({"I think", "</think>", "\n", "It is", " sunny.", kCity.c_str()});
  });
  const HttpReply reply =
      Post(server.port(), "/v1/responses", {{"model", "glm-test"}, {"input", "Weather?"}, {"tools", {WeatherTool()}}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json response = reply.json();
  EXPECT_EQ(response["object"], "response");
  EXPECT_EQ(response["status"], "completed");
  ASSERT_EQ(response["output"].size(), 3u) << response.dump();
  EXPECT_EQ(response["output"][0]["type"], "reasoning");
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "I think");
  EXPECT_EQ(response["output"][1]["type"], "message");
  EXPECT_EQ(response["output"][1]["content"][0]["text"], "\nIt is sunny.");
  EXPECT_EQ(response["output"][2]["type"], "function_call");
  EXPECT_EQ(response["output"][2]["name"], "get_weather");
  EXPECT_EQ(Json::parse(response["output"][2]["arguments"].get<std::string>()), Json::parse(R"({"city":"Paris"})"));
  EXPECT_TRUE(response["output"][2]["call_id"].get<std::string>().starts_with("call_"));
  const Json& usage = response["usage"];
  EXPECT_EQ(usage["output_tokens"], 6);
  EXPECT_EQ(usage["output_tokens_details"]["reasoning_tokens"], 2);  // "I think" and "</think>"
  EXPECT_EQ(usage["total_tokens"], usage["input_tokens"].get<int64_t>() + 6);
  EXPECT_EQ(usage["input_tokens_details"]["cached_tokens"], 0);
}

// The event types of a stream, after checking sequence numbers and that `event:` equals the data's type.
std::vector<std::string> EventTypes(const std::string& body, std::vector<Json>& events) {
  events = Events(body);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], static_cast<int64_t>(i));
    types.push_back(events[i]["type"].get<std::string>());
    EXPECT_NE(body.find("event: " + types.back() + "\ndata: "), std::string::npos);
  }
  EXPECT_EQ(body.find("[DONE]"), std::string::npos);
  return types;
}

TEST(ResponsesServer, StreamEventSequence) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return Pieces({"hm", "</think>", "Hi", kCity.c_str()});
  });
  const HttpReply reply =
      Post(server.port(), "/v1/responses", {{"input", "x"}, {"stream", true}, {"tools", {WeatherTool()}}});
  ASSERT_EQ(reply.status, 200);
  EXPECT_NE(reply.header("Content-Type").find("text/event-stream"), std::string::npos);
  std::vector<Json> events;
  const std::vector<std::string> types = EventTypes(reply.body, events);
  const std::vector<std::string> expected = {"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added"};
  ASSERT_GE(types.size(), expected.size() + 4);
  EXPECT_EQ(std::vector<std::string>(types.begin(), types.begin() + expected.size()), expected);
  // The call's arguments arrive as deltas whose concatenation is the .done arguments.
  std::string arguments;
  size_t at = expected.size();
  for (; types[at] == "response.function_call_arguments.delta"; ++at) arguments += events[at]["delta"];
  EXPECT_GE(at - expected.size(), 1u);
  ASSERT_EQ(types[at], "response.function_call_arguments.done");
  EXPECT_EQ(events[at]["arguments"], arguments);
  EXPECT_EQ(types[at + 1], "response.output_item.done");
  EXPECT_EQ(types[at + 2], "response.completed");
  EXPECT_EQ(at + 3, types.size());
  const Json& completed = events.back()["response"];
  EXPECT_EQ(completed["status"], "completed");
  EXPECT_EQ(completed["output"].size(), 3u);
  EXPECT_EQ(completed["usage"]["output_tokens"], 4);
  EXPECT_EQ(completed["id"], events[0]["response"]["id"]);
}

TEST(ResponsesServer, CustomToolInputStreamsRawText) {
  TestServer server;
  const std::string patch = "*** Begin Patch\n*** Add File: a.txt\n+\"quoted\"\n*** End Patch";
  server.backend().set_script([patch](const GenerationRequest&, int64_t) {
    return std::vector<std::string>{"</think>", "<tool_call>apply_patch<arg_key>input</arg_key><arg_value>",
                                    patch.substr(0, 20), patch.substr(20), "</arg_value></tool_call>"};
  });
  Json body = {{"input", "edit"}, {"stream", true}, {"tools", {{{"type", "custom"}, {"name", "apply_patch"}}}}};
  const HttpReply reply = Post(server.port(), "/v1/responses", body);
  ASSERT_EQ(reply.status, 200);
  std::vector<Json> events;
  const std::vector<std::string> types = EventTypes(reply.body, events);
  std::string streamed;
  int deltas = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (types[i] == "response.custom_tool_call_input.delta") {
      streamed += events[i]["delta"].get<std::string>();
      ++deltas;
    }
    if (types[i] == "response.custom_tool_call_input.done") {
      EXPECT_EQ(events[i]["input"], patch);
    }
  }
  EXPECT_GE(deltas, 2);  // as the model wrote it, not all at the end
  EXPECT_EQ(streamed, patch);
  const Json& item = events.back()["response"]["output"][0];
  EXPECT_EQ(item["type"], "custom_tool_call");
  EXPECT_EQ(item["input"], patch);
  // Whole, too.
  body.erase("stream");
  const Json whole = Post(server.port(), "/v1/responses", body).json();
  EXPECT_EQ(whole["output"][0]["input"], patch);
}

TEST(ResponsesServer, ParallelToolCallsFalseKeepsTheFirstCall) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) {
    return Pieces({"</think>", kCity.c_str(), kCity.c_str()});
  });
  const Json reply =
      Post(server.port(), "/v1/responses", {{"input", "x"}, {"tools", {WeatherTool()}}, {"parallel_tool_calls", false}})
          .json();
  ASSERT_EQ(reply["output"].size(), 1u) << reply.dump();
  const Json both = Post(server.port(), "/v1/responses", {{"input", "x"}, {"tools", {WeatherTool()}}}).json();
  EXPECT_EQ(both["output"].size(), 2u);
}

TEST(ResponsesServer, MaxOutputTokensGivesIncomplete) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) { return std::vector<std::string>(9, "w "); });
  Json body = {{"input", "x"}, {"max_output_tokens", 3}, {"reasoning", {{"effort", "none"}}}};
  const Json whole = Post(server.port(), "/v1/responses", body).json();
  EXPECT_EQ(whole["status"], "incomplete");
  EXPECT_EQ(whole["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(whole["output"][0]["status"], "incomplete");
  body["stream"] = true;
  std::vector<Json> events;
  const std::vector<std::string> types = EventTypes(Post(server.port(), "/v1/responses", body).body, events);
  EXPECT_EQ(types.back(), "response.incomplete");
}

TEST(ResponsesServer, StoreContinueGetAndDelete) {
  TestServer server;
  server.backend().set_script([](const GenerationRequest&, int64_t) { return Pieces({"</think>", "Answer one"}); });
  const Json first = Post(server.port(), "/v1/responses", {{"input", "Question one"}}).json();
  const std::string id = first["id"];
  const HttpReply got = Exchange(server.port(), "GET", "/v1/responses/" + id);
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(got.json()["output"], first["output"]);

  // The follow-up's prompt holds the first exchange, then the new input.
  const Json second =
      Post(server.port(), "/v1/responses", {{"input", "Question two"}, {"previous_response_id", id}}).json();
  EXPECT_EQ(second["previous_response_id"], id);
  const std::string prompt = TestTokenizer().Decode(server.backend().submitted().back().prompt);
  const size_t q1 = prompt.find("Question one");
  const size_t a1 = prompt.find("Answer one");
  const size_t q2 = prompt.find("Question two");
  ASSERT_NE(q1, std::string::npos) << prompt;
  ASSERT_NE(a1, std::string::npos) << prompt;
  EXPECT_LT(q1, a1);
  EXPECT_LT(a1, q2);

  const HttpReply deleted = Exchange(server.port(), "DELETE", "/v1/responses/" + id);
  ASSERT_EQ(deleted.status, 200);
  EXPECT_EQ(deleted.json()["deleted"], true);
  EXPECT_EQ(Exchange(server.port(), "GET", "/v1/responses/" + id).status, 404);
  const HttpReply gone = Post(server.port(), "/v1/responses", {{"input", "x"}, {"previous_response_id", id}});
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(gone.json()["error"]["param"], "previous_response_id");
  EXPECT_NE(gone.json()["error"]["message"].get<std::string>().find(id), std::string::npos);

  // store: false keeps nothing.
  const Json unstored = Post(server.port(), "/v1/responses", {{"input", "x"}, {"store", false}}).json();
  EXPECT_EQ(Exchange(server.port(), "GET", "/v1/responses/" + unstored["id"].get<std::string>()).status, 404);
}

TEST(ResponsesServer, StoredResponseFloodStaysWithinItsBounds) {
  ServerOptions options;
  options.responses_store_max_responses = 4;
  options.responses_store_max_bytes = 1 << 20;
  TestServer server(options);
  std::vector<std::string> ids;
  ids.reserve(12);
  for (int i = 0; i < 12; ++i) ids.push_back(Post(server.port(), "/v1/responses", {{"input", "x"}}).json()["id"]);
  int kept = 0;
  for (const std::string& id : ids) kept += Exchange(server.port(), "GET", "/v1/responses/" + id).status == 200;
  EXPECT_EQ(kept, 4);
  EXPECT_EQ(Exchange(server.port(), "GET", "/v1/responses/" + ids.back()).status, 200);
  EXPECT_EQ(Exchange(server.port(), "GET", "/v1/responses/" + ids.front()).status, 404);
}

TEST(ResponsesServer, ErrorsAreOpenAiShaped) {
  TestServer server;
  const HttpReply bad = Post(server.port(), "/v1/responses", {{"input", "x"}, {"background", true}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(bad.json()["error"]["param"], "background");
  const HttpReply model = Post(server.port(), "/v1/responses", {{"input", "x"}, {"model", "nope"}});
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(Exchange(server.port(), "PUT", "/v1/responses/resp_x").status, 405);
  EXPECT_EQ(Exchange(server.port(), "GET", "/v1/responses").status, 405);
}

}  // namespace
}  // namespace glint::server
