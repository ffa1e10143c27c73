// An in-process OpenAI-compatible server on 127.0.0.1 (ephemeral port) for the glint bench tests: it streams
// scripted chunks at scripted times, reports scripted usage, fails on request (HTTP 500, a dropped connection, a
// stall, a malformed chunk), tokenizes word by word, and exports vLLM's speculative-decoding counters.
//
// Timing: chunk i of a reply is written at arrival + ttft + i·itl, sleeping until absolute deadlines so that
// wake-up overshoots do not accumulate along a stream.
#pragma once

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace glint::bench::fake {

struct FakeReply {
  int http_status = 200;  // not 200: `error_body`, no stream
  std::string error_body = R"({"error":{"message":"scripted failure","type":"InternalServerError","code":500}})";
  double ttft_s = 0.0;                   // first content chunk this long after the request arrived
  double itl_s = 0.0;                    // between content chunks
  int64_t tokens = -1;                   // completion tokens; -1: the request's max_tokens (ignore_eos)
  int tokens_per_chunk = 1;              // > 1 imitates speculative decoding (several tokens per chunk)
  int64_t disconnect_after_chunks = -1;  // ≥ 0: drop the connection after this many content chunks
  bool stall = false;                    // send only SSE comments until the client gives up
  bool garbage_chunk = false;            // the first content chunk is not JSON
  bool include_usage = true;             // honour stream_options.include_usage
  int64_t usage_completion_tokens = -1;  // ≥ 0: report this instead of the tokens sent
  // Tokens decode to no text (a random-weight model): chunks carry no content, and a chunk is sent for a token only
  // when the request asked for logprobs, as glint serve does.
  bool empty_text = false;
};

class FakeServer {
 public:
  using Script = std::function<FakeReply(int64_t request_number, const nlohmann::json& body)>;
  static constexpr int32_t kBosId = 1;  // added by /tokenize when add_special_tokens (default true)

  explicit FakeServer(Script script = nullptr) : script_(std::move(script)) {
    server_.new_task_queue = [] { return new httplib::ThreadPool(64); };
    server_.set_tcp_nodelay(true);  // each SSE chunk leaves when written, as the script times it
    server_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { Models(res); });
    server_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { Tokenize(req, res); });
    server_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { Detokenize(req, res); });
    server_.Post("/v1/completions",
                 [this](const httplib::Request& req, httplib::Response& res) { Generate(req, res, /*chat=*/false); });
    server_.Post("/v1/chat/completions",
                 [this](const httplib::Request& req, httplib::Response& res) { Generate(req, res, /*chat=*/true); });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { Metrics(res); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() is a no-op until the accept loop runs, so wait for it (connections queue in the backlog meanwhile).
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  ~FakeServer() {
    stopping_ = true;
    server_.stop();
    thread_.join();
  }

  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Switches, set before the run.
  std::atomic<bool> metrics_enabled{true};      // false: /metrics answers 404
  std::atomic<bool> spec_decode_enabled{true};  // false: /metrics has no spec-decode counters
  std::atomic<bool> tokenize_enabled{true};     // false: /tokenize and /detokenize answer 404
  std::atomic<int64_t> max_model_len{0};        // > 0: /v1/models reports it (as vLLM and glint do)
  std::atomic<bool> require_api_key{false};     // true: /v1/models answers 401, as a server with a key does

  std::vector<nlohmann::json> generation_bodies() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bodies_;
  }
  std::vector<std::string> generation_paths() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return paths_;
  }
  int64_t generation_requests() const { return next_request_.load(); }
  int max_streams_in_flight() const { return max_active_.load(); }
  int64_t completed_streams() const { return completed_.load(); }

  // The fake tokenizer: whitespace-separated words, one token each, ids assigned on first sight from 100.
  std::vector<int32_t> Encode(const std::string& text, bool add_special_tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(kBosId);
    std::istringstream words(text);
    for (std::string word; words >> word;) {
      auto [it, inserted] = word_ids_.try_emplace(word, static_cast<int32_t>(100 + words_.size()));
      if (inserted) words_.push_back(word);
      ids.push_back(it->second);
    }
    return ids;
  }

  std::string Decode(const std::vector<int32_t>& ids) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string text;
    for (int32_t id : ids) {
      if (id == kBosId) continue;
      const size_t index = static_cast<size_t>(id - 100);
      if (!text.empty()) text.push_back(' ');
      text += (id >= 100 && index < words_.size()) ? words_[index] : std::string("<unk>");
    }
    return text;
  }

  // Prompt tokens as this server counts them: token-id prompts as given; text with BOS; chat messages as the
  // words of each message + 4 template tokens per message + 1.
  int64_t PromptTokens(const nlohmann::json& body) {
    if (body.contains("messages")) {
      int64_t count = 1;
      for (const auto& message : body["messages"]) {
        count += 4 + static_cast<int64_t>(Encode(message["content"].get<std::string>(), false).size());
      }
      return count;
    }
    const auto& prompt = body["prompt"];
    if (prompt.is_array()) return static_cast<int64_t>(prompt.size());
    return static_cast<int64_t>(Encode(prompt.get<std::string>(), true).size());
  }

  // Speculative-decoding counters added by every completed stream (split over two engines to exercise summing).
  static constexpr int kDraftsPerRequest = 10;
  static constexpr int kDraftTokensPerRequest = 30;
  static constexpr int kAcceptedPerRequest = 20;
  static constexpr int kAcceptedPerPosition[3] = {9, 7, 4};

 private:
  void Models(httplib::Response& res) {
    if (require_api_key) {
      res.status = 401;
      res.set_content(
          R"({"error":{"message":"missing API key","type":"authentication_error","code":"invalid_api_key"}})",
          "application/json");
      return;
    }
    nlohmann::json model = {{"id", "fake-model"}, {"object", "model"}};
    if (max_model_len > 0) model["max_model_len"] = max_model_len.load();
    res.set_content(nlohmann::json{{"object", "list"}, {"data", {model}}}.dump(), "application/json");
  }

  void Tokenize(const httplib::Request& req, httplib::Response& res) {
    if (!tokenize_enabled) return NotFound(res);
    const auto body = nlohmann::json::parse(req.body);
    const bool special = body.value("add_special_tokens", true);
    const auto ids = Encode(body["prompt"].get<std::string>(), special);
    res.set_content(nlohmann::json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", 1 << 20}}.dump(),
                    "application/json");
  }

  void Detokenize(const httplib::Request& req, httplib::Response& res) {
    if (!tokenize_enabled) return NotFound(res);
    const auto body = nlohmann::json::parse(req.body);
    res.set_content(nlohmann::json{{"prompt", Decode(body["tokens"].get<std::vector<int32_t>>())}}.dump(),
                    "application/json");
  }

  static void NotFound(httplib::Response& res) {
    res.status = 404;
    res.set_content(R"({"error":{"message":"not found","type":"NotFoundError","code":404}})", "application/json");
  }

  void Metrics(httplib::Response& res) {
    if (!metrics_enabled) return NotFound(res);
    const int64_t n = completed_.load();
    std::ostringstream out;
    out << "# HELP vllm:num_requests_running Requests running.\n# TYPE vllm:num_requests_running gauge\n"
        << "vllm:num_requests_running{model_name=\"fake-model\"} " << active_.load() << "\n";
    if (spec_decode_enabled) {
      // 60 % of each counter on engine 0, 40 % on engine 1.
      auto split = [&](const char* name, int per_request) {
        out << "# TYPE " << name << " counter\n"
            << name << "{engine=\"0\",model_name=\"fake-model\"} " << n * per_request * 6 / 10 << "\n"
            << name << "{engine=\"1\",model_name=\"fake-model\"} " << n * per_request * 4 / 10 << " 1700000000000\n";
      };
      split("vllm:spec_decode_num_drafts_total", kDraftsPerRequest);
      split("vllm:spec_decode_num_draft_tokens_total", kDraftTokensPerRequest);
      split("vllm:spec_decode_num_accepted_tokens_total", kAcceptedPerRequest);
      for (int position = 0; position < 3; ++position) {
        out << "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"fake-model\",position=\"" << position
            << "\"} " << n * kAcceptedPerPosition[position] << "\n";
      }
    }
    res.set_content(out.str(), "text/plain; version=0.0.4");
  }

  void SleepUntil(std::chrono::steady_clock::time_point deadline) const {
    while (!stopping_) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return;
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(5)));
    }
  }

  static std::string Event(const nlohmann::json& payload) { return "data: " + payload.dump() + "\n\n"; }

  void Generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    const auto arrival = std::chrono::steady_clock::now();
    const auto body = nlohmann::json::parse(req.body);
    int64_t number = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      number = next_request_++;
      bodies_.push_back(body);
      paths_.push_back(req.path);
    }
    const FakeReply reply = script_ ? script_(number, body) : FakeReply();
    if (reply.http_status != 200) {
      res.status = reply.http_status;
      res.set_content(reply.error_body, "application/json");
      return;
    }
    const int64_t tokens = reply.tokens >= 0 ? reply.tokens : body["max_tokens"].get<int64_t>();
    const int64_t prompt_tokens = PromptTokens(body);
    const bool usage =
        reply.include_usage && body.value("stream_options", nlohmann::json::object()).value("include_usage", false);
    const bool logprobs = body.contains("logprobs") && !body["logprobs"].is_null() && body["logprobs"] != false;
    const int active = ++active_;
    for (int seen = max_active_.load(); active > seen && !max_active_.compare_exchange_weak(seen, active);) {
    }
    // A stream stops counting as in flight when its last byte is written, not when httplib releases the
    // response later: on a loaded machine that release can lag past the client's next request.
    auto still_active = std::make_shared<std::atomic<bool>>(true);
    auto release = [this, still_active] {
      if (still_active->exchange(false)) --active_;
    };
    auto provider = [this, reply, tokens, prompt_tokens, usage, chat, logprobs, arrival, release](
                        size_t, httplib::DataSink& sink) {
      auto write = [&sink](const std::string& text) { return sink.write(text.data(), text.size()); };
      const std::string object = chat ? "chat.completion.chunk" : "text_completion";
      if (chat)
        write(Event(
            {{"object", object}, {"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}}}}}));
      if (reply.stall) {
        while (!stopping_) {
          if (!write(": waiting\n\n")) return false;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return false;
      }
      const int64_t chunks = (tokens + reply.tokens_per_chunk - 1) / reply.tokens_per_chunk;
      for (int64_t i = 0; i < chunks; ++i) {
        SleepUntil(arrival + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(reply.ttft_s + static_cast<double>(i) * reply.itl_s)));
        if (stopping_ || i == reply.disconnect_after_chunks) return false;
        if (i == 0 && reply.garbage_chunk) {
          write("data: {this is not json\n\n");
          continue;
        }
        std::string text;
        nlohmann::json sampled = nlohmann::json::array();  // the logprob entries of this chunk's tokens
        for (int64_t t = i * reply.tokens_per_chunk; t < std::min(tokens, (i + 1) * reply.tokens_per_chunk); ++t) {
          if (!reply.empty_text) text += "tok ";
          sampled.push_back(chat ? nlohmann::json{{"token", ""}, {"logprob", -1.0}} : nlohmann::json(""));
        }
        if (reply.empty_text && !logprobs) continue;
        nlohmann::json choice = {{"index", 0}, {"finish_reason", nullptr}};
        if (chat) {
          choice["delta"] = {{"content", text}};
        } else {
          choice["text"] = text;
        }
        if (logprobs) {
          choice["logprobs"] = chat ? nlohmann::json{{"content", sampled}} : nlohmann::json{{"tokens", sampled}};
        }
        if (!write(Event({{"object", object}, {"choices", {choice}}}))) return false;
      }
      nlohmann::json finish = {{"index", 0}, {"finish_reason", "length"}};
      if (chat) {
        finish["delta"] = nlohmann::json::object();
      } else {
        finish["text"] = "";
      }
      write(Event({{"object", object}, {"choices", {finish}}}));
      if (usage) {
        const int64_t completion = reply.usage_completion_tokens >= 0 ? reply.usage_completion_tokens : tokens;
        write(Event({{"object", object},
                     {"choices", nlohmann::json::array()},
                     {"usage",
                      {{"prompt_tokens", prompt_tokens},
                       {"completion_tokens", completion},
                       {"total_tokens", prompt_tokens + completion}}}}));
      }
      ++completed_;  // counted before [DONE], so a /metrics scrape after the reply sees it
      release();
      write("data: [DONE]\n\n");
      sink.done();
      return true;
    };
    res.set_chunked_content_provider("text/event-stream", provider, [release](bool) { release(); });
  }

  Script script_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mutex_;
  std::vector<nlohmann::json> bodies_;
  std::vector<std::string> paths_;
  std::map<std::string, int32_t> word_ids_;
  std::vector<std::string> words_;
  std::atomic<int64_t> next_request_{0};
  std::atomic<int> active_{0};
  std::atomic<int> max_active_{0};
  std::atomic<int64_t> completed_{0};
};

}  // namespace glint::bench::fake
