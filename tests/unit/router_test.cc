// glint router without sockets (docs/router.md): backend URLs and flag lists, the bounded maps, placement (prefix
// affinity, least loaded, health, exclusion, prefill choice), the conversation-prefix key (what is hashed), and
// the ids read from requests and responses. The proxy itself is tested end to end by tests/node/router.test.mjs.
#include "router/router.h"

#include <gtest/gtest.h>

#include "router/backend_url.h"
#include "router/placement.h"
#include "router/request_keys.h"

namespace glint::router {
namespace {

TEST(BackendUrlTest, ParsesHostAndPort) {
  auto url = ParseBackendUrl("http://127.0.0.1:8081");
  ASSERT_TRUE(url.ok()) << url.status().message();
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, 8081);
  EXPECT_EQ(url->text, "http://127.0.0.1:8081");
  auto no_port = ParseBackendUrl("http://prefill-1/");
  ASSERT_TRUE(no_port.ok());
  EXPECT_EQ(no_port->port, 80);
  EXPECT_EQ(no_port->text, "http://prefill-1:80");
  auto ipv6 = ParseBackendUrl("http://[::1]:9000");
  ASSERT_TRUE(ipv6.ok());
  EXPECT_EQ(ipv6->host, "::1");
  EXPECT_EQ(ipv6->text, "http://[::1]:9000");
}

TEST(BackendUrlTest, RefusesWhatItCannotUseWithAReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"127.0.0.1:8080", "does not start with http://"},
      {"https://a:1", "https is not supported"},
      {"http://a:1/v1", "has a path"},
      {"http://a:1?x=1", "has a path, query"},
      {"http://user:pw@a:1", "credentials"},
      {"http://:8080", "has no host"},
      {"http://a:", "expected an integer"},
      {"http://a:0", "expected an integer in [1, 65535]"},
      {"http://a:70000", "expected an integer"},
      {"http://a:8x", "expected an integer"},
      {"http://[::1", "unclosed"},
      {"http://[::1]x", "text after ']'"},
  };
  for (const auto& [text, why] : cases) {
    auto url = ParseBackendUrl(text);
    ASSERT_FALSE(url.ok()) << text;
    EXPECT_NE(url.status().message().find(why), std::string::npos) << text << ": " << url.status().message();
  }
}

