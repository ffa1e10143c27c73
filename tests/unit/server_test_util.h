// Helpers of the in-process server tests (server_test.cc, server_limits_test.cc): a test tokenizer and template,
// raw-socket HTTP exchanges, SSE parsing, and a server on a free loopback port against the scripted backend.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"
#include "fake_backend.h"
#include "modelgen/tokenizer_files.h"
#include "server/http_server.h"
#include "test_util.h"
#include "tokenizer/image_tokens.h"

namespace glint::server {

using testing::FakeBackend;

inline const Tokenizer& TestTokenizer() {
  static const Tokenizer* tokenizer = [] {
    auto files = MakeTinyTokenizerFiles(2048);
    GLINT_CHECK(files.ok()) << files.status().ToString();
    auto loaded = Tokenizer::FromJson(files->tokenizer_json);
    GLINT_CHECK(loaded.ok()) << loaded.status().ToString();
    return new Tokenizer(std::move(loaded).value());
  }();
  return *tokenizer;
}

inline const ChatTemplate& TestTemplate() {
  static const ChatTemplate* chat_template = [] {
    auto text = ReadFile(glint::testing::TestDataPath("chat_templates/glm53.jinja"));
    GLINT_CHECK(text.ok());
    auto loaded = ChatTemplate::FromSource(*text, "glm53.jinja");
    GLINT_CHECK(loaded.ok()) << loaded.status().ToString();
    return new ChatTemplate(std::move(loaded).value());
  }();
  return *chat_template;
}

struct HttpReply {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;  // de-chunked
  Json json() const { return Json::parse(body); }
  std::string header(const std::string& name) const {
    const std::string key = "\r\n" + name + ": ";
    const size_t at = head.find(key);
    if (at == std::string::npos) return "";
    const size_t end = head.find("\r\n", at + key.size());
    return head.substr(at + key.size(), end - at - key.size());
  }
};

inline int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  GLINT_CHECK(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  timeval timeout{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

inline void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

inline std::string Dechunk(const std::string& raw) {
  std::string out;
  size_t at = 0;
  while (at < raw.size()) {
    const size_t line_end = raw.find("\r\n", at);
    if (line_end == std::string::npos) break;
    const size_t size = std::stoul(raw.substr(at, line_end - at), nullptr, 16);
    if (size == 0) break;
    out += raw.substr(line_end + 2, size);
    at = line_end + 2 + size + 2;
  }
  return out;
}

inline HttpReply ParseReply(const std::string& raw) {
  HttpReply reply;
  const size_t split = raw.find("\r\n\r\n");
  if (split == std::string::npos) return reply;
  reply.head = raw.substr(0, split);
  reply.status = std::stoi(raw.substr(9, 3));
  const std::string rest = raw.substr(split + 4);
  reply.body = reply.head.find("Transfer-Encoding: chunked") != std::string::npos ? Dechunk(rest) : rest;
  return reply;
}

inline std::string RequestText(const std::string& method, const std::string& path, const std::string& body,
                               const std::vector<std::string>& headers = {}) {
  std::string text = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const std::string& header : headers) text += header + "\r\n";
  if (method == "POST")
    text += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return text + "\r\n" + body;
}

// One request on a fresh connection (Connection: close); the whole reply.
inline HttpReply Exchange(int port, const std::string& method, const std::string& path, const std::string& body = "",
                          const std::vector<std::string>& headers = {}) {
  const int fd = Connect(port);
  SendAll(fd, RequestText(method, path, body, headers));
  std::string raw;
  char buffer[65536];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    raw.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return ParseReply(raw);
}

inline HttpReply Post(int port, const std::string& path, const Json& body,
                      const std::vector<std::string>& headers = {}) {
  return Exchange(port, "POST", path, body.dump(), headers);
}

// The JSON of each `data:` event of an SSE body, and whether it ended with [DONE].
inline std::vector<Json> Events(const std::string& body, bool* done = nullptr) {
  std::vector<Json> events;
  if (done != nullptr) *done = false;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    if (data == "[DONE]") {
      if (done != nullptr) *done = true;
    } else {
      events.push_back(Json::parse(data));
    }
    at = end;
  }
  return events;
}

class TestServer {
 public:
  explicit TestServer(ServerOptions options = {}, int64_t max_model_len = 4096, int64_t max_running = 4)
      : backend_(max_model_len, max_running) {
    options.port = 0;
    options.log_requests = false;
    options.model_names = {"glm-test", "alias"};
    options.shutdown_grace_seconds = 2;
    if (options.images.image_token_id < 0) {
      // As glint serve does (cmd_serve.cc), from the test tokenizer's spelled tokens: its model has no config.json.
      auto tokens = ResolveImageTokens(-1, -1, -1, &TestTokenizer());
      GLINT_CHECK(tokens.ok());
      options.images.image_token_id = tokens->image;
      options.images.marker_text = ImageMarkerText(*tokens, TestTokenizer()).value();
    }
    server_ = std::make_unique<HttpServer>(options, TestTokenizer(), &TestTemplate(), backend_);
    GLINT_CHECK(server_->Bind().ok());
    thread_ = std::thread([this] { run_status_ = server_->Run(); });
  }
  ~TestServer() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    server_->Shutdown();
    thread_.join();
  }
  int port() const { return server_->port(); }
  FakeBackend& backend() { return backend_; }
  HttpServer& server() { return *server_; }
  const Status& run_status() const { return run_status_; }

 private:
  FakeBackend backend_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  Status run_status_;
};

inline Json UserChat(const std::string& text) { return {{"messages", {{{"role", "user"}, {"content", text}}}}}; }

}  // namespace glint::server