TEST(BackendsFromFlagsTest, ChecksTheLists) {
  auto none = BackendsFromFlags({}, {}, {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no backends"), std::string::npos);
  auto prefill_only = BackendsFromFlags({"http://a:1"}, {}, {});
  ASSERT_FALSE(prefill_only.ok());
  EXPECT_NE(prefill_only.status().message().find("--prefill needs at least one --decode"), std::string::npos);
  auto decode_only = BackendsFromFlags({}, {"http://a:1"}, {});
  ASSERT_FALSE(decode_only.ok());
  EXPECT_NE(decode_only.status().message().find("--decode needs at least one --prefill"), std::string::npos);
  auto twice = BackendsFromFlags({}, {}, {"http://a:1", "http://a:1/"});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("listed twice"), std::string::npos);
  auto bad = BackendsFromFlags({"http://p:1"}, {"ftp://d:1"}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--decode: backend URL 'ftp://d:1'"), std::string::npos);
  auto mixed = BackendsFromFlags({"http://p:1"}, {"http://d:1"}, {"http://r:1"});
  ASSERT_TRUE(mixed.ok()) << mixed.status().message();
  ASSERT_EQ(mixed->size(), 3u);
  EXPECT_EQ((*mixed)[0].role, BackendRole::kReplica);
  EXPECT_EQ((*mixed)[1].role, BackendRole::kDecode);
  EXPECT_EQ((*mixed)[2].role, BackendRole::kPrefill);
}

TEST(LruMapTest, ForgetsTheLeastRecentlyUsed) {
  LruMap<std::string> map(2);
  map.Put("a", 0);
  map.Put("b", 1);
  EXPECT_EQ(map.Find("a"), 0u);  // "a" is now the most recent
  map.Put("c", 2);               // evicts "b"
  EXPECT_FALSE(map.Find("b").has_value());
  EXPECT_EQ(map.Find("a"), 0u);
  EXPECT_EQ(map.Find("c"), 2u);
  map.Put("a", 5);  // an update, not an insertion
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(map.Find("a"), 5u);
  map.Erase("a");
  EXPECT_FALSE(map.Find("a").has_value());
  EXPECT_EQ(map.size(), 1u);
  LruMap<uint64_t> empty(0);
  empty.Put(1, 1);
  EXPECT_EQ(empty.size(), 0u);
}

// A pool of `replicas` replicas, then `decode` decode servers, then `prefill` prefill servers, all healthy.
BackendPool MakePool(int replicas, int decode = 0, int prefill = 0, size_t capacity = 16, int64_t max_lead = 0) {
  std::vector<std::unique_ptr<Backend>> backends;
  int port = 9000;
  auto add = [&](int count, BackendRole role) {
    for (int i = 0; i < count; ++i) {
      auto url = ParseBackendUrl("http://127.0.0.1:" + std::to_string(port++));
      backends.push_back(std::make_unique<Backend>(*url, role));
      backends.back()->SetHealth(true, "");
    }
  };
  add(replicas, BackendRole::kReplica);
  add(decode, BackendRole::kDecode);
  add(prefill, BackendRole::kPrefill);
  return BackendPool(std::move(backends), capacity, capacity, max_lead);
}

TEST(PlacementTest, LeastOutstandingThenFewestRequests) {
  BackendPool pool = MakePool(3);
  pool.at(0).outstanding = 2;
  pool.at(1).outstanding = 1;
  pool.at(2).outstanding = 1;
  pool.at(1).requests = 10;
  pool.at(2).requests = 4;
  auto choice = pool.ChooseServing(std::nullopt, {});
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->backend, 2u);
  EXPECT_FALSE(choice->affinity_hit);
  choice = pool.ChooseServing(std::nullopt, {2});  // excluded (it just failed): the next least loaded
  EXPECT_EQ(choice->backend, 1u);
}

TEST(PlacementTest, PrefixAffinityWinsOverLoadWhileHealthy) {
  BackendPool pool = MakePool(2);
  pool.RememberPrefix(42, 1);
  pool.at(1).outstanding = 5;
  auto choice = pool.ChooseServing(42, {});
  EXPECT_EQ(choice->backend, 1u);
  EXPECT_TRUE(choice->affinity_hit);
  choice = pool.ChooseServing(7, {});  // an unknown prefix goes by load
  EXPECT_EQ(choice->backend, 0u);
  EXPECT_FALSE(choice->affinity_hit);
  pool.at(1).SetHealth(false, "connection refused");
  choice = pool.ChooseServing(42, {});  // its backend is down: placed by load, not a hit
  EXPECT_EQ(choice->backend, 0u);
  EXPECT_FALSE(choice->affinity_hit);
  EXPECT_EQ(pool.at(1).reason(), "connection refused");
}

TEST(PlacementTest, AffinityYieldsWhenItsBackendIsFarAheadInLoad) {
  for (int64_t max_lead : {0, 1, 4}) {
    SCOPED_TRACE(max_lead);
    BackendPool pool = MakePool(3, 0, 0, 16, max_lead);
    pool.RememberPrefix(42, 1);
    pool.at(0).outstanding = 3;
    pool.at(2).outstanding = 2;
    for (int64_t outstanding = 0; outstanding <= 10; ++outstanding) {
      pool.at(1).outstanding = outstanding;
      // The least loaded of the others is backend 2 (2 outstanding); backend 1 itself when it has fewer.
      const int64_t lead = outstanding - std::min<int64_t>(outstanding, 2);
      const bool keeps = max_lead == 0 || lead < max_lead;
      auto choice = pool.ChooseServing(42, {});
      ASSERT_TRUE(choice.has_value());
      EXPECT_EQ(choice->backend, keeps ? 1u : 2u) << outstanding;
      EXPECT_EQ(choice->affinity_hit, keeps);
      EXPECT_EQ(choice->affinity_yielded, !keeps);
      // An excluded least-loaded backend moves the comparison to the next one (backend 0, 3 outstanding).
      choice = pool.ChooseServing(42, {2});
      const int64_t lead_over_0 = outstanding - std::min<int64_t>(outstanding, 3);
      EXPECT_EQ(choice->backend, max_lead == 0 || lead_over_0 < max_lead ? 1u : 0u) << outstanding;
    }
  }
}

TEST(PlacementTest, NoneWhenEveryServingBackendIsDownOrExcluded) {
  BackendPool pool = MakePool(1, 1, 1);
  pool.at(0).SetHealth(false, "down");
  auto choice = pool.ChooseServing(std::nullopt, {});
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->backend, 1u);  // the decode server; the prefill server never answers the API
  EXPECT_FALSE(pool.ChooseServing(std::nullopt, {1}).has_value());
  EXPECT_EQ(pool.serving(), (std::vector<size_t>{0, 1}));
  EXPECT_TRUE(pool.has_prefill());
}

TEST(PlacementTest, PrefillNeedsHealthAndATransferPort) {
  BackendPool pool = MakePool(0, 1, 2);
  EXPECT_FALSE(pool.ChoosePrefill().has_value());  // no transfer port known yet
  pool.at(1).transfer_port = 7001;
  pool.at(2).transfer_port = 7002;
  pool.at(1).outstanding = 3;
  EXPECT_EQ(pool.ChoosePrefill(), 2u);
  pool.at(2).SetHealth(false, "503");
  EXPECT_EQ(pool.ChoosePrefill(), 1u);
}

TEST(PlacementTest, IdsStickAndAreBounded) {
  BackendPool pool = MakePool(2, 0, 0, /*capacity=*/2);
  pool.RememberId("resp_a", 1);
  pool.RememberId("file-b", 0);
  EXPECT_EQ(pool.OwnerOf("resp_a"), 1u);
  pool.RememberId("batch_c", 1);  // evicts file-b, the least recently used
  EXPECT_FALSE(pool.OwnerOf("file-b").has_value());
  EXPECT_EQ(pool.remembered_ids(), 2u);
  pool.ForgetId("resp_a");
  EXPECT_FALSE(pool.OwnerOf("resp_a").has_value());
}

TEST(PrefixKeyTest, ChatTurnsOfOneSessionShareTheKey) {
  const std::string turn1 =
      R"({"model":"glint","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]})";
  const std::string turn2 =
      R"({"model":"glint","stream":true,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},)"
      R"({"role":"assistant","content":"Hello!"},{"role":"user","content":"And then?"}]})";
  const std::string other_session =
      R"({"model":"glint","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Bye"}]})";
  auto key1 = ConversationPrefixKey("/v1/chat/completions", turn1);
  auto key2 = ConversationPrefixKey("/v1/chat/completions", turn2);
  auto key3 = ConversationPrefixKey("/v1/chat/completions", other_session);
  ASSERT_TRUE(key1 && key2 && key3);
  EXPECT_EQ(*key1, *key2);
  EXPECT_NE(*key1, *key3);
  // Another model, or the same body on another API, is another prefix.
  EXPECT_NE(*key1, *ConversationPrefixKey("/v1/chat/completions", R"({"model":"x",)" + turn1.substr(17)));
  EXPECT_FALSE(ConversationPrefixKey("/v1/chat/completions", R"({"messages":[{"role":"system","content":"a"}]})"));
}

TEST(PrefixKeyTest, MessagesResponsesAndCompletions) {
  auto messages1 = ConversationPrefixKey(
      "/v1/messages", R"({"model":"m","system":"S","messages":[{"role":"user","content":"Q"}],"max_tokens":5})");
  auto messages2 = ConversationPrefixKey(
      "/v1/messages", R"({"model":"m","system":"S","max_tokens":9,"messages":[{"role":"user","content":"Q"},)"
                      R"({"role":"assistant","content":"A"},{"role":"user","content":"Q2"}]})");
  auto messages_other_system = ConversationPrefixKey(
      "/v1/messages", R"({"model":"m","system":"T","messages":[{"role":"user","content":"Q"}],"max_tokens":5})");
  ASSERT_TRUE(messages1 && messages2 && messages_other_system);
  EXPECT_EQ(*messages1, *messages2);
  EXPECT_NE(*messages1, *messages_other_system);

  auto responses1 = ConversationPrefixKey("/v1/responses", R"({"model":"m","instructions":"I","input":"hello"})");
  auto responses2 = ConversationPrefixKey(
      "/v1/responses", R"({"model":"m","instructions":"I","input":[{"role":"user","content":"hello"},{"x":1}]})");
  ASSERT_TRUE(responses1 && responses2);
  EXPECT_NE(*responses1, *responses2);  // a string and a message item are different prompts
  EXPECT_EQ(*responses2, *ConversationPrefixKey("/v1/responses", R"({"model":"m","instructions":"I",)"
                                                                 R"("input":[{"role":"user","content":"hello"}]})"));

  const std::string long_prompt(5000, 'a');
  auto completion1 = ConversationPrefixKey("/v1/completions", R"({"prompt":")" + long_prompt + R"(b"})");
  auto completion2 = ConversationPrefixKey("/v1/completions", R"({"prompt":")" + long_prompt + R"(c"})");
  ASSERT_TRUE(completion1 && completion2);
  EXPECT_EQ(*completion1, *completion2);  // the first 2,048 bytes decide
  EXPECT_TRUE(ConversationPrefixKey("/v1/completions", R"({"prompt":[1,2,3]})"));
  EXPECT_TRUE(ConversationPrefixKey("/v1/completions", R"({"prompt":["abc","def"]})"));

  EXPECT_FALSE(ConversationPrefixKey("/tokenize", R"({"prompt":"x"})"));
  EXPECT_FALSE(ConversationPrefixKey("/v1/chat/completions", "not json"));
  EXPECT_FALSE(ConversationPrefixKey("/v1/chat/completions", "[1]"));
  EXPECT_FALSE(ConversationPrefixKey("/v1/chat/completions", std::string(100000, '[')));
}

TEST(StatefulIdTest, FromPathsAndBodies) {
  auto path_id = RequestStatefulId("GET", "/v1/responses/resp_1", "");
  ASSERT_TRUE(path_id);
  EXPECT_EQ(path_id->id, "resp_1");
  EXPECT_EQ(path_id->probe_path, "/v1/responses/resp_1");
  EXPECT_TRUE(path_id->in_path);
  auto content = RequestStatefulId("GET", "/v1/files/file-9/content", "");
  ASSERT_TRUE(content);
  EXPECT_EQ(content->id, "file-9");
  EXPECT_EQ(content->probe_path, "/v1/files/file-9");
  auto cancel = RequestStatefulId("POST", "/v1/batches/batch_3/cancel", "");
  ASSERT_TRUE(cancel);
  EXPECT_EQ(cancel->id, "batch_3");
  auto previous = RequestStatefulId("POST", "/v1/responses", R"({"input":"x","previous_response_id":"resp_7"})");
  ASSERT_TRUE(previous);
  EXPECT_EQ(previous->id, "resp_7");
  EXPECT_FALSE(previous->in_path);
  auto batch = RequestStatefulId("POST", "/v1/batches", R"({"input_file_id":"file-2","endpoint":"/v1/completions"})");
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->probe_path, "/v1/files/file-2");

  EXPECT_FALSE(RequestStatefulId("POST", "/v1/responses", R"({"input":"x"})"));
  EXPECT_FALSE(RequestStatefulId("POST", "/v1/responses", R"({"previous_response_id":"a/b"})"));
  EXPECT_FALSE(RequestStatefulId("POST", "/v1/responses", R"({"previous_response_id":7})"));
  EXPECT_FALSE(RequestStatefulId("GET", "/v1/files/a/b", ""));
  EXPECT_FALSE(RequestStatefulId("GET", "/v1/files/", ""));
  EXPECT_FALSE(RequestStatefulId("GET", "/v1/files", ""));
  EXPECT_FALSE(RequestStatefulId("GET", "/v1/responses/" + std::string(300, 'x'), ""));
}

TEST(StatefulIdTest, RoutableIds) {
  EXPECT_TRUE(IsRoutableId("batch_abc-1"));
  EXPECT_TRUE(IsRoutableId(std::string(256, 'x')));
  for (std::string_view bad : {"", "a/b", "..?x", "a#b", "a b"}) EXPECT_FALSE(IsRoutableId(bad)) << bad;
  EXPECT_FALSE(IsRoutableId(std::string(257, 'x')));
}

TEST(StatefulIdTest, IdsOfResponses) {
  EXPECT_EQ(ResponseIds(R"({"id":"batch_1","input_file_id":"file-1","output_file_id":"file-2","error_file_id":null})"),
            (std::vector<std::string>{"batch_1", "file-2", "file-1"}));
  EXPECT_EQ(ResponseIds(R"({"object":"list","data":[{"id":"file-a"},{"id":"file-b"},{"id":3}]})"),
            (std::vector<std::string>{"file-a", "file-b"}));
  EXPECT_TRUE(ResponseIds("oops").empty());
  EXPECT_TRUE(ResponseIds(R"([{"id":"x"}])").empty());
}

TEST(StatefulIdTest, ResponseIdOfAStream) {
  const std::string created =
      "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_42\"}}\n\n";
  EXPECT_EQ(StreamedResponseId(created), "resp_42");
  EXPECT_FALSE(StreamedResponseId(created.substr(0, 40)));  // the data line is not complete yet
  EXPECT_FALSE(StreamedResponseId("data: {\"type\":\"x\"}\n\n"));
  EXPECT_EQ(StreamedResponseId(": ping\n\ndata: nope\n" + created), "resp_42");
}

}  // namespace
}  // namespace glint::router
